"""Replay: a host's own history through a policy, on the simulator's engine.

Theory of operation
-------------------
``prepare`` reads a ``History`` once: its pairs (sorted, so pair indexes
break ties as ``plan_tick`` does), its todos numbered in creation order,
and a model of its consumers; ``replay`` runs one policy over it on the
engine of ``run`` (``check=True`` holds every tick to ``plan_tick``).

Ticks fall every ``tick`` from the first recorded nudge's instant (from
the window's start without records), so a sweep that ran on a steady
interval is replayed on its own instants.

The consumer model. Each claim in the window is read against the wakes
its pair had: the creation wake of each todo created in the window (when
a hook covered the pair) and each recorded nudge. A claim no later than
``wake_window`` after the pair's latest wake followed that wake, after the
delay seen; any other claim was a pull, and stays at its recorded instant
whatever the policy. In the replay:

- a creation wake that reaches the consumer brings the claims that
  followed it, each after its delay (so at their recorded instants);
- the replay's Nth delivered nudge of a pair is answered as the Nth
  recorded one that reached a receiver was (a charge whose outcome says it
  reached nobody woke no consumer, so no claim follows it): the claims
  that followed it, each after its delay from the replayed nudge, or
  nothing when none followed (an answer whose todo would not exist yet
  waits for the next nudge);
- a creation wake a fault loses leaves its claims to the pair's next
  delivered nudge, which answers them first.

So a replay of the policy that really ran puts every claim at its
recorded instant and, where nudges were recorded, sends the same nudges
(``compare_nudges`` counts every recorded charge, delivered or not, as
the sweep's reports list them). What a replay cannot know is listed in
``notes``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from stall_core import (
    TodoRef,
    covers,
    endpoint_active,
    format_duration,
    has_receiver,
    work_of,
)

from .board import SimHook, SimPair
from .events import Claimed, Created
from .faults import Faults
from .history import History, HistoryError, HistoryHook, HistoryTodo, RecordedNudge
from .result import SimResult
from .rules import micros
from .run import CLAIM, CREATE, NUDGE, _Run
from .scenario import Poisson, RandomSource, Scenario, SimPolicy

__all__ = ["NudgeMatch", "Prepared", "compare_nudges", "prepare", "replay", "scenario_of"]

#: A claim that followed a wake: (todo number, microseconds after the wake).
Answer = tuple[int, int]


@attrs.frozen(kw_only=True)
class Prepared:
    """A history read for replay: pairs, numbered todos, the consumer model, and notes."""

    start: datetime
    duration: timedelta
    tick: timedelta
    keys: tuple[tuple[str, str], ...]
    receivers: tuple[bool, ...]
    active: tuple[bool, ...]
    hooks: tuple[HistoryHook, ...]
    #: By todo number: id, pair index, creation (microseconds after ``start``), gate, work.
    names: tuple[str, ...]
    pair_of: tuple[int, ...]
    created_us: tuple[int, ...]
    gate: tuple[bool, ...]
    work: tuple[bool, ...]
    #: Todos pending when the run starts (numbers ``0..preexisting-1``), with no creation wake.
    preexisting: int
    #: Claims kept at their recorded instant: (microseconds, todo number).
    pulls: tuple[tuple[int, int], ...]
    #: The claims each creation wake brought, by the created todo's number.
    after_creation: dict[int, tuple[Answer, ...]]
    #: By pair index, the claims that followed each recorded nudge, in order.
    after_nudges: tuple[tuple[tuple[Answer, ...], ...], ...]
    #: The recorded nudges inside the run.
    recorded: tuple[RecordedNudge, ...] | None
    #: What the replay left out or cannot know, one line each.
    notes: tuple[str, ...]
    #: Claims by how they are replayed: after a creation wake, after a nudge, pulls.
    claims_by_wake: tuple[int, int, int]


def prepare(
    history: History,
    *,
    tick: timedelta = timedelta(seconds=15),
    wake_window: timedelta = timedelta(minutes=1),
) -> Prepared:
    """Read ``history`` for replay; raises ``HistoryError`` for a window shorter than a tick."""
    notes: list[str] = []
    start = history.start
    inside = [n for n in history.nudges or () if history.start <= n.charged_at <= history.end]
    if history.nudges is not None and len(inside) < len(history.nudges):
        notes.append(
            f"{len(history.nudges) - len(inside)} recorded nudge(s) outside the window: ignored"
        )
    if inside:  # the grid runs through the first recorded nudge
        start = inside[0].charged_at + ((start - inside[0].charged_at) // tick) * tick
    duration = history.end - start
    if duration < tick:
        raise HistoryError(
            f"the window ({format_duration(duration)}) is shorter than one tick "
            f"({format_duration(tick)})"
        )

    kept: list[HistoryTodo] = []
    unstamped = requeued = 0
    for todo in history.todos:
        if todo.created_at > history.end:
            continue
        if todo.state != "pending" and todo.claimed_at is None:
            unstamped += 1
            continue
        if todo.state != "pending" and todo.claimed_at is not None and todo.claimed_at < start:
            continue  # claimed before the run: not on its board
        if todo.state == "pending" and todo.claimed_at is not None:
            requeued += 1
        kept.append(todo)
    if unstamped:
        notes.append(
            f"{unstamped} todo(s) left pending with no claim stamp (finished unclaimed, "
            "or stamps cleared): left out, as the time they left is unknown"
        )
    if requeued:
        notes.append(f"{requeued} requeued todo(s) (pending with a claim stamp): never claimed")
    kept.sort(key=lambda t: (t.created_at >= start, t.created_at, t.id))
    keys = sorted({(t.endpoint_id, t.queue) for t in kept})
    index = {key: i for i, key in enumerate(keys)}
    hooks = (
        history.hooks
        if history.hooks is not None
        else tuple(
            HistoryHook(id=f"h-{e}", endpoint_id=e, queues=None, enabled=True)
            for e in sorted({e for e, _ in keys})
        )
    )
    hook_rows = [(h.enabled, h.endpoint_id, h.queues) for h in hooks]
    receivers = tuple(has_receiver(hook_rows, e, q) for e, q in keys)
    states = history.endpoints
    active = tuple(endpoint_active("active" if states is None else states.get(e)) for e, _ in keys)
    if states is None:
        notes.append("no endpoint records: every endpoint taken as active")
    if history.hooks is None:
        notes.append("no hook records: every endpoint taken to have one hook covering all queues")
    notes.append(
        "endpoints and hooks are replayed as they are at the window's end, for the whole window"
    )

    preexisting = sum(1 for t in kept if t.created_at < start)
    if preexisting:
        notes.append(
            f"{preexisting} todo(s) pending when the window opened start with no ledger row: "
            "the real ledger may have nudged them already"
        )
    notes.append("a todo deleted before the window's end is not in the history: it is not replayed")

    names = tuple(t.id for t in kept)
    created_us = tuple(micros(t.created_at - start) for t in kept)
    gate = tuple(t.verified for t in kept)  # the reader applied stall_core.passes_gate
    work = tuple(
        ok
        and work_of(
            (TodoRef(id=t.id, created_at=t.created_at),),
            endpoint_id=t.endpoint_id,
            queue=t.queue,
        )
        is not None
        for t, ok in zip(kept, gate, strict=True)
    )
    pair_of = tuple(index[t.endpoint_id, t.queue] for t in kept)

    # The wakes of each pair: (instant, 0, todo number) for a creation, (instant, 1, rank)
    # for the rank-th recorded nudge; a claim follows the latest one before it.
    wakes: list[list[tuple[int, int, int]]] = [[] for _ in keys]
    for number in range(preexisting, len(kept)):
        if receivers[pair_of[number]]:
            wakes[pair_of[number]].append((created_us[number], 0, number))
    ranks = [0] * len(keys)
    for nudge in inside:
        pair = index.get((nudge.endpoint_id, nudge.queue))
        if pair is not None and nudge.reached:
            wakes[pair].append((micros(nudge.charged_at - start), 1, ranks[pair]))
            ranks[pair] += 1
    unreached = sum(not n.reached for n in inside)
    if unreached:
        notes.append(
            f"{unreached} recorded nudge(s) reached no receiver: no claim answers them, and "
            "the replay delivers every nudge a receiver outage does not fail, so their pairs' "
            "later nudges may differ from the record"
        )
    for pair_wakes in wakes:
        pair_wakes.sort()
    window_us = micros(wake_window)
    pulls: list[tuple[int, int]] = []
    after_creation: dict[int, list[Answer]] = {}
    after_nudges: list[list[list[Answer]]] = [[[] for _ in range(r)] for r in ranks]
    clamped = 0
    for number, todo in enumerate(kept):
        if todo.state == "pending" or todo.claimed_at is None or todo.claimed_at > history.end:
            continue
        at = micros(todo.claimed_at - start)
        if at < created_us[number]:
            at, clamped = created_us[number], clamped + 1
        pair_wakes = wakes[pair_of[number]]
        latest = bisect.bisect_right(pair_wakes, (at, 2, 0)) - 1
        if latest < 0 or at - pair_wakes[latest][0] > window_us:
            pulls.append((at, number))
            continue
        woke_at, kind, ref = pair_wakes[latest]
        answer = (number, at - woke_at)
        if kind == 0:
            after_creation.setdefault(ref, []).append(answer)
        else:
            after_nudges[pair_of[number]][ref].append(answer)
    if clamped:
        notes.append(f"{clamped} claim stamp(s) before their todo's creation: claimed at creation")
    if history.nudges is None:
        notes.append(
            "no nudge records: a claim a nudge brought about is replayed as a pull, at its "
            "recorded instant, whatever the policy"
        )
    by_creation = sum(len(a) for a in after_creation.values())
    by_nudge = sum(len(a) for answers in after_nudges for a in answers)
    return Prepared(
        start=start,
        duration=duration,
        tick=tick,
        keys=tuple(keys),
        receivers=receivers,
        active=active,
        hooks=hooks,
        names=names,
        pair_of=pair_of,
        created_us=created_us,
        gate=gate,
        work=work,
        preexisting=preexisting,
        pulls=tuple(sorted(pulls)),
        after_creation={k: tuple(v) for k, v in after_creation.items()},
        after_nudges=tuple(tuple(tuple(a) for a in answers) for answers in after_nudges),
        recorded=tuple(inside) if history.nudges is not None else None,
        notes=tuple(notes),
        claims_by_wake=(by_creation, by_nudge, len(pulls)),
    )


def replay(
    prepared: Prepared,
    policy: SimPolicy,
    *,
    chance: RandomSource,
    faults: Faults | None = None,
    record: bool = False,
    check: bool = False,
    samples: int = 400,
) -> SimResult:
    """Run ``policy`` over a prepared history; ``chance`` draws lost creation wakes only."""
    run = _Replay(
        prepared,
        policy,
        chance=chance,
        record=record,
        check=check,
        faults=faults if faults is not None else Faults(),
        samples=samples,
    )
    return run.run()


def scenario_of(prepared: Prepared, samples: int = 400) -> Scenario:
    """The board a replay runs on, as a scenario: its pairs, span and tick; no arrivals."""
    return Scenario(
        pairs=len(prepared.keys),
        duration=prepared.duration,
        tick=prepared.tick,
        arrivals=Poisson(per_hour=0.0),
        start=prepared.start,
        samples=samples,
    )


@attrs.frozen(kw_only=True)
class NudgeMatch:
    """How many recorded nudges a replay sent again, and how many it sent with no record."""

    recorded: int
    reproduced: int
    unrecorded: int


def compare_nudges(prepared: Prepared, result: SimResult) -> NudgeMatch | None:
    """Recorded nudges the replay (``record=True``) sent too: same pair, number and todo,
    charged within one tick of the record; None with no records."""
    if prepared.recorded is None:
        return None
    left = list(result.nudge_log)
    reproduced = 0
    for recorded in prepared.recorded:
        for i, sent in enumerate(left):
            same = (sent.endpoint_id, sent.queue, sent.number, sent.todo.id) == (
                recorded.endpoint_id,
                recorded.queue,
                recorded.number,
                recorded.todo_id,
            )
            if same and abs(sent.charged_at - recorded.charged_at) < prepared.tick:
                reproduced += 1
                del left[i]
                break
    return NudgeMatch(recorded=len(prepared.recorded), reproduced=reproduced, unrecorded=len(left))


class _Replay(_Run):
    """The engine with a history's host: its todos, its claims and its consumers' answers."""

    __slots__ = ("answered", "orphans", "prepared")

    def __init__(
        self,
        prepared: Prepared,
        policy: SimPolicy,
        *,
        chance: RandomSource,
        record: bool,
        check: bool,
        faults: Faults,
        samples: int,
    ) -> None:
        self.prepared = prepared
        #: By pair index: how many recorded nudge answers the replay used.
        self.answered = [0] * len(prepared.keys)
        #: By pair index: answers to creation wakes a fault lost, for the next nudge.
        self.orphans: list[list[tuple[Answer, ...]]] = [[] for _ in prepared.keys]
        super().__init__(
            scenario_of(prepared, samples),
            policy,
            workload=chance,
            chance=chance,
            record=record,
            check=check,
            faults=faults,
            origin_us=min(0, min(prepared.created_us, default=0)),
        )
        self.names = list(prepared.names)

    def _layout(self) -> list[SimPair]:
        p = self.prepared
        return [
            SimPair(i, e, q, p.receivers[i], endpoint_active=p.active[i])
            for i, (e, q) in enumerate(p.keys)
        ]

    def _hooks(self) -> list[SimHook]:
        hooks = []
        for h in self.prepared.hooks:
            hook = SimHook(id=h.id, endpoint_id=h.endpoint_id, queues=h.queues, enabled=h.enabled)
            for pair in self.pairs:
                if covers(h.endpoint_id, h.queues, pair.endpoint_id, pair.queue):
                    hook.pairs.append(pair)
                    pair.hooks.append(hook)
            hooks.append(hook)
        return hooks

    def _start(self) -> None:
        p = self.prepared
        for number in range(p.preexisting):
            self._add(self.pairs[p.pair_of[number]], number, p.created_us[number])
        for pair in self.pairs:
            if pair.sendable:
                self._reschedule(pair, 0)
        for number in range(p.preexisting, len(p.names)):
            self._push_timed(p.created_us[number], CREATE, self._on_create, number)
        for at, number in p.pulls:
            self._push_timed(at, CLAIM, self._on_claim, number)

    def _add(self, pair: SimPair, number: int, at: int) -> None:
        """Todo ``number`` is on the board from ``at``."""
        p, tally = self.prepared, self.tally
        assert number == tally.todos  # created in number order
        tally.todos += 1
        self.created_us.append(at)
        self.verified.append(p.gate[number])
        pair.pending.append(number)
        if p.work[number]:
            pair.sendable.append(number)
        if self.record:
            tally.trace.append(
                Created(
                    at=self.timeline.instant(at),
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    todo_id=p.names[number],
                    verified=p.gate[number],
                )
            )

    def _on_create(self, at: int, arg: Any) -> None:
        number: int = arg
        pair = self.pairs[self.prepared.pair_of[number]]
        self._add(pair, number, at)
        if pair.has_receiver:
            self.tally.creation_wakes += 1
            if self.creation_loss and self.draw_chance() < self.creation_loss:
                self.tally.creation_wakes_dropped += 1
                self._missed(pair, number)
            elif pair.down is not None:
                self._send(pair, at, number, None)
            else:
                self._wake(pair, at, number)
        if self.prepared.work[number] and len(pair.sendable) == 1:
            self._reschedule(pair, at)

    def _on_claim(self, at: int, arg: Any) -> None:
        number: int = arg
        pair = self.pairs[self.prepared.pair_of[number]]
        pair.pending.remove(number)
        if self.prepared.work[number]:
            pair.sendable.remove(number)
        tally = self.tally
        tally.waits_us.append(at - self.created_us[number])
        tally.claims += 1
        if self.record:
            tally.trace.append(
                Claimed(at=self.timeline.instant(at), todo_id=self.prepared.names[number])
            )
        pair.last_claim_us = at
        charged = pair.charged_us
        if charged is not None and pair.progress_us <= charged:
            pair.progress_us = at
        self._reschedule(pair, at)

    def _wake(self, pair: SimPair, now: int, cause: int) -> bool:
        """The pair's consumer answers as the history shows (see the module's docstring)."""
        self.tally.consumers_started += 1
        if cause != NUDGE:
            self._answer(self.prepared.after_creation.get(cause, ()), now)
            return True
        orphans = self.orphans[pair.index]
        if orphans and self._answerable(orphans[0], now):
            self._answer(orphans.pop(0), now)
            return True
        rank = self.answered[pair.index]
        answers = self.prepared.after_nudges[pair.index]
        if rank < len(answers) and self._answerable(answers[rank], now):
            self.answered[pair.index] = rank + 1
            self._answer(answers[rank], now)
        return True

    def _missed(self, pair: SimPair, cause: int) -> None:
        answers = self.prepared.after_creation.get(cause)
        if answers:
            self.orphans[pair.index].append(answers)

    def _answerable(self, answers: Sequence[Answer], now: int) -> bool:
        """Every todo the answer claims exists by its claim."""
        created = self.prepared.created_us
        return all(created[number] <= now + delay for number, delay in answers)

    def _answer(self, answers: Sequence[Answer], now: int) -> None:
        for number, delay in answers:
            self._push_timed(now + delay, CLAIM, self._on_claim, number)
