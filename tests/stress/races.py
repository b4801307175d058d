"""Races: real sweeper processes on skewed wall clocks against one database, judged exactly.

    .venv/bin/python -m tests.stress.races                  # 10,000 trials: 4 and 8 instances
    .venv/bin/python -m tests.stress.races --trials 36      # a short run (the test suite's)
    .venv/bin/python -m tests.stress.races --fault forget-reads   # a control: it must fail

One PostgreSQL (``--dsn``, else ``STALL_TEST_DSN``, else an embedded one)
holds a throwaway database. 4 and then 8 sweeper processes (``race_worker``)
run under libfaketime, their wall clocks shifted by 0, ±2 s or ±30 s: no
decision may read it. Timestamps are planted relative to the database's
``now()``, so the default ``PacingPolicy()`` runs unscaled.

Trials run ``tick_limit`` at a time (the limit never holds a due pair back),
each on a fresh pair, in four rounds: the race, a settle, a second action,
a settle. A round sends every worker one ``tick`` while each trial's host
action starts within 3 ms either side: sweeps see it, miss it or race it.
Database clock reads bracket each host statement (``lb``, ``ub``) and refund,
and follow each tick's commit (``done``). The classes are ``_plant``'s; a
hook changed at tick races as an endpoint paused does (one snapshot reads
both, no delta finds either), and a host that clears ``claimed_at`` looks to
every statement like one that deletes: the contract suite runs those.

The judge decides with the core, exactly (no slack, no retries): each
sweep's ``plan_tick`` at its ``now`` on the facts it may have seen, against
the fleet's record it read at ``now``: the last judging tick's ``now`` (its
claims window, ``claims_window``) and the pair's claims that tick read (a
claim it read is not new: ``latest_claim``). A delta acts only on what
``find_changed`` (``delta_finds``) finds in that window, with the full-pass
marks the record may have held. A snapshot lies between a sweep's ``now``
and its commit, before ``done`` and, behind the lock, the next fleet sweep's
``now``; a host statement is in it surely if ``ub < now``, maybe if ``lb``
precedes its bound. Each commit records its sweep's ``now`` and the claims
it read (a delta's: those its finding statement read, and those of the
pairs it judged). Writes are compare-and-set. Every interleaving of sweeps,
the instance beside the lock and refunds is explored; a round is clean when
one explains every report, refund and the row after it. Counts:

- ``duplicates``: a charge where the rule allows none, and every further wake of one charge;
- ``double_resets``: nudge 1 over a live row with no progress to explain it;
- ``lost``: no charge where the rule allows only a charge;
- ``stranded``: nudge n+1 where the rule demands nudge 1, or an unreached nudge not refunded;
- ``other``: a wrong number, stamp, todo, deletion or row, a todo a sweep changed, an error.

Per class it prints what the races exercised: ``contested`` (a sweep allowed
more than one outcome), ``seen``/``unseen`` how that fell, ``turned_due``,
``resets`` (nudge 1 over a live row) by what showed progress (a new claim, only
the named todo's departure, a reset's kept progress), ``unreported_resets``,
``deferred`` (a delta that missed a changed pair), ``overlapped`` (the
outsider and a fleet sweep at once), ``cas`` (writes surely refused).
``--fault`` breaks the ledger (``race_worker``): each must make its count
non-zero; ``outside-lock`` must find nothing. The last line is exactly::

    races: trials=<int> instances=<int> duplicates=<int> double_resets=<int> lost=<int>
    stranded=<int> db_sweeps_per_tick=<float>

(``instances`` the largest count run, ``db_sweeps_per_tick`` the 4-instance
figure). Exit 1 if any count, ``other`` included, is not 0; 2 if it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from adapters.postgres import LOOKBACK, migrate
from stall_core import (
    Claim,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    TodoRef,
    charge_row,
    claims_read,
    claims_window,
    has_departed,
    latest_claim,
    made_progress,
    plan_tick,
    refunded_row,
    reset_row,
    work_of,
)
from stall_testing import (
    PostgresHost,
    SkewUnavailable,
    create_database,
    drop_database,
    embedded_postgres,
    skewed_env,
    with_database,
)
from tests.stress.race_worker import FAULTS
from tests.stress.shared import nudge, show_row, spawn

POLICY = PacingPolicy()
#: The trials' plans are seeded: a run's races differ only in timing.
SEED = 7
#: Wall-clock shifts of the sweeper processes, cycled over the workers.
OFFSETS = ("+0s", "+2s", "-2s", "+30s", "-30s")
#: Trials per batch: never more due pairs than one tick may charge.
LANES = POLICY.tick_limit
ROUNDS = 4
QUEUE = "q"
#: The race classes, each planned by ``_plant``: a first nudge (some at the exact threshold
#: instant), a backoff expiring, a claim at tick (some rows keep a reset's progress), the
#: last todo claimed, an endpoint paused or resumed (some claim meanwhile), a receiver that
#: heals (wakes lost or refused, refunded, then answered), and what the rule counts claims
#: in commit order for: a claim stamped 45 s behind (often before the last nudge), done
#: todos deleted, a claim whose transaction spans the tick.
KINDS = (
    "new-pair", "due-row", "progress", "drain", "endpoint-change", "receiver-heal",
    "claim-behind", "delete-done", "spanning-claim",
)  # fmt: skip
#: A host action starts this long after the tick commands are written (negative: before).
HOST_WINDOW_S = (-0.003, 0.003)
#: How far behind the database the odd claims are stamped: inside the claims window's
#: lookback, so each is new to the first tick after its commit, whatever its stamp.
BEHIND = timedelta(seconds=45)
#: A spanning claim's transaction stays open this long (seconds) before and after the claim.
SPAN_S = (0.002, 0.030)
#: A bound only a hang reaches: the workers' start-up, one round's answers.
TIMEOUT_S = 600.0
#: Where a boundary instant (threshold passed, backoff expired) is planted: this far after setup.
BOUNDARY_S = (0.0, 0.040)
CLOCK = "SELECT clock_timestamp()"
#: A claimed todo's stamp, read by the claiming consumer before anything else can change it.
STAMP = "SELECT claimed_at FROM todos WHERE id = $1"
COUNTS = ("duplicates", "double_resets", "lost", "stranded", "other")
#: An interleaving may explain this many fewer observations than the best one and still be
#: followed (only a faulty ledger has one that explains fewer than all).
SPARE_MISSES = 2


def _ms(value: float) -> timedelta:
    """``value`` milliseconds, to the microsecond (the database's resolution)."""
    return timedelta(microseconds=round(value * 1000))


# -- one pair's facts, read by the core ----------------------------------------------------


@attrs.frozen
class Todo:
    created_at: datetime
    gated: bool
    state: str = "pending"
    claimed_at: datetime | None = None


@attrs.frozen
class Facts:
    """What a sweep may see of one pair: its todos and its endpoint (its hook always covers it)."""

    todos: Mapping[str, Todo]
    endpoint_state: str = "active"

    @property
    def pending(self) -> frozenset[str]:
        return frozenset(i for i, t in self.todos.items() if t.state == "pending")

    def claims(self) -> list[tuple[str, str, datetime | None]]:
        """The todos as the core reads claims: (id, state, claimed_at)."""
        return [(i, t.state, t.claimed_at) for i, t in self.todos.items()]

    def work(self, endpoint: str) -> TodoRef | None:
        refs = (
            TodoRef(id=i, created_at=t.created_at)
            for i, t in self.todos.items()
            if t.state == "pending" and t.gated
        )
        return work_of(refs, endpoint_id=endpoint, queue=QUEUE)


def pair_state(
    endpoint: str, facts: Facts, row: LedgerRow | None, since: datetime, read: Collection[Claim]
) -> PairState:
    """The core's view of the pair, as the tick statement reads it from these rows.

    ``since`` is the tick's claims window, ``read`` the claims the last
    judging tick read: the pair's latest claim is its latest new one.
    """
    return PairState(
        endpoint_id=endpoint,
        queue=QUEUE,
        oldest=facts.work(endpoint),
        endpoint_active=facts.endpoint_state == "active",
        has_receiver=True,
        latest_claim=latest_claim(facts.claims(), since, read),
        named_departed=has_departed(row, facts.pending),
    )


#: ("none",) | ("drain",) | ("charge", number, stamp, todo_id): what a sweep reports of a pair.
Outcome = tuple[Any, ...]
NONE: Outcome = ("none",)
DRAIN: Outcome = ("drain",)


@attrs.frozen
class Intent:
    """What one sweep decided for the pair at its snapshot; it writes it at its commit.

    ``kind``: none, charge (``nudge``), drain or reset (``row``, the row it
    keeps). ``deferred``: a delta that did not find the pair, whose decision
    was not nothing. ``progress``: what showed the pair's progress (a new
    ``claim``, only the named todo's ``departure``, a reset's ``kept``), or
    nothing.
    """

    kind: str
    nudge: Nudge | None = None
    row: LedgerRow | None = None
    deferred: bool = False
    progress: str = ""


NOTHING = Intent("none")


def _progress_shown(state: PairState, row: LedgerRow | None) -> str:
    if row is None or not made_progress(state, row):
        return ""
    if row.progressed_at is not None:
        return "kept"
    if state.latest_claim is not None:
        return "claim"
    return "departure"


def delta_finds(
    facts: Facts,
    row: LedgerRow | None,
    now: datetime,
    watermark: datetime,
    full_mark: datetime,
    read: Collection[Claim],
) -> bool:
    """Whether a delta finds the pair: ``tick.sql``'s ``find_changed``, clause by clause.

    ``watermark`` is the claims window (``claims_window``: the fleet's last
    judging tick's ``now`` less the lookback), ``full_mark`` its last full
    pass's, both in the pair's time; ``read`` the claims that tick read.
    """
    todos = list(facts.todos.values())
    live = row is not None and row.progressed_at is None
    # New claims (in the window, not read by the last tick): progress to a live row.
    if live and latest_claim(facts.claims(), watermark, read) is not None:
        return True
    # Todos given back since the last full pass (pending, still stamped).
    if any(
        t.state == "pending" and t.claimed_at is not None and t.claimed_at > full_mark
        for t in todos
    ):
        return True
    # Pending todos that crossed the threshold since the watermark, with no row or progress kept.
    if not live and any(
        t.state == "pending"
        and watermark - POLICY.threshold <= t.created_at < now - POLICY.threshold
        for t in todos
    ):
        return True
    if row is None:
        return False
    # The row's backoff step ended since the watermark.
    step = POLICY.delay_before(row.nudges + 1)
    if row.nudges < POLICY.cap and watermark - step < row.last_nudged_at <= now - step:
        return True
    # Nudged since the last full pass, and its named todo departed.
    return (
        row.nudges <= POLICY.cap
        and row.last_nudged_at >= full_mark
        and row.progressed_at is None
        and row.named_todo is not None
        and row.named_todo not in facts.pending
    )


#: (least, most): the full-pass marks (less the lookback) the fleet's record may have held.
Marks = tuple[datetime, datetime]
#: The fleet's record as it concerns one pair, in database time: the last judging tick's
#: ``now`` (None: no tick yet) and the pair's claims it read.
Record = tuple[datetime | None, frozenset[Claim]]


def decide_intents(
    endpoint: str,
    facts: Facts,
    row: LedgerRow | None,
    now: datetime,
    since: datetime,
    read: Collection[Claim],
    kind: str = "full",
    marks: Marks | None = None,
    found: Facts | None = None,
) -> list[tuple[Intent, bool]]:
    """What a sweep at ``now`` may decide for the pair on these facts, and whether it judged it.

    ``since`` is its claims window, ``read`` the claims the last judging
    tick read. A full pass judges the pair and decides ``plan_tick``'s one
    outcome; a delta judges it only if it finds the pair on ``found`` (what
    its finding statement saw: an earlier snapshot, or the same) with the
    least full-pass mark, and may not if it does not find it with the most
    (they differ only beside the lock).
    """
    state = pair_state(endpoint, facts, row, since, read)
    plan = plan_tick([state], {} if row is None else {state.key: row}, now, POLICY)
    full = NOTHING
    if plan.charges:
        full = Intent("charge", nudge=plan.charges[0], progress=_progress_shown(state, row))
    elif plan.cleared:
        full = Intent("drain")
    elif plan.reset:
        assert row is not None  # only a row is reset
        kept = reset_row(row, now)
        if kept != row:
            full = Intent("reset", row=kept, progress=_progress_shown(state, row))
    if kind != "delta":
        return [(full, True)]
    assert marks is not None  # every delta carries its marks
    least, most = marks
    seen = facts if found is None else found
    options = []
    if delta_finds(seen, row, now, since, least, read):
        options.append((full, True))
    if not delta_finds(seen, row, now, since, most, read):
        options.append((Intent("none", deferred=full != NOTHING), False))
    return options


def reported(intent: Intent) -> Outcome:
    """What a sweeper reports of an intent its compare-and-set let through."""
    if intent.kind == "charge":
        assert intent.nudge is not None
        n = intent.nudge
        return ("charge", n.number, n.charged_at, n.todo.id)
    return DRAIN if intent.kind == "drain" else NONE


def apply_effect(facts: Facts, effect: tuple[Any, ...]) -> Facts:
    """The facts after one host statement."""
    kind, todos = effect[0], dict(facts.todos)
    if kind == "claim":
        todos[effect[1]] = attrs.evolve(todos[effect[1]], state="claimed", claimed_at=effect[2])
    elif kind in ("complete", "requeue"):
        state = "done" if kind == "complete" else "pending"
        todos[effect[1]] = attrs.evolve(todos[effect[1]], state=state)
    elif kind == "delete":
        del todos[effect[1]]
    elif kind == "create":
        todos[effect[1]] = Todo(created_at=effect[2], gated=effect[3])
    elif kind == "endpoint":
        return attrs.evolve(facts, endpoint_state=effect[1])
    else:
        raise ValueError(f"unknown effect {effect!r}")
    return attrs.evolve(facts, todos=todos)


# -- one trial: its plan, and what happened ------------------------------------------------


@attrs.frozen
class Stmt:
    """One committed host statement: its effect, and database-clock bounds (pair time)."""

    effect: tuple[Any, ...]
    lb: datetime
    ub: datetime


@attrs.frozen
class Sweep:
    """One non-skipped tick, as it concerns one pair (pair time)."""

    worker: int
    now: datetime
    #: a database-clock read once the tick committed
    done: datetime
    kind: str
    #: swept beside the fleet's lock (``--fault outside-lock``)
    outside: bool
    outcome: Outcome
    #: further wakes of the same charge handed over in this one tick
    extra: int = 0
    marks: Marks | None = None


@attrs.frozen
class Refund:
    """One refund a worker's settle made: its result, and database-clock bounds (pair time)."""

    worker: int
    number: int
    charged_at: datetime
    todo: str
    result: bool | str
    lb: datetime
    ub: datetime


@attrs.define
class RoundLog:
    mode: str
    shift: timedelta
    statements: list[Stmt] = attrs.Factory(list)
    sweeps: list[Sweep] = attrs.Factory(list)
    refunds: list[Refund] = attrs.Factory(list)
    end: datetime | None = None
    row_after: LedgerRow | None = None
    bad: list[str] = attrs.Factory(list)


@attrs.define
class Lane:
    """One trial: a fresh pair, its planted state, its scripts, and its record."""

    trial: int
    kind: str
    variant: str
    endpoint: str
    facts: Facts
    row: LedgerRow | None
    #: round -> host operations, run in order on the trial's own connection
    scripts: dict[int, list[tuple[Any, ...]]]
    #: round -> how the wake treats this pair ("reach", "lost", "refuse")
    modes: dict[int, str]
    #: the instant the pair turns due by time alone (boundary variants), pair time
    boundary: datetime | None = None
    heal: bool = False
    #: how far the pair's timestamps were moved back (``_heal``): pair time is database + shift
    shift: timedelta = timedelta(0)
    rounds: list[RoundLog] = attrs.Factory(list)
    created: int = 0
    #: the ``now`` the fleet's record may have held as the trial began (database time; None:
    #: no tick yet); no tick had read the trial's claims
    records: tuple[datetime | None, ...] = (None,)


#: Host operations: (verb, *arguments), run in order on a trial's own connection.
CLAIM, COMPLETE, CREATE = ("claim_next",), ("complete",), ("create", True)
CONSUME = [CLAIM, COMPLETE]


def _plant(lane_id: str, d: datetime, rng: random.Random, kind: str, trial: int) -> Lane:
    """Plan one trial of ``kind`` with every timestamp relative to the database's ``d``."""
    todos: dict[str, Todo] = {}

    def add(n: int, *, gated: bool = True, created_at: datetime | None = None) -> None:
        for _ in range(n):
            i = len(todos)
            at = d - timedelta(minutes=10, seconds=i) - _ms(i) if created_at is None else created_at
            todos[f"{lane_id}-{i:02d}"] = Todo(created_at=at, gated=gated)

    def consumed(before: datetime) -> None:
        # A claim from earlier work, consumed by the charge that wrote the row (or a drain):
        # stamped before it, and before any tick's claims window (a lookback before the last
        # tick, which precedes ``d``), as a tick that read it long ago leaves it.
        todos[f"{lane_id}-{len(todos):02d}"] = Todo(
            created_at=before - timedelta(minutes=30),
            gated=True,
            state="done",
            claimed_at=min(before, d - 2 * LOOKBACK) - timedelta(seconds=1),
        )

    def live(n: int, stamp: datetime, progressed_at: datetime | None = None) -> LedgerRow:
        # The row a charge left: naming the pair's oldest work, or nothing (an older build's).
        work = Facts(todos).work(lane_id)
        named = work.id if work is not None and rng.random() >= 0.1 else None
        return LedgerRow(
            endpoint_id=lane_id,
            queue=QUEUE,
            nudges=n,
            last_nudged_at=stamp,
            named_todo=named,
            progressed_at=progressed_at,
        )

    def waiting_stamp() -> datetime:
        return d - _ms(rng.uniform(1000, 240_000))

    def live_at(n: int, due: bool) -> tuple[LedgerRow, str]:
        # Due (its backoff just ran out) or waiting, and the variant's name.
        stamp = d - POLICY.delay_before(n + 1) - _ms(rng.uniform(1, 1000)) if due else None
        return live(n, stamp or waiting_stamp()), f"n={n} {'due' if due else 'waiting'}"

    row: LedgerRow | None = None
    endpoint_state = "active"
    scripts: dict[int, list[tuple[Any, ...]]] = {}
    modes = dict.fromkeys(range(ROUNDS), "reach")
    boundary: datetime | None = None
    heal = False
    variant = ""
    paused_or_disabled = ["paused", "disabled"]
    if kind == "new-pair":
        if rng.random() < 0.3:
            add(1, gated=False, created_at=d - timedelta(minutes=20))  # the oldest is ungated
        if rng.random() < 0.3:
            variant = "threshold"
            boundary = d + _ms(rng.uniform(*BOUNDARY_S) * 1000)
            add(1, created_at=boundary - POLICY.threshold)
            add(rng.randint(0, 1), created_at=boundary - POLICY.threshold + timedelta(seconds=1))
        else:
            add(rng.randint(1, 3))
        if rng.random() < 0.3:
            consumed(d - timedelta(minutes=40))
        actions: list[tuple[str, list[tuple[Any, ...]]]] = [
            ("quiet", []),
            ("claim", CONSUME),
            ("claim-only", [CLAIM]),
            ("inbound", [CREATE]),
        ]
        action, scripts[0] = rng.choice(actions)
        variant = f"{variant} {action}"
        scripts[2] = CONSUME
    elif kind == "due-row":
        n = rng.randint(1, 4)
        boundary = d + _ms(rng.uniform(*BOUNDARY_S) * 1000)
        add(rng.randint(1, 3))
        row = live(n, boundary - POLICY.delay_before(n + 1))
        if rng.random() < 0.5:
            consumed(row.last_nudged_at)
        variant = f"n={n}"
        scripts[0] = rng.choice([[], [CREATE]])
        scripts[2] = [CLAIM]
    elif kind == "progress":
        n = rng.randint(1, 5)
        due = n < POLICY.cap and rng.random() < 0.6
        add(rng.randint(2, 3))
        if rng.random() < 0.1:
            # A reset kept progress (it was held back, or not a candidate): nudge 1 at once.
            stamp = waiting_stamp()
            row = live(0, stamp, progressed_at=stamp + _ms(rng.uniform(1, 900)))
            variant = "kept"
        else:
            row, variant = live_at(n, due)
        if rng.random() < 0.5:
            consumed(row.last_nudged_at)
        then, scripts[0] = rng.choice(
            [("complete", CONSUME), ("requeue", [CLAIM, ("requeue",)]), ("held", [CLAIM])]
        )
        variant += f" {then}"
        scripts[2] = CONSUME
    elif kind == "drain":
        if rng.random() < 0.2:
            variant = "no-row"
            add(1)
        else:
            n = rng.randint(1, 5)
            due = n < POLICY.cap and rng.random() < 0.5
            add(1)
            row, variant = live_at(n, due)
        if rng.random() < 0.4:
            add(1, gated=False, created_at=d - timedelta(minutes=9))  # ungated work stays
        scripts[0] = rng.choice([CONSUME, [CLAIM]])
        scripts[2] = [CREATE]  # the backlog returns: the first backoff again
    elif kind in ("endpoint-change", "receiver-heal"):
        no_row = rng.random() < 0.4
        if no_row and kind == "receiver-heal":
            # Just past the threshold, so a delta finds the pair too: its first nudge goes
            # out (and reaches nobody) in the first round, whichever tick runs.
            for _ in range(rng.randint(2, 3)):
                add(1, created_at=d - POLICY.threshold - _ms(rng.uniform(1, 1000) + len(todos)))
        else:
            add(rng.randint(2, 3))
        if no_row:
            variant = "no-row"
        else:
            n = rng.randint(1, 4)
            row, variant = live_at(n, True)[0], f"n={n}"
        if kind == "endpoint-change":
            roll = rng.random()
            if roll < 0.6:
                state = rng.choice(paused_or_disabled)
                # Below 0.4 a plain pause; else progress while no nudge may go out: the row
                # is reset (kept), not charged.
                claims = [] if roll < 0.4 else [CLAIM]
                scripts[0] = [("endpoint", state), *claims]
                scripts[2] = [("endpoint", "active")]
                variant += f" {state}" + ("-claimed" if claims else "")
            else:
                endpoint_state = rng.choice(paused_or_disabled)
                scripts[0] = [("endpoint", "active")]
                scripts[2] = [CLAIM]
                variant += " resumed"
        else:
            failing = rng.choice(["lost", "refuse"])
            modes[0] = modes[1] = failing
            heal = True
            scripts[0] = rng.choice([[], CONSUME])
            variant += f" {failing}"
    elif kind in ("claim-behind", "delete-done", "spanning-claim"):
        n = rng.randint(1, 4)
        add(rng.randint(2, 3))
        claim: tuple[Any, ...] = CLAIM
        if kind == "claim-behind":
            # A recent nudge, so a claim 45 s behind the database is often stamped before it.
            row = live(n, d - _ms(rng.uniform(1000, 120_000)))
            claim, variant = ("claim_next", -BEHIND), f"n={n} recent"
        else:
            row, variant = live_at(n, rng.random() < 0.5)
            if kind == "spanning-claim":
                claim = ("claim_held", rng.uniform(*SPAN_S), rng.uniform(*SPAN_S))
        if row.named_todo is None:
            variant += " unnamed"
        finish: list[tuple[Any, ...]] = [("delete",) if kind == "delete-done" else COMPLETE]
        if rng.random() < 0.25 and kind in ("claim-behind", "spanning-claim"):
            finish = []
            variant += " held"
        scripts[0] = [claim, *finish]
        scripts[2] = [CLAIM, *(finish or [COMPLETE])]
    else:
        raise ValueError(f"unknown race class {kind!r}")
    return Lane(
        trial=trial,
        kind=kind,
        variant=variant.strip(),
        endpoint=lane_id,
        facts=Facts(todos=todos, endpoint_state=endpoint_state),
        row=row,
        scripts=scripts,
        modes=modes,
        boundary=boundary,
        heal=heal,
    )


# -- the judge ---------------------------------------------------------------------------


@attrs.define
class Verdict:
    """One trial's counts and what it exercised."""

    counts: Counter[str] = attrs.Factory(Counter)
    stats: Counter[str] = attrs.Factory(Counter)
    notes: list[str] = attrs.Factory(list)
    #: the whole trial, when it has a violation
    trace: str | None = None


def _trace(lane: Lane) -> str:
    """A failing trial, round by round, in pair time: what to read first when a count is not 0."""
    out = [f"  trace of trial {lane.trial} ({lane.kind} {lane.variant}): {show_row(lane.row)}"]
    out.append(f"    the record's now as it began: {lane.records}")
    out += [f"    todo {todo_id} {t}" for todo_id, t in sorted(lane.facts.todos.items())]
    for r, rnd in enumerate(lane.rounds):
        out.append(f"    round {r + 1} ({rnd.mode}, shift {rnd.shift}), ends {rnd.end}:")
        out += [f"      host {s.effect} lb={s.lb} ub={s.ub}" for s in rnd.statements]
        out += [
            f"      sweep w{s.worker}{' (outside)' if s.outside else ''} {s.kind}"
            f" now={s.now} done={s.done} {s.outcome}"
            + (f" marks={s.marks}" if s.marks else "")
            + (f" +{s.extra} wakes" if s.extra else "")
            for s in sorted(rnd.sweeps, key=lambda s: s.now)
        ]
        out += [
            f"      refund w{f.worker} nudge {f.number} ({f.charged_at}) -> {f.result}"
            f" lb={f.lb} ub={f.ub}"
            for f in rnd.refunds
        ]
        out.append(f"      after: {show_row(rnd.row_after)}")
    return "\n".join(out)


@attrs.frozen
class Point:
    """One instant an interleaving orders: a sweep reading the fleet's record at its ``now``
    (N), its snapshot (S), its commit (C), or a refund (R).

    Its true instant lies in [lo, hi]; ``of`` is the sweep's (or refund's) index.
    """

    kind: str
    of: int
    lo: datetime
    hi: datetime


@attrs.frozen
class Pend:
    """A sweep between its snapshot and its commit: what it saw and decided, and the pair's
    claims it read (database time), which its commit records."""

    k: int
    version: int
    row: LedgerRow | None
    intent: Intent
    read: frozenset[Claim] = frozenset()


#: One observation an interleaving does not explain: what, observed, expected, the row seen.
Miss = tuple[str, Any, Any, LedgerRow | None]


@attrs.frozen
class St:
    """One interleaving so far: statements seen, the ledger row and its write count, ..."""

    k: int
    version: int
    row: LedgerRow | None
    #: the fleet's record: the last committed judging tick's now and the pair's claims it read
    record: Record
    #: the latest lower bound of the points placed so far
    floor: datetime
    fired: frozenset[int] = frozenset()
    #: sweeps that read the record (N), not yet snapshotted: what each read
    noted: tuple[tuple[int, Record], ...] = ()
    pending: tuple[tuple[int, Pend], ...] = ()
    misses: tuple[Miss, ...] = ()
    #: writes the compare-and-set refused on this interleaving
    cas: int = 0


def _classify(miss: Miss) -> str:
    """Which count an unexplained observation is."""
    what, observed, expected, seen = miss
    if what == "refund":
        return "stranded" if observed is False and expected is True else "other"
    if what == "row":
        return "other"
    if observed[0] == "charge":
        if expected[0] != "charge":
            live = seen is not None and seen.nudges >= 1
            return "double_resets" if observed[1] == 1 and live else "duplicates"
        return "stranded" if expected[1] == 1 and observed[1] > 1 else "other"
    return "lost" if observed == NONE and expected[0] == "charge" else "other"


class _Round:
    """One round of one trial, replayed over every interleaving the clocks allow."""

    def __init__(self, lane: Lane, rnd: RoundLog, stages: Sequence[Facts]) -> None:
        assert rnd.end is not None
        self.lane, self.rnd, self.stages, self.sweeps = lane, rnd, stages, rnd.sweeps
        # A sweep's snapshot and commit lie between its now and hi: its done, the round's
        # end and, behind the fleet's lock, the next fleet sweep's now.
        fleet = sorted((i for i, s in enumerate(self.sweeps) if not s.outside), key=self._now)
        hi = {i: min(s.done, rnd.end) for i, s in enumerate(self.sweeps)}
        for i, j in itertools.pairwise(fleet):
            hi[i] = min(hi[i], self.sweeps[j].now)
        self.chain = [self._point(p, i, hi[i]) for i in fleet for p in "NSC"]
        self.floats = [
            self._point(p, i, hi[i]) for i, s in enumerate(self.sweeps) if s.outside for p in "NSC"
        ]
        swept = {s.worker: i for i, s in enumerate(self.sweeps)}
        self.refund_sweep: dict[int, int] = {}
        for j, f in enumerate(rnd.refunds):
            if f.worker in swept:
                self.refund_sweep[j] = swept[f.worker]
                self.floats.append(Point("R", j, f.lb, f.ub))
        #: per sweep, how many of the round's statements its snapshot surely and maybe holds
        self.k_bounds = {
            i: (
                sum(1 for st in rnd.statements if st.ub < s.now),
                sum(1 for st in rnd.statements if st.lb < hi[i]),
            )
            for i, s in enumerate(self.sweeps)
        }
        #: per sweep, what the interleavings reaching its commit said (for the statistics)
        self.at_commit: dict[int, list[tuple[Pend, Outcome, bool]]] = {}
        #: the fleet sweeps whose commit the replay has passed
        self._chain_committed: set[int] = set()

    def _now(self, i: int) -> datetime:
        return self.sweeps[i].now

    def _point(self, kind: str, i: int, hi: datetime) -> Point:
        # The record is read at the sweep's now, exactly; its snapshot and commit follow.
        now = self.sweeps[i].now
        return Point(kind, i, now, now if kind == "N" else hi)

    def _snapshot(self, st: St, i: int) -> list[St]:
        s = self.sweeps[i]
        k_min, k_max = self.k_bounds[i]
        low = max(st.k, k_min)
        record = next(r for j, r in st.noted if j == i)
        noted = tuple((j, r) for j, r in st.noted if j != i)
        # The record in pair time: its window, and the claims the last judging tick read.
        shift = self.rnd.shift
        judged_at, last_read = record
        since = claims_window(None if judged_at is None else judged_at + shift, s.now, LOOKBACK)
        read = {(todo, at + shift) for todo, at in last_read}
        out = []
        for k in range(low, max(k_max, low) + 1):
            # A delta finds its pairs in a statement of its own: a snapshot no later.
            for found in range(low, k + 1) if s.kind == "delta" else (k,):
                for intent, judged in decide_intents(
                    self.lane.endpoint,
                    self.stages[k],
                    st.row,
                    s.now,
                    since,
                    read,
                    s.kind,
                    s.marks,
                    found=self.stages[found],
                ):
                    # What the tick records as read: its judge's claims where it judged the
                    # pair, and a delta's finding statement's.
                    mine = claims_read(self.stages[k].claims(), since) if judged else set()
                    if s.kind == "delta":
                        mine |= claims_read(self.stages[found].claims(), since)
                    pend = Pend(
                        k=k,
                        version=st.version,
                        row=st.row,
                        intent=intent,
                        read=frozenset((todo, at - shift) for todo, at in mine),
                    )
                    nxt = attrs.evolve(st, k=k, noted=noted, pending=(*st.pending, (i, pend)))
                    if nxt not in out:
                        out.append(nxt)
        return out

    def _commit(self, st: St, i: int) -> St:
        s = self.sweeps[i]
        pend = next(p for j, p in st.pending if j == i)
        pending = tuple((j, p) for j, p in st.pending if j != i)
        # Every sweep's commit records its now and the claims it read, whatever it wrote.
        st = attrs.evolve(st, record=(s.now - self.rnd.shift, pend.read))
        intent = pend.intent
        if intent.kind == "charge" and pend.row is None:
            ok = st.row is None  # INSERT ... ON CONFLICT DO NOTHING
        else:
            ok = st.version == pend.version  # compare-and-set on the row as locked
        said, row, version = NONE, st.row, st.version
        if intent.kind != "none" and ok:
            said, version = reported(intent), st.version + 1
            if intent.kind == "charge":
                assert intent.nudge is not None
                row = charge_row(intent.nudge)
            else:
                row = None if intent.kind == "drain" else intent.row
        cas = st.cas + (intent.kind != "none" and not ok)
        self.at_commit.setdefault(i, []).append((pend, said, said == s.outcome))
        if said == s.outcome:
            return attrs.evolve(st, row=row, version=version, pending=pending, cas=cas)
        # Unexplained: go on from what the sweep did.
        misses = (*st.misses, ("sweep", s.outcome, said, pend.row))
        row, version = st.row, st.version
        if s.outcome[0] == "charge":
            _, number, stamp, todo = s.outcome
            row, version = (
                charge_row(nudge(self.lane.endpoint, QUEUE, number, stamp, todo)),
                version + 1,
            )
        elif s.outcome == DRAIN:
            row, version = None, version + 1
        return attrs.evolve(st, row=row, version=version, pending=pending, misses=misses, cas=cas)

    def _refund(self, st: St, j: int) -> St:
        f = self.rnd.refunds[j]
        refunded = refunded_row(
            st.row, nudge(self.lane.endpoint, QUEUE, f.number, f.charged_at, f.todo)
        )
        if refunded is not None and f.result is True:
            return attrs.evolve(st, row=refunded, version=st.version + 1)
        if refunded is None and f.result is False:
            return st
        miss: Miss = ("refund", f.result, refunded is not None, st.row)
        return attrs.evolve(st, misses=(*st.misses, miss))

    def _place(self, st: St, p: Point) -> list[St]:
        if p.hi < st.floor:
            return []
        st = attrs.evolve(st, floor=max(st.floor, p.lo))
        if p.kind == "N":
            return [attrs.evolve(st, noted=(*st.noted, (p.of, st.record)))]
        if p.kind == "S":
            return self._snapshot(st, p.of)
        return [self._commit(st, p.of) if p.kind == "C" else self._refund(st, p.of)]

    def _may_fire(self, st: St, x: int) -> bool:
        p = self.floats[x]
        if x in st.fired or p.hi < st.floor:
            return False
        if p.kind == "S":
            return any(j == p.of for j, _ in st.noted)
        if p.kind == "C":
            return any(j == p.of for j, _ in st.pending)
        if p.kind == "R":
            sweep = self.refund_sweep[p.of]
            fired = {q.of for n, q in enumerate(self.floats) if q.kind == "C" and n in st.fired}
            if sweep not in self._chain_committed | fired:
                return False
            if not self.sweeps[sweep].outside:
                # A fleet refund waits for the fleet's tick lock: never inside a fleet tick.
                return not any(not self.sweeps[j].outside for j, _ in st.pending)
        return True

    def _gap(self, states: set[St]) -> set[St]:
        """Every way of firing the floating points before the next chain point."""
        seen = set(states)
        todo = list(states)
        while todo:
            st = todo.pop()
            for x in range(len(self.floats)):
                if not self._may_fire(st, x):
                    continue
                for nxt in self._place(st, self.floats[x]):
                    nxt = attrs.evolve(nxt, fired=nxt.fired | {x})
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
        return seen

    def replay(self, starts: Iterable[tuple[LedgerRow | None, Record]]) -> tuple[set[St], bool]:
        """The interleavings that explain the most of the round; whether any is complete."""
        floor = datetime.min.replace(tzinfo=UTC)
        states = {St(k=0, version=0, row=row, record=rec, floor=floor) for row, rec in starts}
        for p in self.chain:
            states = self._gap(states)
            after: set[St] = set()
            for st in states:
                # Every float not fired yet must still fit after this point.
                if any(
                    x not in st.fired and self.floats[x].hi < p.lo for x in range(len(self.floats))
                ):
                    continue
                after.update(self._place(st, p))
            if not after:
                return states, False
            if p.kind == "C":
                self._chain_committed.add(p.of)
            fewest = min(len(st.misses) for st in after)
            states = {st for st in after if len(st.misses) <= fewest + SPARE_MISSES}
        states = self._gap(states)
        ends = {st for st in states if len(st.fired) == len(self.floats) and not st.pending}
        if not ends:
            return states, False
        finals = {
            st
            if st.row == self.rnd.row_after
            else attrs.evolve(st, misses=(*st.misses, ("row", self.rnd.row_after, st.row, None)))
            for st in ends
        }
        fewest = min(len(st.misses) for st in finals)
        return {st for st in finals if len(st.misses) == fewest}, True


def judge(lane: Lane) -> Verdict:
    """Replay one trial with the core's rule and count every departure from it.

    A round is clean when one interleaving and visibility the clocks allow
    explains every report, every refund result and the row after it.
    """
    v = Verdict()
    facts = lane.facts
    starts: set[tuple[LedgerRow | None, Record]] = {
        (lane.row, (now, frozenset())) for now in lane.records
    }
    contested = seen = unseen = False

    def note(kind: str, r: int, text: str) -> None:
        v.counts[kind] += 1
        v.notes.append(
            f"{kind}: trial {lane.trial} ({lane.kind} {lane.variant}) round {r + 1}: {text}"
        )

    for r, rnd in enumerate(lane.rounds):
        for text in rnd.bad:
            note("other", r, text)
        stages = [facts]
        for stmt in rnd.statements:
            stages.append(apply_effect(stages[-1], stmt.effect))
        for s in rnd.sweeps:
            v.stats[s.kind] += 1
            for _ in range(s.extra):
                note("duplicates", r, f"w{s.worker} handed over {s.outcome} more than once")
        _check_refunds(rnd, r, note)
        replay = _Round(lane, rnd, stages)
        best, complete = replay.replay(starts)
        if not complete:
            note("other", r, "no interleaving the clocks allow reaches the round's end")
        chosen = min(best, key=lambda st: repr(st.misses))
        for what, observed, expected, row in chosen.misses:
            kind = _classify((what, observed, expected, row))
            if what == "row":
                said = f"ledger {show_row(observed)} after the round"
                text = f"{said}, the replay says {show_row(expected)}"
            elif what == "refund":
                text = (
                    f"a refund answered {observed}, the replay says {expected} on {show_row(row)}"
                )
            else:
                text = f"a sweep did {observed} over {show_row(row)}, the rule says {expected}"
            note(kind, r, text)
        v.stats["cas"] += min(st.cas for st in best)
        beside = [s for s in rnd.sweeps if s.outside]
        v.stats["overlapped"] += any(
            f.now < o.done and o.now < f.done for o in beside for f in rnd.sweeps if not f.outside
        )
        for i, commits in replay.at_commit.items():
            s = rnd.sweeps[i]
            contested |= len({o for _, o, _ in commits}) > 1
            fewest = min(p.k for p, _, _ in commits)
            most = max(p.k for p, _, _ in commits)
            first = {o for p, o, _ in commits if p.k == fewest}
            last = {o for p, o, _ in commits if p.k == most}
            if first != last:
                seen |= s.outcome in last
                unseen |= s.outcome in first
            matched = [p for p, _, ok in commits if ok]
            if not matched:
                continue
            v.stats["deferred"] += all(p.intent.deferred for p in matched)
            v.stats["unreported_resets"] += all(p.intent.kind == "reset" for p in matched)
            if s.outcome[0] == "charge":
                v.stats["charges"] += 1
                shown = {p.intent.progress for p in matched}
                if "" not in shown:
                    v.stats["resets"] += 1
                    if len(shown) == 1:
                        v.stats[f"by_{shown.pop()}"] += 1
        v.stats["refunds"] += len(rnd.refunds)
        facts = stages[-1]
        starts = {(st.row, st.record) for st in best}
    if lane.boundary is not None:
        nows = [s.now for r in lane.rounds for s in r.sweeps]
        v.stats["turned_due"] += any(n <= lane.boundary for n in nows) and any(
            n > lane.boundary for n in nows
        )
    if v.notes:
        v.trace = _trace(lane)
    v.stats.update(trials=1, contested=contested, seen=seen, unseen=unseen)
    return v


def _check_refunds(rnd: RoundLog, r: int, note: Any) -> None:
    """Each charge that reached nobody has one refund by its sweeper; no other is refunded."""
    charges = {
        (s.worker, s.outcome[1], s.outcome[2]) for s in rnd.sweeps if s.outcome[0] == "charge"
    }
    for worker, number, stamp in sorted(charges):
        mine = [
            f for f in rnd.refunds if (f.worker, f.number, f.charged_at) == (worker, number, stamp)
        ]
        if rnd.mode == "reach":
            if mine:
                note("other", r, f"a nudge that reached its receiver was refunded: {mine}")
        elif not mine:
            note("stranded", r, f"nudge {number} ({stamp}) reached nobody and was not refunded")
        elif isinstance(mine[0].result, str):
            note("other", r, f"refund of nudge {number} failed: {mine[0].result}")
    for f in rnd.refunds:
        if (f.worker, f.number, f.charged_at) not in charges:
            note("other", r, f"w{f.worker} refunded a nudge it did not charge: {f}")


# -- worker processes ----------------------------------------------------------------------


class RaceAbort(RuntimeError):
    """The run could not go on (a worker died, a round timed out, faketime did not work)."""


@attrs.frozen
class Worker:
    """One sweeper process on a shifted wall clock, driven one JSON line at a time."""

    index: int
    offset: str
    proc: asyncio.subprocess.Process
    log: Path


async def _ask(workers: Sequence[Worker], command: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``command`` to every worker at once, then read each one's answer."""
    pipes = [(w, w.proc.stdin, w.proc.stdout) for w in workers]
    for _, stdin, _ in pipes:
        assert stdin is not None
        stdin.write((json.dumps(command) + "\n").encode())
    await asyncio.gather(*(stdin.drain() for _, stdin, _ in pipes if stdin is not None))
    answers = []
    for w, _, stdout in pipes:
        assert stdout is not None
        line = await stdout.readline()
        if not line:
            raise RaceAbort(f"worker {w.index} exited (log: {w.log})")
        answers.append(json.loads(line))
    return answers


@contextlib.asynccontextmanager
async def _workers(count: int, dsn: str, workdir: Path, fault: str) -> AsyncIterator[list[Worker]]:
    workers: list[Worker] = []
    try:
        for i in range(count):
            offset, log = OFFSETS[i % len(OFFSETS)], workdir / f"worker-{i}.log"
            proc = await spawn(
                "race_worker", "--dsn", dsn, "--worker", str(i), "--fault", fault,
                log=log, env=skewed_env(offset), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            workers.append(Worker(i, offset, proc, log))
        asked = datetime.now(UTC)
        async with asyncio.timeout(TIMEOUT_S):
            hellos = await _ask(workers, {"cmd": "hello"})
        answered = datetime.now(UTC)
        for w, hello in zip(workers, hellos, strict=True):
            # A set-up check that faketime took hold, not part of the judging: the
            # worker's clock read between the question and the answer, shifted.
            wall, shift = (
                datetime.fromisoformat(hello["wall"]),
                timedelta(seconds=int(w.offset[:-1])),
            )
            if not asked + shift <= wall <= answered + shift:
                raise RaceAbort(
                    f"worker {w.index} runs {(wall - answered).total_seconds():+.1f} s off,"
                    f" not {w.offset}: faketime did not shift its clock"
                )
        yield workers
    finally:
        for w in workers:
            if w.proc.returncode is None and w.proc.stdin is not None:
                w.proc.stdin.close()
                try:
                    await asyncio.wait_for(w.proc.wait(), timeout=5)
                except TimeoutError:
                    w.proc.kill()
                    await w.proc.wait()


# -- the fleet's record --------------------------------------------------------------------


@attrs.frozen
class Tick:
    """One non-skipped tick, as the fleet's record keeps it (database time)."""

    worker: int
    now: datetime
    done: datetime
    kind: str
    outside: bool


def _in_turn(a: Tick, b: Tick) -> bool:
    """``a`` and ``b`` took the same lock (both the fleet's, or one instance's) and ``a`` first."""
    return a.now < b.now and (a.worker == b.worker or not (a.outside or b.outside))


def record_marks(x: Tick, ticks: Sequence[Tick], initial: Tick | None, full: Tick | None) -> Marks:
    """The least and the most full-pass mark (its ``now`` less the lookback) ``x``'s delta may
    have read.

    The record holds the ``now`` of the last full pass to commit before
    ``x`` read it: behind the fleet's lock, the last before ``x``; a tick
    beside the lock may or may not have come between. ``initial`` and
    ``full`` are the record as the run found it. (Its last judging tick's
    ``now`` and claims, the judge follows through each interleaving.)
    """
    earlier = [t for t in ticks if t.now < x.now]

    def last(candidates: list[Tick], start: Tick | None) -> list[datetime]:
        # A record is the last one x read unless a later one surely committed after it
        # (in turn, or done before it began) and before x read: one x took its lock after.
        later = [u for u in candidates if _in_turn(u, x)]
        found = [
            t.now
            for t in candidates
            if not any(u is not t and (_in_turn(t, u) or t.done < u.now) for u in later)
        ]
        if start is not None and not later:
            found.append(start.now)
        assert found, "a delta follows a recorded sweep"
        return found

    fulls = last([t for t in earlier if t.kind == "full"], full)
    return min(fulls) - LOOKBACK, max(fulls) - LOOKBACK


def record_candidates(ticks: Sequence[Tick], initial: Tick | None) -> tuple[datetime | None, ...]:
    """The ``now`` the fleet's record may hold once every one of ``ticks`` committed.

    It is the last to commit's: any tick no other surely committed after
    (one in turn after it, or begun after it was done). None: no tick yet.
    """
    if not ticks:
        return (None if initial is None else initial.now,)
    last = {
        t.now
        for t in ticks
        if not any(u is not t and (_in_turn(t, u) or t.done < u.now) for u in ticks)
    }
    return tuple(sorted(last))


# -- one configuration ------------------------------------------------------------------------


@attrs.define
class ConfigResult:
    instances: int
    trials: int = 0
    rounds: int = 0
    sweeps: int = 0
    seconds: float = 0.0
    counts: Counter[str] = attrs.Factory(Counter)
    by_kind: dict[str, Verdict] = attrs.Factory(dict)
    notes: list[str] = attrs.Factory(list)
    #: the first few failing trials, whole
    traces: list[str] = attrs.Factory(list)
    #: rounds by how many sweeps ran in them
    sweeps_in_round: Counter[int] = attrs.Factory(Counter)
    #: sweeps by what they judged (full pass, delta)
    kinds: Counter[str] = attrs.Factory(Counter)
    #: per round, first to last try-lock instant (database clock), seconds
    lock_spreads: list[float] = attrs.Factory(list)
    #: each non-skipped tick's duration as its sweeper measured it, seconds
    sweep_durations: list[float] = attrs.Factory(list)

    @property
    def sweeps_per_tick(self) -> float:
        return self.sweeps / self.rounds if self.rounds else 0.0

    def add(self, lane: Lane, verdict: Verdict) -> None:
        self.trials += 1
        self.counts.update(verdict.counts)
        kind = self.by_kind.setdefault(lane.kind, Verdict())
        kind.counts.update(verdict.counts)
        kind.stats.update(verdict.stats)
        self.notes.extend(verdict.notes[: max(0, 20 - len(self.notes))])
        if verdict.trace is not None and len(self.traces) < 3:
            self.traces.append(verdict.trace)


TODO_ROWS = """
INSERT INTO todos (id, endpoint_id, queue, delivery_id, created_at, state, claimed_at, title)
VALUES ($1, $2, $3, $4, $5, $6, $7, $1)
"""
LEDGER_ROWS = """
INSERT INTO stall_nudge.queue_stall_nudges
       (endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""
#: Each batch's rows, deleted after it is judged: full passes stay as short as the first.
CLEANUP = [
    f"DELETE FROM {table} WHERE {column} = ANY($1::text[])"
    for table, column in (
        ("stall_nudge.queue_stall_nudges", "endpoint_id"),
        ("todos", "endpoint_id"),
        ("notify_hooks", "endpoint_id"),
        ("deliveries", "endpoint_id"),
        ("endpoints", "id"),
        ("stall_nudge.held", "endpoint_id"),
    )
]


class Coordinator:
    """Runs batches of trials against a fleet of workers and judges them."""

    def __init__(
        self,
        admin: asyncpg.Connection,
        pools: Sequence[asyncpg.Pool],
        workers: Sequence[Worker],
        rng: random.Random,
        result: ConfigResult,
        record: tuple[Tick | None, Tick | None],
    ) -> None:
        self.admin, self.workers, self.rng, self.result = admin, workers, rng, result
        self.hosts = [(pool, PostgresHost(pool)) for pool in pools]
        #: every non-skipped tick so far (the fleet's record follows them)
        self.ticks: list[Tick] = []
        self.initial, self.initial_full = record

    async def batch(self, first_trial: int, size: int) -> None:
        lanes = await self._setup(first_trial, size)
        records = record_candidates(self.ticks, self.initial)
        for lane in lanes:
            lane.records = records
        for r in range(ROUNDS):
            if r == 2:
                await self._heal(lanes)
            await self._round(lanes, r)
        for lane in lanes:
            self.result.add(lane, judge(lane))
        async with self.admin.transaction():
            for sql in CLEANUP:
                await self.admin.execute(sql, [lane.endpoint for lane in lanes])

    async def _setup(self, first_trial: int, size: int) -> list[Lane]:
        host = PostgresHost(self.admin)
        async with self.admin.transaction():
            d: datetime = await self.admin.fetchval(CLOCK)
            lanes = []
            for trial in range(first_trial, first_trial + size):
                kind = KINDS[trial % len(KINDS)]
                lane = _plant(f"r{self.result.instances}t{trial}", d, self.rng, kind, trial)
                lanes.append(lane)
                e = lane.endpoint
                await host.add_endpoint(e, state=lane.facts.endpoint_state)
                for v in ("v", "u"):
                    await host.add_delivery(
                        f"{v}-{e}", endpoint_id=e, verified=v == "v", received_at=d
                    )
                await host.add_hook(
                    f"h-{e}", endpoint_id=e, url="http://127.0.0.1:9/hook", secret="whsec_races"
                )
            todos = [_todo_row(e.endpoint, i, t) for e in lanes for i, t in e.facts.todos.items()]
            await self.admin.executemany(TODO_ROWS, todos)
            rows = [attrs.astuple(lane.row) for lane in lanes if lane.row is not None]
            await self.admin.executemany(LEDGER_ROWS, rows)
        return lanes

    async def _heal(self, lanes: list[Lane]) -> None:
        """Move each healing pair one backoff step on (all its timestamps back), then it reaches."""
        for lane in lanes:
            row = lane.rounds[-1].row_after
            if not lane.heal or row is None or row.nudges >= POLICY.cap:
                continue
            step = POLICY.delay_before(row.nudges + 1)
            async with self.admin.transaction():
                await self.admin.execute(
                    "UPDATE todos SET created_at = created_at - $2::interval,"
                    " claimed_at = claimed_at - $2::interval WHERE endpoint_id = $1",
                    lane.endpoint,
                    step,
                )
                await self.admin.execute(
                    "UPDATE stall_nudge.queue_stall_nudges"
                    " SET last_nudged_at = last_nudged_at - $2::interval,"
                    " progressed_at = progressed_at - $2::interval WHERE endpoint_id = $1",
                    lane.endpoint,
                    step,
                )
            lane.shift += step

    async def _act(
        self,
        lane: Lane,
        ops: list[tuple[Any, ...]],
        delay: float,
        pool: asyncpg.Pool,
        host: PostgresHost,
    ) -> list[Stmt]:
        """Run one trial's host operations, each bracketed by database clock reads (pair time)."""
        await asyncio.sleep(delay)
        done: list[Stmt] = []
        lb: datetime = await pool.fetchval(CLOCK)
        claimed: str | None = None
        for op in ops:
            effect: tuple[Any, ...] | None = None
            if op[0] == "claim_held":
                # The host's claim in a transaction held open around it: stamped at the
                # transaction's start, seen only at its commit.
                async with pool.acquire() as conn, conn.transaction():
                    await asyncio.sleep(op[1])
                    claimed = await PostgresHost(conn).claim_next(
                        lane.endpoint, QUEUE, owner="consumer"
                    )
                    stamp = await conn.fetchval(STAMP, claimed)
                    await asyncio.sleep(op[2])
            elif op[0] == "claim_next":
                at = lb + op[1] if len(op) > 1 else None
                claimed = await host.claim_next(lane.endpoint, QUEUE, owner="consumer", at=at)
                stamp = await pool.fetchval(STAMP, claimed)
            if op[0] in ("claim_held", "claim_next"):
                effect = None if claimed is None else ("claim", claimed, stamp + lane.shift)
            elif op[0] in ("complete", "requeue", "delete"):
                if claimed is not None:
                    verb = {
                        "complete": host.complete,
                        "requeue": host.requeue,
                        "delete": host.delete_todo,
                    }
                    await verb[op[0]](claimed)
                    effect = (op[0], claimed)
            elif op[0] == "create":
                lane.created += 1
                todo_id = f"{lane.endpoint}-n{lane.created}"
                created_at = lb - timedelta(minutes=10)
                await host.create_todo(
                    todo_id,
                    endpoint_id=lane.endpoint,
                    queue=QUEUE,
                    created_at=created_at,
                    delivery_id=f"v-{lane.endpoint}",
                )
                effect = ("create", todo_id, created_at + lane.shift, True)
            elif op[0] == "endpoint":
                await host.set_endpoint_state(lane.endpoint, op[1])
                effect = op
            else:
                raise ValueError(f"unknown host operation {op!r}")
            ub: datetime = await pool.fetchval(CLOCK)
            if effect is not None:
                done.append(Stmt(effect=effect, lb=lb + lane.shift, ub=ub + lane.shift))
            lb = ub
        return done

    async def _round(self, lanes: list[Lane], r: int) -> None:
        wake = {f"{e.endpoint}/{QUEUE}": e.modes[r] for e in lanes if e.modes[r] != "reach"}
        lead = max(0.0, -HOST_WINDOW_S[0])
        acting = [(j, e) for j, e in enumerate(lanes) if e.scripts.get(r)]
        actions = [
            asyncio.create_task(
                self._act(e, e.scripts[r], lead + self.rng.uniform(*HOST_WINDOW_S), *self.hosts[j])
            )
            for j, e in acting
        ]
        if actions and lead:
            await asyncio.sleep(lead)
        try:
            async with asyncio.timeout(TIMEOUT_S):
                answers = await _ask(self.workers, {"cmd": "tick", "wake": wake})
                acted = await asyncio.gather(*actions)
        except TimeoutError:
            raise RaceAbort(f"round {r + 1} took longer than {TIMEOUT_S:g} s") from None
        finally:
            for task in actions:
                task.cancel()
        end: datetime = await self.admin.fetchval(CLOCK)
        endpoints = [e.endpoint for e in lanes]
        rows = await self.admin.fetch(
            "SELECT * FROM stall_nudge.queue_stall_nudges WHERE endpoint_id = ANY($1::text[])",
            endpoints,
        )
        todos = await self.admin.fetch(
            "SELECT id, endpoint_id, state, claimed_at, ring_attempts, last_ringed_at"
            " FROM todos WHERE endpoint_id = ANY($1::text[])",
            endpoints,
        )
        result = self.result
        result.rounds += 1
        ok = [a for a in answers if "error" not in a]
        if ok:
            instants = [datetime.fromisoformat(a["now"]) for a in ok]
            result.lock_spreads.append((max(instants) - min(instants)).total_seconds())
        at = datetime.fromisoformat
        swept = [a for a in ok if not a["skipped"]]
        ticks = {
            a["w"]: Tick(a["w"], at(a["now"]), at(a["done"]), a["kind"], a["outside"])
            for a in swept
        }
        result.sweeps_in_round[len(ticks)] += 1
        result.sweep_durations += [a["duration_s"] for a in swept]
        self.ticks = [*self.ticks[-64:], *ticks.values()]
        logs = {
            e.endpoint: RoundLog(mode=e.modes[r], shift=e.shift, end=end + e.shift) for e in lanes
        }
        for (_, lane), stmts in zip(acting, acted, strict=True):
            logs[lane.endpoint].statements = stmts
        for answer in answers:
            self._record(answer, ticks.get(answer["w"]), logs, lanes)
        for lane in lanes:
            log = logs[lane.endpoint]
            for rec in (rec for rec in rows if rec["endpoint_id"] == lane.endpoint):
                log.row_after = _ledger_row(rec, lane.shift)
                if rec["queue"] != QUEUE:
                    log.bad.append(f"a ledger row for queue {rec['queue']!r}")
            lane.rounds.append(log)
            _check_todos(lane, log, [t for t in todos if t["endpoint_id"] == lane.endpoint])

    def _record(
        self,
        answer: dict[str, Any],
        tick: Tick | None,
        logs: dict[str, RoundLog],
        lanes: list[Lane],
    ) -> None:
        """One worker's answer, into each trial's round log in pair time."""
        w = answer["w"]

        def bad(text: str) -> None:
            for log in logs.values():
                log.bad.append(f"worker {w} {text}")

        if "error" in answer:
            return bad(f"failed its tick: {answer['error']}")
        if tick is None:
            if answer["charged"] or answer["drained"] or answer["refunds"]:
                bad(f"skipped yet reported {answer}")
            return None
        self.result.sweeps += 1
        self.result.kinds[tick.kind] += 1
        marks = None
        if tick.kind == "delta":
            marks = record_marks(tick, self.ticks, self.initial, self.initial_full)
        at = datetime.fromisoformat
        ours = {e.endpoint: e.shift for e in lanes}
        outcomes: dict[str, list[Outcome]] = {e: [] for e in ours}
        for n in answer["charged"]:
            endpoint = n["endpoint_id"]
            if endpoint not in ours or n["queue"] != QUEUE:
                bad(f"charged a pair of no trial: {endpoint}/{n['queue']}")
                continue
            stamp = at(n["charged_at"]) + ours[endpoint]
            outcomes[endpoint].append(("charge", n["number"], stamp, n["todo_id"]))
        for endpoint, queue in answer["drained"]:
            if endpoint not in ours or queue != QUEUE:
                bad(f"deleted a row of no trial: {endpoint}/{queue}")
                continue
            outcomes[endpoint].append(DRAIN)
        for f in answer["refunds"]:
            n = f["nudge"]
            if n["endpoint_id"] in ours and n["queue"] == QUEUE:
                s = ours[n["endpoint_id"]]
                logs[n["endpoint_id"]].refunds.append(
                    Refund(
                        w,
                        n["number"],
                        at(n["charged_at"]) + s,
                        n["todo_id"],
                        f["result"],
                        at(f["lb"]) + s,
                        at(f["ub"]) + s,
                    )
                )
        for endpoint, got in outcomes.items():
            if len(set(got)) > 1:
                logs[endpoint].bad.append(f"worker {w} did {got} to one pair in one sweep")
            s = ours[endpoint]
            logs[endpoint].sweeps.append(
                Sweep(
                    w,
                    tick.now + s,
                    tick.done + s,
                    tick.kind,
                    tick.outside,
                    got[0] if got else NONE,
                    max(0, len(got) - 1),
                    None if marks is None else _shifted(marks, s),
                )
            )
        return None


def _shifted(marks: Marks, s: timedelta) -> Marks:
    least, most = marks
    return least + s, most + s


def _todo_row(endpoint: str, todo_id: str, t: Todo) -> tuple[Any, ...]:
    # Some gated todos come from an operator (no delivery): they pass the gate too.
    operator = t.gated and sum(map(ord, todo_id)) % 5 == 0
    delivery = None if operator else f"{'v' if t.gated else 'u'}-{endpoint}"
    return (todo_id, endpoint, QUEUE, delivery, t.created_at, t.state, t.claimed_at)


def _ledger_row(rec: Any, shift: timedelta) -> LedgerRow:
    progressed = rec["progressed_at"]
    return LedgerRow(
        endpoint_id=rec["endpoint_id"],
        queue=rec["queue"],
        nudges=rec["nudges"],
        last_nudged_at=rec["last_nudged_at"] + shift,
        named_todo=rec["named_todo"],
        progressed_at=None if progressed is None else progressed + shift,
    )


def _check_todos(lane: Lane, log: RoundLog, mine: Sequence[Any]) -> None:
    """Every todo is as the host left it after every round so far: a sweep never changes one."""
    expected = lane.facts
    for stmt in (s for rnd in lane.rounds for s in rnd.statements):
        expected = apply_effect(expected, stmt.effect)
    if {t["id"] for t in mine} != set(expected.todos):
        found = sorted(t["id"] for t in mine)
        log.bad.append(f"todos {found} in the database, {sorted(expected.todos)} expected")
        return
    for rec in mine:
        want = expected.todos[rec["id"]]
        claimed = None if rec["claimed_at"] is None else rec["claimed_at"] + lane.shift
        rung = rec["ring_attempts"] != 0 or rec["last_ringed_at"] is not None
        if (rec["state"], claimed) != (want.state, want.claimed_at) or rung:
            log.bad.append(f"todo {rec['id']} is {dict(rec)}, expected {want}")


async def _record_now(admin: asyncpg.Connection) -> tuple[Tick | None, Tick | None]:
    """The fleet's record as a configuration finds it: its last sweep and last full pass."""
    rec = await admin.fetchrow("SELECT judged_to, full_pass_at FROM stall_nudge.ticks")
    at = datetime.min.replace(tzinfo=UTC)
    ticks = [
        None if rec is None or rec[column] is None else Tick(-1, rec[column], at, kind, False)
        for column, kind in (("judged_to", "any"), ("full_pass_at", "full"))
    ]
    return ticks[0], ticks[1]


async def run_config(
    dsn: str, instances: int, trials: int, first_trial: int, rng: random.Random, args: Any
) -> ConfigResult:
    result = ConfigResult(instances=instances)
    started = time.monotonic()
    admin = await asyncpg.connect(dsn, server_settings={"application_name": "stall-races"})
    pools: list[asyncpg.Pool] = []
    try:
        for _ in range(LANES):
            pools.append(await asyncpg.create_pool(dsn, min_size=1, max_size=1))
        async with _workers(instances, dsn, args.workdir, args.fault) as workers:
            coordinator = Coordinator(admin, pools, workers, rng, result, await _record_now(admin))
            # Progress every tenth of a long run; a short one prints only its result.
            step = (trials // 10) // LANES * LANES if trials >= 1000 else 0
            for offset in range(0, trials, LANES):
                await coordinator.batch(first_trial + offset, min(LANES, trials - offset))
                done = offset + LANES
                if step and done % step == 0 and done < trials:
                    print(
                        f"races[{instances}]: {done}/{trials} trials,"
                        f" {sum(result.counts.values())} violations so far,"
                        f" {time.monotonic() - started:.0f} s",
                        flush=True,
                    )
    finally:
        for pool in pools:
            await pool.close()
        await admin.close()
    result.seconds = time.monotonic() - started
    return result


async def _races(server: str, args: Any) -> list[ConfigResult]:
    name = f"stall_races_{uuid.uuid4().hex[:10]}"
    await create_database(server, name)
    try:
        dsn = with_database(server, name)
        conn = await asyncpg.connect(dsn)
        try:
            # Commits need not wait for the disk here: visibility and locking are unchanged.
            await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
            await migrate(conn, host_schema=True)
        finally:
            await conn.close()
        rng = random.Random(SEED)
        results = []
        share, extra = divmod(args.trials, len(args.instances))
        first = 0
        for i, count in enumerate(args.instances):
            mine = share + (1 if i < extra else 0)
            results.append(await run_config(dsn, count, mine, first, rng, args))
            first += mine
        return results
    finally:
        await drop_database(server, name)


#: What the races exercised, per class (the module's docstring says what each means).
STATS = (
    "contested", "seen", "unseen", "turned_due", "charges", "resets", "by_claim",
    "by_departure", "by_kept", "unreported_resets", "refunds", "full", "delta", "deferred",
    "overlapped", "cas",
)  # fmt: skip


def _fields(counter: Mapping[str, Any], names: Iterable[str]) -> str:
    return " ".join(f"{k}={counter[k]}" for k in names)


def _ms_of(values: Sequence[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}ms"


def _report(r: ConfigResult) -> None:
    for note in r.notes:
        print(f"violation: {note}")
    for trace in r.traces:
        print(trace)
    print(
        f"races[{r.instances} instances]: trials={r.trials} rounds={r.rounds} sweeps={r.sweeps}"
        f" (full={r.kinds['full']} delta={r.kinds['delta']})"
        f" db_sweeps_per_tick={r.sweeps_per_tick:.3f} {_fields(r.counts, COUNTS)}"
        f" seconds={r.seconds:.1f}",
        flush=True,
    )
    rounds = ", ".join(f"{n}: {c}" for n, c in sorted(r.sweeps_in_round.items()))
    spread, took = r.lock_spreads, r.sweep_durations
    print(
        f"  timing: rounds by sweeps in them {{{rounds}}};"
        f" try-lock spread p50={_ms_of(spread, 0.5)} p90={_ms_of(spread, 0.9)};"
        f" sweeping tick p50={_ms_of(took, 0.5)} p90={_ms_of(took, 0.9)}"
    )
    for kind in (k for k in KINDS if k in r.by_kind):
        v = r.by_kind[kind]
        print(
            f"  {kind}: trials={v.stats['trials']} {_fields(v.stats, STATS)}"
            f" {_fields(v.counts, COUNTS)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Race real sweeper processes on skewed clocks; judge every wake exactly."
    )
    parser.add_argument("--trials", type=int, default=10_000, help="in all (default 10000)")
    parser.add_argument(
        "--instances", type=int, nargs="+", default=[4, 8], help="sweeper counts (default 4 8)"
    )
    parser.add_argument("--dsn", default=os.environ.get("STALL_TEST_DSN"), help="a server DSN")
    parser.add_argument(
        "--fault",
        choices=FAULTS,
        default="none",
        help="a control: every worker on a deliberately broken ledger, or one beside the lock",
    )
    args = parser.parse_args(argv)
    if args.trials < len(args.instances):
        parser.error("--trials must be at least one per instance count")
    if any(n < 1 for n in args.instances):
        parser.error("--instances must be positive")
    try:
        skewed_env("+0s")
    except SkewUnavailable as exc:
        print(f"races: cannot shift the sweepers' wall clocks: {exc}", file=sys.stderr)
        return 2
    args.workdir = Path(tempfile.mkdtemp(prefix="stall-races-"))
    print(
        f"races: worker logs in {args.workdir}; offsets {', '.join(OFFSETS)}; fault={args.fault}",
        flush=True,
    )
    try:
        with contextlib.nullcontext(args.dsn) if args.dsn else embedded_postgres() as server:
            results = asyncio.run(_races(server, args))
    except RaceAbort as exc:
        print(f"races: aborted: {exc}", file=sys.stderr)
        return 2
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.counts)
        _report(r)
    largest = max(args.instances)
    figure = next((r for r in results if r.instances == 4), min(results, key=lambda r: r.instances))
    print(
        f"# summary: instances is the largest count run ({largest});"
        f" db_sweeps_per_tick is the {figure.instances}-instance figure; other={total['other']}"
    )
    print(
        f"races: trials={sum(r.trials for r in results)} instances={largest}"
        f" {_fields(total, COUNTS[:-1])} db_sweeps_per_tick={figure.sweeps_per_tick:.3f}",
        flush=True,
    )
    return 1 if any(total[k] for k in COUNTS) else 0


if __name__ == "__main__":
    sys.exit(main())
