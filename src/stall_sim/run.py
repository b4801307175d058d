"""The event loop: host events in time order, sweeps only on the ticks that can act.

The run goes from tick to tick: first the host events up to the tick's
instant (the next ``Arrival`` of some pair, or a started consumer's
``ConsumerClaims``, earliest first; host events at a tick's own instant come
before its sweep), then the tick's sweep if the agenda lists it or due
pairs are held back. Every change to a pair's work or ledger row
reschedules it (``_reschedule``): a pair due on the very next sweep joins
``DuePairs`` at once under its charge rank; one that acts later goes on the
agenda for the first tick where ``decide`` would charge it or clear its row
(``rules``), and joins ``DuePairs`` (or has its row cleared) on that tick.
Each sweep then charges the best ``tick_limit`` due pairs. Due pairs left
over are the ones the tick limit holds back on a real board; they keep
their rank until their state changes.

A pair is looked at nowhere while it is idle, waiting for work or capped
(``plan_tick`` would not act on it), nor on any tick after a claim already
on its way: that claim reschedules it.

The sweep decides with plain integers (``rules``) and builds no core
values; a recorded run builds the ``Nudge`` of each charge for its log.
With ``check`` every tick is swept and ``plan_tick`` over the whole board,
as a ledger would read it, must charge and clear exactly what the run did.

A fleet's time goes on its todos, so the loop writes the common one out
(``_host_events_until``): an arrival whose wake starts the consumer runs
that consumer's claim at once when nothing reads the pair before it (no
sweep, sample or timed event, and not the pair's own next arrival, which is
drawn first), as no other pair's event does. The claim finds the pair as it
would have, and the draws come in the same order, so results are those of
running every event in its turn.

Faults (``faults``) add a third kind of host event, kept in ``timed``: the
outcome of a delivery a receiver outage delayed or failed, which may
disable a hook and refund a nudge. A sweeper outage skips its ticks; the
pairs listed on them wait for the first tick after it. A replay
(``replay``) feeds its todos' creations and claims through ``timed`` too.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

from stall_core import (
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    TodoRef,
    capped,
    endpoint_active,
    has_receiver,
    passes_gate,
    plan_tick,
    refunded_row,
    work_of,
)

from .board import NOT_SCHEDULED, SimHook, SimPair, todo_id
from .events import Arrival, Claimed, ConsumerClaims, Created
from .faults import Delivery, Faults, delivery_outcome
from .result import SimResult, Tally, Timeseries, WaitStats, percentile
from .rules import (
    ChargeOrder,
    DueTicks,
    Timeline,
    first_stalled_tick,
    has_unconsumed_claim,
    micros,
    nudges_spent,
)
from .scenario import Bursts, ConsumerKind, RandomSource, Scenario, SimPolicy, pair_keys
from .sweep import DuePairs, SweepAgenda

__all__ = ["simulate"]

_HOUR_US = 3_600_000_000

#: Order of timed host events at one instant: a creation, then a claim, then a delivery's end.
CREATE, CLAIM, DELIVERED = 0, 1, 2

#: A timed host event: (instant, order, sequence number, handler, argument).
Timed = tuple[int, int, int, Callable[[int, Any], None], Any]

#: A cause of ``_Run._wake`` that is a nudge; a creation wake's is its todo's number.
NUDGE = -1


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    workload: RandomSource,
    chance: RandomSource,
    record: bool = False,
    check: bool = False,
    faults: Faults | None = None,
) -> SimResult:
    """Run ``policy`` over ``scenario``; deterministic for given generator states.

    ``workload`` draws the layout and the arrivals only, so every policy sees
    the same todos; ``chance`` draws lost wakes and flaky claims. With
    ``record`` the result keeps every nudge, every host event and the layout.
    With ``check`` every tick also runs ``plan_tick`` over the whole board and
    raises ``AssertionError`` if it charges or clears other than the run did;
    that is slow, and meant for tests. Neither changes the result. ``faults``
    adds receiver and sweeper outages and lost creation wakes (``faults``).
    """
    run = _Run(
        scenario,
        policy,
        workload=workload,
        chance=chance,
        record=record,
        check=check,
        faults=faults if faults is not None else Faults(),
    )
    return run.run()


class _Run:
    """One policy over one scenario."""

    # Slots: with more attributes than CPython specializes in an instance
    # dict (30), every ``self.`` lookup in the hot loop would be a dict search.
    __slots__ = (
        "agenda",
        "arrival",
        "arrivals",
        "arrivals_per_us",
        "buckets",
        "chance",
        "check",
        "claim_probability",
        "claims",
        "claims_when_started",
        "created_us",
        "creation_loss",
        "delivery",
        "down_ticks",
        "draw_chance",
        "draw_gap",
        "draw_workload",
        "due",
        "due_ticks",
        "end_us",
        "flaky",
        "flaky_miss",
        "hooks",
        "last_tick",
        "latency_us",
        "loaded",
        "names",
        "no_event",
        "pacing",
        "pair_count",
        "pairs",
        "policy",
        "record",
        "scenario",
        "scheduled",
        "service_us",
        "sweeping",
        "tally",
        "threshold_us",
        "tick_us",
        "timed",
        "timeline",
        "unverified_share",
        "verified",
        "wake_loss",
        "workload",
    )

    def __init__(
        self,
        scenario: Scenario,
        policy: SimPolicy,
        *,
        workload: RandomSource,
        chance: RandomSource,
        record: bool,
        check: bool,
        faults: Faults,
        origin_us: int = 0,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.pacing = policy.pacing
        self.sweeping = policy.pacing is not None
        self.workload = workload
        self.chance = chance
        # Bound once: a run draws millions of times.
        self.draw_workload = workload.random
        self.draw_gap = workload.expovariate
        self.draw_chance = chance.random
        self.record = record
        self.check = check and self.sweeping
        self.timeline = Timeline(
            start=scenario.start,
            tick_us=micros(scenario.tick),
            end_us=micros(scenario.duration),
        )
        self.end_us = self.timeline.end_us
        self.tick_us = self.timeline.tick_us
        self.last_tick = self.timeline.last_tick
        self.threshold_us = micros(self.pacing.threshold) if self.pacing else 0
        self.due_ticks = (
            DueTicks(policy=self.pacing, timeline=self.timeline) if self.pacing else None
        )

        arrivals = scenario.arrivals
        self.arrival = Arrival(todos=arrivals.size if isinstance(arrivals, Bursts) else 1)
        self.arrivals_per_us = arrivals.per_hour / _HOUR_US

        consumer = scenario.consumer
        self.latency_us = micros(consumer.latency)
        self.service_us = micros(consumer.service)
        self.flaky = consumer.kind is ConsumerKind.FLAKY
        self.claim_probability = consumer.claim_probability
        self.unverified_share = scenario.unverified_share
        self.wake_loss = scenario.wake_loss
        self.creation_loss = faults.lost_creation_wakes
        self.delivery: Delivery | None = faults.delivery
        #: Ranges of ticks ``[first, after)`` a sweeper outage skips, in order.
        self.down_ticks = self._down_ticks(faults)
        #: Timed host events, a heap (see ``Timed``).
        self.timed: list[Timed] = []
        #: Todo ids by number when they are not ``todo_id``'s (a replay's).
        self.names: list[str] | None = None
        #: What a started consumer does; None for a dead one, which exits at once.
        self.claims_when_started: ConsumerClaims | None = {
            ConsumerKind.ONE_SHOT: ConsumerClaims(up_to=1),
            ConsumerKind.BATCH: ConsumerClaims(up_to=consumer.batch),
            ConsumerKind.FLAKY: ConsumerClaims(up_to=1),
            ConsumerKind.DEAD: None,
        }[consumer.kind]
        self.flaky_miss = ConsumerClaims(up_to=0)

        #: The creation instant of every todo, by todo number. Arrays, here and
        #: for the waits, not lists: millions of long-lived int objects would
        #: scatter the short-lived ones the hot loop uses and cost it its cache.
        self.created_us: array[int] = array("q")
        #: Whether each todo's delivery passes the gate (1) or not (0), by todo number.
        self.verified = bytearray()
        #: Host events wait for their instant in two heaps of event keys, each
        #: ``at_us * pairs + pair index`` (ints sift faster than tuples). A pair
        #: has at most one arrival and one claim on its way, so keys are unique
        #: in a heap, and comparing keys orders events by instant, then pair.
        #: Its arrival and its claim at one instant run in the order they were
        #: scheduled: ``arrival_seq`` and ``claim_seq`` of the pair, numbered
        #: from ``scheduled``, the last sequence number used.
        #: Each heap keeps ``no_event``, a key past every host event the run
        #: acts on (after its end), so its top is always a key.
        self.no_event = (self.timeline.end_us + 1) * scenario.pairs
        self.arrivals: list[int] = [self.no_event]
        #: Arrival keys later than the heap holds, by the tick that first sees them
        #: (``tick_at_or_after``): a pair's next arrival is mostly hours away, and
        #: a list per tick costs an append where a heap of every pair's key costs
        #: a dozen compares. Tick ``loaded``'s list and those before it are in the heap.
        self.buckets: dict[int, list[int]] = {}
        self.loaded = -1
        self.claims: list[int] = [self.no_event]
        self.scheduled = 0
        self.agenda = SweepAgenda()
        self.due = DuePairs(
            order=ChargeOrder(
                pairs=scenario.pairs, end_us=self.timeline.end_us, origin_us=origin_us
            )
        )
        self.tally = Tally()
        self.pairs = self._layout()
        self.pair_count = len(self.pairs)
        self.hooks: list[SimHook] = self._hooks() if faults.receiver_outages else []
        for outage in faults.receiver_outages:
            window = (micros(outage.window.start), micros(outage.window.end), outage.mode)
            for pair in self.pairs:
                if pair.endpoint_id == outage.endpoint_id:
                    pair.down = [*(pair.down or ()), window]

    def _down_ticks(self, faults: Faults) -> list[tuple[int, int]]:
        """The ticks each sweeper outage skips, as ranges ``[first, after)``, merged and sorted."""
        ranges: list[tuple[int, int]] = []
        for window in sorted(faults.sweeper_outages, key=lambda w: w.start):
            first = self.timeline.tick_at_or_after(micros(window.start))
            after = self.timeline.tick_at_or_after(micros(window.end))
            if first >= after:
                continue
            if ranges and first <= ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], max(after, ranges[-1][1]))
            else:
                ranges.append((first, after))
        return ranges

    def _running_tick(self, tick: int) -> int:
        """The first tick from ``tick`` on that a sweeper outage does not skip."""
        for first, after in self.down_ticks:
            if first <= tick < after:
                return after
        return tick

    def _hooks(self) -> list[SimHook]:
        """One hook per endpoint, covering the queues of its pairs that have a receiver."""
        hooks: dict[str, SimHook] = {}
        for pair in self.pairs:
            if not pair.has_receiver:
                continue
            hook = hooks.get(pair.endpoint_id)
            if hook is None:
                hook = hooks[pair.endpoint_id] = SimHook(
                    id=f"h-{pair.endpoint_id}", endpoint_id=pair.endpoint_id, queues=()
                )
            hook.queues = (*(hook.queues or ()), pair.queue)
            hook.pairs.append(pair)
            pair.hooks.append(hook)
        return list(hooks.values())

    def _layout(self) -> list[SimPair]:
        """The pairs; each endpoint's hook covers every queue, and a hookless pair has none."""
        share = self.scenario.hookless_share
        keys = pair_keys(self.scenario.pairs, self.scenario.queues_per_endpoint)
        pairs = []
        for index, (endpoint_id, queue) in enumerate(keys):
            hookless = share > 0 and self.workload.random() < share
            hooks = () if hookless else ((True, endpoint_id, None),)
            pairs.append(
                SimPair(index, endpoint_id, queue, has_receiver(hooks, endpoint_id, queue))
            )
        return pairs

    # -- the loop ----------------------------------------------------------------

    def run(self) -> SimResult:
        timeline, tally = self.timeline, self.tally
        self._start()
        samples = Timeseries(end_us=timeline.end_us, count=self.scenario.samples)
        down = self.down_ticks
        for tick in range(timeline.last_tick + 1):
            # Host events at a tick's instant come before its sweep.
            now = tick * timeline.tick_us
            self._host_events_until(now, samples)
            listed = self.agenda.pop(tick)
            if down and self._running_tick(tick) != tick:
                self._postpone(listed or [], tick)
                continue
            if listed is not None or self.due.count or self.check:
                samples.take_before(now, tally)
                self._sweep(tick, listed or [])
        self._host_events_until(timeline.end_us, samples)
        samples.finish(tally)
        return self._result(samples)

    def _start(self) -> None:
        """The backlog, and each pair's first arrival."""
        for pair in self.pairs:
            for _ in range(self.scenario.backlog):
                self._create(pair, 0)
        if self.arrivals_per_us > 0:
            for pair in self.pairs:
                first_at = int(self.workload.expovariate(self.arrivals_per_us))
                if first_at <= self.timeline.end_us:
                    self.scheduled += 1
                    pair.arrival_seq = self.scheduled
                    self._push_arrival(first_at, pair.index)

    def _push_arrival(self, at_us: int, index: int) -> None:
        """Schedule pair ``index``'s next arrival: in the heap if its tick is loaded."""
        key = at_us * self.pair_count + index
        tick = -(-at_us // self.tick_us)
        if tick <= self.loaded:
            heappush(self.arrivals, key)
        else:
            waiting = self.buckets.get(tick)
            if waiting is None:
                self.buckets[tick] = [key]
            else:
                waiting.append(key)

    def _postpone(self, listed: list[SimPair], tick: int) -> None:
        """A tick the sweeper skips: the pairs listed on it wait for the next one that runs."""
        resume = self._running_tick(tick)
        for pair in listed:
            if pair.agenda_tick != tick:
                continue
            if resume > self.last_tick:
                pair.agenda_tick = NOT_SCHEDULED
            else:
                pair.agenda_tick = resume
                self.agenda.add(pair, resume)

    def _push_timed(
        self, at_us: int, order: int, handler: Callable[[int, Any], None], arg: Any
    ) -> None:
        """Schedule a timed host event."""
        self.scheduled += 1
        heappush(self.timed, (at_us, order, self.scheduled, handler, arg))

    def _host_events_until(self, until_us: int, samples: Timeseries) -> None:
        """Run the host events at instants up to ``until_us`` in order, sampling on the way.

        A sample at instant ``s`` is taken before the first event or sweep
        after ``s``: host events compare as keys, so it is taken once every
        key before ``(floor(s) + 1) * pairs`` has run.

        The common arrival (one todo, no fault, no record, a consumer that
        claims) and the common claim run here, written out: the loop runs for
        every todo, and the calls of ``_arrive``, ``_create``, ``_wake``,
        ``_claim`` and ``_reschedule`` it saves were most of a fleet's time.
        Each written-out step says which method's it is; the methods handle
        every other case.
        """
        pairs, arrivals, claims, timed = self.pairs, self.arrivals, self.claims, self.timed
        pair_count, tick_us, tally = self.pair_count, self.tick_us, self.tally
        self._load_arrivals(-(-until_us // tick_us))
        # Bound once for the written-out steps.
        created_us, waits, verified_of = self.created_us, tally.waits_us, self.verified
        share, loss, sweeping = self.unverified_share, self.wake_loss, self.sweeping
        draw_workload, draw_chance, draw_gap = self.draw_workload, self.draw_chance, self.draw_gap
        per_us, end_us, latency_us = self.arrivals_per_us, self.end_us, self.latency_us
        service_us, loaded, buckets = self.service_us, self.loaded, self.buckets
        # Every simulated todo has a delivery: the gate reads only its flag.
        gate = (passes_gate(0, False), passes_gate(0, True))
        started = self.claims_when_started
        plain = (
            not self.record
            and self.arrival.todos == 1
            and not self.creation_loss
            and started is not None
            and not self.flaky
            and type(self)._wake is _Run._wake
        )
        until_key = (until_us + 1) * pair_count
        lived = 0  # todos whose whole life ran at their arrival, since the tally last had them
        while True:
            sample_key = (math.floor(samples.next_at_us) + 1) * pair_count
            horizon = min(sample_key, until_key)
            # A timed event at instant t comes after the heaps' events before t, before theirs at t.
            timed_key = timed[0][0] * pair_count if timed else until_key
            stop = min(horizon, timed_key)
            while True:
                arrival_key, claim_key = arrivals[0], claims[0]
                if claim_key < arrival_key or (
                    claim_key == arrival_key < stop and self._claim_comes_first(claim_key)
                ):
                    if claim_key >= stop:
                        break
                    heappop(claims)
                    at_us, index = divmod(claim_key, pair_count)
                    pair = pairs[index]
                    pending = pair.pending
                    claim = pair.claim
                    if self.record or claim is None or claim.up_to != 1 or not pending:
                        self._claim(pair, at_us)
                        continue
                    # _claim: the consumer claims its oldest pending todo, then serves it.
                    pair.claim = pair.claim_at_us = None
                    number = pending.pop(0)
                    sendable = pair.sendable
                    if sendable and sendable[0] == number:
                        sendable.pop(0)
                    waits.append(at_us - created_us[number])
                    pair.busy_until_us = at_us + service_us
                    tally.claims += 1
                    pair.last_claim_us = at_us
                    charged = pair.charged_us
                    if charged is not None and pair.progress_us <= charged:
                        pair.progress_us = at_us
                    if sweeping:
                        if charged is None and not sendable and pair.held_rank is None:
                            pair.agenda_tick = NOT_SCHEDULED  # _reschedule: nothing to decide
                        else:
                            self._reschedule(pair, at_us)
                elif arrival_key < stop:
                    heappop(arrivals)
                    at_us, index = divmod(arrival_key, pair_count)
                    pair = pairs[index]
                    if not plain or pair.down is not None:
                        self._arrive(pair, at_us)
                        continue
                    # _create: one todo, pending, sendable if it passes the gate.
                    number = tally.todos
                    tally.todos = number + 1
                    created_us.append(at_us)
                    verified = not share or draw_workload() >= share
                    verified_of.append(verified)
                    gated = gate[verified]
                    if not pair.has_receiver:
                        pair.pending.append(number)
                        if gated:
                            pair.sendable.append(number)
                        # _arrive: the one after it.
                        next_at = at_us + int(draw_gap(per_us))
                    else:
                        tally.creation_wakes += 1
                        # _wake: its creation wake.
                        if loss and draw_chance() < loss:
                            tally.wakes_lost += 1
                            woken = False
                        else:
                            woken = pair.busy_until_us <= at_us
                        claim_at = at_us + latency_us
                        # _arrive: the one after it, drawn now to know whether it
                        # comes before this todo's claim (workload draws only).
                        next_at = at_us + int(draw_gap(per_us))
                        if (
                            woken
                            and pair.claim is None
                            and next_at >= claim_at  # at one instant its claim is first
                            and claim_at * pair_count + index < stop
                        ):
                            # Its claim, now: nothing reads the pair before it (the next
                            # sweep, sample and timed event, and its own next arrival, all
                            # come later; no other pair's event reads it), so the claim
                            # finds the pair as it is now. Its wake started the consumer,
                            # so the claim comes before the next sweep, and _reschedule at
                            # the creation finds nothing to decide.
                            self.scheduled = pair.claim_seq = self.scheduled + 1
                            pending = pair.pending
                            if not pending and pair.charged_us is None and pair.held_rank is None:
                                # _claim takes this very todo and leaves nothing to decide:
                                # one consumer start, one claim and one wait of ``latency``,
                                # added to the tally when the loop stops.
                                lived += 1
                                pair.busy_until_us = claim_at + service_us
                                pair.last_claim_us = claim_at
                                if sweeping:
                                    pair.agenda_tick = NOT_SCHEDULED
                            else:
                                tally.consumers_started += 1
                                pending.append(number)
                                sendable = pair.sendable
                                if gated:
                                    sendable.append(number)
                                    if sweeping and len(sendable) == 1:
                                        if pair.held_rank is not None:
                                            self.due.drop(pair)
                                        pair.agenda_tick = NOT_SCHEDULED
                                # _claim, at claim_at: the oldest pending todos.
                                assert started is not None  # plain
                                up_to, taken = started.up_to, 0
                                while taken < up_to and pending:
                                    oldest = pending.pop(0)
                                    if sendable and sendable[0] == oldest:
                                        sendable.pop(0)
                                    taken += 1
                                    waits.append(claim_at - created_us[oldest])
                                pair.busy_until_us = claim_at + taken * service_us
                                tally.claims += taken
                                pair.last_claim_us = claim_at
                                charged = pair.charged_us
                                if charged is not None and pair.progress_us <= charged:
                                    pair.progress_us = claim_at
                                if sweeping:
                                    if charged is None and not sendable and pair.held_rank is None:
                                        pair.agenda_tick = NOT_SCHEDULED  # _reschedule: no work
                                    else:
                                        self._reschedule(pair, claim_at)
                        else:
                            pair.pending.append(number)
                            if gated:
                                pair.sendable.append(number)
                            if woken:
                                tally.consumers_started += 1
                                assert started is not None  # plain
                                pair.busy_until_us = claim_at
                                pair.claim_at_us = claim_at  # claims up to at least one todo
                                pair.claim = started
                                self.scheduled = pair.claim_seq = self.scheduled + 1
                                heappush(claims, claim_at * pair_count + index)
                            if gated and sweeping and len(pair.sendable) == 1:
                                claim_pending = pair.claim_at_us
                                if (
                                    claim_pending is not None
                                    and pair.held_rank is None
                                    and -(-at_us // tick_us) * tick_us >= claim_pending
                                ):
                                    # _reschedule: its claim comes before the next sweep.
                                    pair.agenda_tick = NOT_SCHEDULED
                                else:
                                    self._reschedule(pair, at_us)
                    if next_at <= end_us:
                        self.scheduled = pair.arrival_seq = self.scheduled + 1
                        key = next_at * pair_count + index
                        tick = -(-next_at // tick_us)
                        if tick <= loaded:
                            heappush(arrivals, key)
                        else:
                            waiting = buckets.get(tick)
                            if waiting is None:
                                buckets[tick] = [key]
                            else:
                                waiting.append(key)
                else:
                    break
            if lived:  # before anything reads the tally
                tally.consumers_started += lived
                tally.claims += lived
                waits.extend(array("d", (float(latency_us),)) * lived)
                lived = 0
            if timed_key < horizon:
                at_us, _, _, handler, arg = heappop(timed)
                handler(at_us, arg)
                continue
            if horizon == until_key:
                return
            samples.take_before(sample_key // pair_count, self.tally)

    def _load_arrivals(self, tick: int) -> None:
        """Move the arrivals the ticks up to ``tick`` first see into the heap."""
        loaded, buckets, arrivals = self.loaded, self.buckets, self.arrivals
        if loaded >= tick:
            return
        while loaded < tick:
            loaded += 1
            waiting = buckets.pop(loaded, None)
            if waiting is not None:
                arrivals.extend(waiting)
        heapify(arrivals)
        self.loaded = loaded

    def _claim_comes_first(self, key: int) -> bool:
        """Whether a pair's claim precedes its arrival at the same instant (same ``key``)."""
        pair = self.pairs[key % self.pair_count]
        return pair.claim_seq < pair.arrival_seq

    # -- host events ---------------------------------------------------------------

    def _arrive(self, pair: SimPair, now: int) -> None:
        """The pair's next ``Arrival``: create its todos, then draw the one after it.

        Its key is off the heap already.
        """
        todos = self.arrival.todos
        self._create(pair, now)
        while todos > 1:  # the rest of a burst
            self._create(pair, now)
            todos -= 1
        next_at = now + int(self.draw_gap(self.arrivals_per_us))
        if next_at <= self.end_us:
            self.scheduled = pair.arrival_seq = self.scheduled + 1
            self._push_arrival(next_at, pair.index)

    def _create(self, pair: SimPair, now: int) -> None:
        """A todo arrives: pending, sendable if it passes the gate, and its creation wake goes out.

        Every simulated todo comes with a delivery, verified or not; the todo's
        number names it.
        """
        tally = self.tally
        number = tally.todos
        tally.todos = number + 1
        self.created_us.append(now)
        share = self.unverified_share
        verified = not share or self.draw_workload() >= share
        self.verified.append(verified)
        sendable = passes_gate(number, verified)
        pair.pending.append(number)
        if sendable:
            pair.sendable.append(number)
        if self.record:
            tally.trace.append(
                Created(
                    at=self.timeline.instant(now),
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    todo_id=todo_id(number),
                    verified=verified,
                )
            )
        if pair.has_receiver:
            tally.creation_wakes += 1
            if self.creation_loss and self.draw_chance() < self.creation_loss:
                tally.creation_wakes_dropped += 1
                self._missed(pair, number)
            elif pair.down is not None:
                self._send(pair, now, number, None)
            else:
                self._wake(pair, now, number)
            if sendable and len(pair.sendable) == 1:
                self._reschedule(pair, now)  # after the wake: it may have a claim on its way

    def _wake(self, pair: SimPair, now: int, cause: int) -> bool:
        """Deliver one wake; True when it started the consumer.

        ``cause`` is the todo number of a creation wake, or ``NUDGE``; the
        synthetic consumer answers both alike (a replay's does not).

        A lost wake reached the receiver (its hook answered) but not the
        consumer, so a lost nudge still counts toward the cap. A wake that
        reaches a running consumer is ignored (it starts nothing).
        """
        loss, tally = self.wake_loss, self.tally
        if loss and self.draw_chance() < loss:
            tally.wakes_lost += 1
            return False
        if pair.busy_until_us > now:
            return False
        tally.consumers_started += 1
        claim = self.claims_when_started
        if claim is None:
            return True
        if self.flaky and self.draw_chance() >= self.claim_probability:
            claim = self.flaky_miss
        claim_at = pair.busy_until_us = now + self.latency_us
        if claim.up_to:
            pair.claim_at_us = claim_at
        pair.claim = claim
        self.scheduled = pair.claim_seq = self.scheduled + 1
        heappush(self.claims, claim_at * self.pair_count + pair.index)
        return True

    def _claim(self, pair: SimPair, now: int) -> None:
        """The consumer claims its oldest pending todos, then serves them."""
        claim = pair.claim
        assert claim is not None  # the pair's claim key was on the heap
        pair.claim = pair.claim_at_us = None
        pending, sendable = pair.pending, pair.sendable
        created_us, waits = self.created_us, self.tally.waits_us
        taken = 0
        while taken < claim.up_to and pending:
            number = pending.pop(0)
            if sendable and sendable[0] == number:  # a subsequence of pending
                sendable.pop(0)
            taken += 1
            waits.append(now - created_us[number])
            if self.record:
                self.tally.trace.append(
                    Claimed(at=self.timeline.instant(now), todo_id=todo_id(number))
                )
        pair.busy_until_us = now + taken * self.service_us
        if taken:
            self.tally.claims += taken
            pair.last_claim_us = now
            charged = pair.charged_us
            if charged is not None and pair.progress_us <= charged:
                pair.progress_us = now
            self._reschedule(pair, now)

    # -- the sweep -----------------------------------------------------------------

    def _reschedule(self, pair: SimPair, since_us: int) -> None:
        """Find the first tick from ``since_us`` where decide() would charge or clear the pair.

        A pair due on the very next sweep is held at once, as that sweep would
        do first thing; one that acts later goes on the agenda for that tick;
        one that is idle, waits for work or is capped goes nowhere, and so
        does one whose consumer claims before that tick (the claim
        reschedules it).
        """
        if not self.sweeping:
            return
        # mirrors stall_core.is_candidate: only pairs with a receiver get here (a
        # hookless pair gets no wakes, so no claims, and is never charged).
        if pair.held_rank is not None:
            self.due.drop(pair)  # its state changed: rank it afresh
        sendable, charged_us = pair.sendable, pair.charged_us
        if not sendable and charged_us is None:
            pair.agenda_tick = NOT_SCHEDULED  # nothing to decide until work arrives
            return
        if sendable and not (pair.has_receiver and pair.endpoint_active):
            # mirrors stall_core.is_candidate: not a candidate (a replay's inactive endpoint,
            # a hook disabled by an outage) until that changes, which reschedules it.
            pair.agenda_tick = NOT_SCHEDULED
            return
        tick_us = self.tick_us
        # Timeline.tick_at_or_after, written out: this runs for millions of events.
        tick = next_sweep = -(-since_us // tick_us)
        claim_at = pair.claim_at_us
        if claim_at is not None and next_sweep * tick_us >= claim_at:
            # Its consumer claims before the next sweep, and a claim takes at
            # least one todo (there was work when it was woken and nobody else
            # claims), so it reschedules the pair.
            pair.agenda_tick = NOT_SCHEDULED
            return
        if sendable:
            oldest_created_us = self.created_us[sendable[0]]
            stalled = first_stalled_tick(oldest_created_us, self.threshold_us, tick_us)
            if stalled > tick:
                tick = stalled
        # else (mirrors stall_core.decide): a row without work is a Clear next sweep.
        progressed = has_unconsumed_claim(pair.last_claim_us, charged_us)
        if sendable and charged_us is not None and not progressed:
            if pair.due_tick is None:
                pair.agenda_tick = NOT_SCHEDULED  # capped: only progress makes it due again
                return
            tick = max(tick, pair.due_tick)
        claimed_first = claim_at is not None and tick * tick_us >= claim_at
        if tick > self.last_tick or claimed_first:
            pair.agenda_tick = NOT_SCHEDULED
        elif sendable and tick == next_sweep:
            pair.agenda_tick = NOT_SCHEDULED
            self.due.add(pair, nudges_spent(pair.row_nudges, progressed), oldest_created_us)
        elif pair.agenda_tick != tick:
            pair.agenda_tick = tick
            self.agenda.add(pair, tick)

    def _sweep(self, tick: int, listed: list[SimPair]) -> None:
        """One tick: hold the pairs due on it, clear rows, charge the best due pairs."""
        pacing = self.pacing
        assert pacing is not None  # only a pacing policy puts ticks on the agenda
        planned = self._plan_tick(tick) if self.check else None
        cleared: list[PairKey] = []
        for pair in listed:
            if pair.agenda_tick != tick:
                continue  # rescheduled since it was listed
            pair.agenda_tick = NOT_SCHEDULED
            if pair.sendable:
                progressed = has_unconsumed_claim(pair.last_claim_us, pair.charged_us)
                spent = nudges_spent(pair.row_nudges, progressed)
                self.due.add(pair, spent, self.created_us[pair.sendable[0]])
            else:  # mirrors stall_core.decide: no work left, a Clear deletes the row
                pair.row_nudges = pair.charged_us = pair.due_tick = None
                cleared.append(pair.key)
        # mirrors stall_core.plan_tick: at most tick_limit charges, in charge order
        chosen = self.due.take(pacing.tick_limit, self.pairs)
        charged = self._charge(tick, chosen) if chosen else []
        if planned is not None:
            done = (charged, tuple(sorted(cleared)))
            if planned != done:
                raise AssertionError(f"tick {tick}: plan_tick did {planned}, the run did {done}")
        if self.due.count:
            self.tally.held_back_ticks += 1  # and the next tick is swept for them

    def _charge(self, tick: int, chosen: list[tuple[int, SimPair]]) -> list[Nudge]:
        """Charge the chosen pairs and deliver their nudges; the Nudges when recorded or checked.

        A charge is nudge ``spent + 1`` since progress, stamped ``now``
        (``charge_row``).
        """
        tally, due_ticks = self.tally, self.due_ticks
        assert due_ticks is not None
        now = tick * self.timeline.tick_us
        nudges: list[Nudge] = []
        started = 0
        for spent, pair in chosen:
            number = spent + 1  # mirrors stall_core.decide: Charge.number
            if self.record or self.check:
                nudges.append(self._nudge(pair, number, now))
            pair.row_nudges = number
            pair.charged_us = now  # mirrors stall_core.charge_row
            pair.named = pair.sendable[0]
            pair.due_tick = due_ticks.first_due_tick(number, now)
            tally.nudges += 1
            if pair.down is not None:
                if self._send(pair, now, NUDGE, self._nudge(pair, number, now)):
                    started += 1
            elif self._wake(pair, now, NUDGE):
                started += 1
        if self.record:
            tally.nudge_log.extend(nudges)
        tally.charged_ticks += 1
        tally.max_started_in_tick = max(tally.max_started_in_tick, started)
        for _, pair in chosen:
            self._reschedule(pair, now + 1)
        return nudges

    # -- receiver outages ----------------------------------------------------------------

    def _send(self, pair: SimPair, now: int, cause: int, nudge: Nudge | None) -> bool:
        """A wake to a pair whose receiver has outages: as the dispatcher delivers it.

        True when it was delivered at once and started the consumer. One that
        delivers later, or fails, ends in a timed event (``_delivered``).
        """
        assert pair.down is not None
        assert self.delivery is not None
        hooks = [hook for hook in pair.hooks if hook.enabled]
        delivered, at = delivery_outcome(now, pair.down, self.delivery)
        if delivered and at == now:
            for hook in hooks:
                hook.failures = 0
            return self._wake(pair, now, cause)
        self._push_timed(at, DELIVERED, self._delivered, (pair, hooks, delivered, cause, nudge))
        return False

    def _delivered(self, at: int, outcome: Any) -> None:
        """A delayed delivery ended: it woke the pair, or failed (booked, and a nudge refunded)."""
        pair, hooks, delivered, cause, nudge = outcome
        if delivered:
            for hook in hooks:
                hook.failures = 0
            self._wake(pair, at, cause)
            return
        self.tally.wakes_failed += 1
        if cause != NUDGE:
            self._missed(pair, cause)
        assert self.delivery is not None
        for hook in hooks:
            hook.failures += 1
            if hook.enabled and hook.failures >= self.delivery.disable_after:
                self._disable(hook, at)
        if nudge is not None:
            self._refund(pair, nudge, at)

    def _missed(self, pair: SimPair, cause: int) -> None:
        """A creation wake (of todo ``cause``) never reached the consumer: nothing started.

        A hook the replay overrides (``replay._Replay._missed`` keeps what
        its consumer would have claimed, for the pair's next nudge).
        """
        # Deliberately nothing: the synthetic consumer acts only on wakes it
        # gets, so one it never got leaves no state to keep.
        return

    def _disable(self, hook: SimHook, at: int) -> None:
        """Auto-disable: the hook's pairs lose it as a receiver."""
        hook.enabled = False
        self.tally.hooks_disabled += 1
        for pair in hook.pairs:
            pair.has_receiver = has_receiver(
                ((h.enabled, h.endpoint_id, h.queues) for h in pair.hooks),
                pair.endpoint_id,
                pair.queue,
            )
            self._reschedule(pair, at)

    def _refund(self, pair: SimPair, nudge: Nudge, at: int) -> None:
        """The sweeper refunds a nudge that reached nobody: ``refunded_row`` on the row as it is.

        The run keeps no reset rows (``rules.has_unconsumed_claim``): a
        row a tick reset since the charge (it read a claim, and did not
        charge) is built as the ledger holds it, count 0, so the refund
        misses it as the ledger's compare-and-set does.
        """
        row = None
        if pair.row_nudges is not None and pair.charged_us is not None:
            charged, reset_at = pair.charged_us, None
            if pair.progress_us > charged:
                read_by = self._running_tick(self.timeline.tick_at_or_after(pair.progress_us))
                if read_by <= self.last_tick and read_by * self.tick_us < at:
                    reset_at = self.timeline.instant(read_by * self.tick_us)
            row = LedgerRow(
                endpoint_id=pair.endpoint_id,
                queue=pair.queue,
                nudges=0 if reset_at is not None else pair.row_nudges,
                last_nudged_at=self.timeline.instant(charged),
                named_todo=self._todo_id(pair.named),
                progressed_at=reset_at,
            )
        refunded = refunded_row(row, nudge)
        if refunded is None:
            return
        assert self.due_ticks is not None
        assert pair.charged_us is not None
        self.tally.refunds += 1
        pair.row_nudges = refunded.nudges
        pair.due_tick = self.due_ticks.first_due_tick(refunded.nudges, pair.charged_us)
        self._reschedule(pair, at)

    # -- core values, for the record and the check ---------------------------------------

    def _nudge(self, pair: SimPair, number: int, now: int) -> Nudge:
        """The Nudge of charging ``pair`` now as nudge ``number``."""
        return Nudge(
            endpoint_id=pair.endpoint_id,
            queue=pair.queue,
            todo=self._oldest(pair),
            number=number,
            charged_at=self.timeline.instant(now),
        )

    def _oldest(self, pair: SimPair) -> TodoRef:
        """The TodoRef of the pair's oldest sendable todo."""
        return self._ref(pair.sendable[0])

    def _ref(self, number: int) -> TodoRef:
        """The TodoRef of the run's ``number``-th todo."""
        created_at = self.timeline.instant(self.created_us[number])
        return TodoRef(id=self._todo_id(number), created_at=created_at)

    def _todo_id(self, number: int) -> str:
        """The id of the run's ``number``-th todo."""
        return todo_id(number) if self.names is None else self.names[number]

    def _plan_tick(self, tick: int) -> tuple[list[Nudge], tuple[PairKey, ...]]:
        """What plan_tick charges and clears on ``tick``, reading the board as a ledger does."""
        assert self.pacing is not None
        timeline = self.timeline
        states, rows = [], {}
        for pair in self.pairs:
            states.append(
                PairState(
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    oldest=work_of(
                        (
                            self._ref(number)
                            for number in pair.pending
                            if passes_gate(number, bool(self.verified[number]))
                        ),
                        endpoint_id=pair.endpoint_id,
                        queue=pair.queue,
                    ),
                    endpoint_active=endpoint_active("active" if pair.endpoint_active else None),
                    has_receiver=pair.has_receiver,
                    latest_claim=timeline.instant(pair.last_claim_us)
                    if has_unconsumed_claim(pair.last_claim_us, pair.charged_us)
                    else None,
                )
            )
            if pair.row_nudges is not None and pair.charged_us is not None:
                rows[pair.key] = LedgerRow(
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    nudges=pair.row_nudges,
                    last_nudged_at=timeline.instant(pair.charged_us),
                )
        plan = plan_tick(states, rows, timeline.instant(tick * timeline.tick_us), self.pacing)
        return list(plan.charges), plan.cleared

    # -- the result ----------------------------------------------------------------

    def _result(self, samples: Timeseries) -> SimResult:
        tally, end_us, pacing = self.tally, self.timeline.end_us, self.pacing
        # Kept as doubles: they sort twice as fast as ints past 2**30 and hold these exactly.
        waits = sorted(tally.waits_us)
        pending_pairs = capped_pairs = 0
        oldest: int | None = None
        for pair in self.pairs:
            if not pair.pending:
                continue
            pending_pairs += 1
            age = end_us - self.created_us[pair.pending[0]]
            oldest = age if oldest is None else max(oldest, age)
            if pacing and pair.charged_us is not None and pair.sendable:
                progressed = has_unconsumed_claim(pair.last_claim_us, pair.charged_us)
                if capped(nudges_spent(pair.row_nudges, progressed), pacing):
                    capped_pairs += 1
        return SimResult(
            policy=self.policy.name,
            spec=self.policy.pacing == PacingPolicy(),
            pairs=self.scenario.pairs,
            ticks=self.scenario.ticks,
            todos=tally.todos,
            creation_wakes=tally.creation_wakes,
            nudges=tally.nudges,
            wakes_lost=tally.wakes_lost,
            claims=tally.claims,
            wait=WaitStats(
                count=len(waits),
                p50=percentile(waits, 50),
                p90=percentile(waits, 90),
                p99=percentile(waits, 99),
                max=percentile(waits, 100),
            ),
            wait_percentiles=tuple(
                p for p in (percentile(waits, q) for q in range(101)) if p is not None
            ),
            pending=tally.todos - tally.claims,
            pending_pairs=pending_pairs,
            capped_pairs=capped_pairs,
            oldest_pending_s=None if oldest is None else oldest / 1e6,
            max_started_in_tick=tally.max_started_in_tick,
            held_back_ticks=tally.held_back_ticks,
            charged_ticks=tally.charged_ticks,
            backlog=samples.series(samples.pending),
            consumers_started=tally.consumers_started,
            nudges_over_time=samples.series(samples.nudges),
            started_over_time=samples.series(samples.started),
            nudge_log=tuple(tally.nudge_log),
            trace=tuple(tally.trace),
            layout=tuple((pair.key, pair.has_receiver) for pair in self.pairs)
            if self.record
            else (),
            creation_wakes_dropped=tally.creation_wakes_dropped,
            wakes_failed=tally.wakes_failed,
            refunds=tally.refunds,
            hooks_disabled=tally.hooks_disabled,
        )
