"""Races: real sweeper processes on skewed wall clocks against one database, judged exactly.

    .venv/bin/python -m tests.stress.races                  # 10,000 trials: 4 and 8 instances
    .venv/bin/python -m tests.stress.races --trials 36      # a short run (the test suite's)
    .venv/bin/python -m tests.stress.races --fault rewind   # a positive control: it must fail

Real parts only: one PostgreSQL (``--dsn``, else ``STALL_TEST_DSN``, else an
embedded one) holding a throwaway database this script creates, migrates and
drops; 4 and then 8 sweeper processes (``tests.stress.race_worker``), each
under libfaketime (``stall_testing.skewed_env``) with its wall clock shifted
by 0, +2 s, -2 s, +30 s or -30 s, each with its own asyncpg pool and
``PostgresLedger(pool)`` deciding at the database's clock, a full pass every
``race_worker.FULL_PASS_INTERVAL`` and deltas between; consumers claiming,
completing, requeueing and deleting through ``PostgresHost`` on their own
connections while the sweepers tick. The policy is the spec's default
``PacingPolicy()``: nothing waits five minutes, because every timestamp is
planted relative to the database's ``now()``.

Theory of operation
-------------------
Trials run four at a time (``tick_limit`` of them, so the tick limit never
holds a due pair back), each on its own fresh pair ``(r<N>t<trial>, q)``,
in four rounds. A round writes one ``tick`` command to every worker at once
and runs each trial's host action (a claim, stamped by the database, 60 s
behind it, or inside a transaction held open across the tick; a completion,
that may delete the todo; a requeue; a new todo; the endpoint paused or
resumed) on its own connection, starting at a random instant
within 3 ms either side of the commands, so sweeps see it, miss it or race
it; then it reads every worker's answer: whether it skipped (missed the tick
lock), the instant it decided at (``now``), whether it judged every pair or
only what changed (``kind``), a database-clock read once it committed
(``done``), its charges, deletions and refunds. Each host statement is
bracketed by database clock reads (``lb`` before it, ``ub`` after its
commit). After the round the coordinator reads the trial's ledger row (with
the todo it names and the progress it keeps) and todos. Round 1 is the race;
round 2 settles; round 3 is a second action (the consumer woken claims, the
change is reverted, the backlog returns, or the receiver heals); round 4
settles again.

Race classes: ``new-pair`` (first-nudge insert, some at the exact threshold
instant), ``due-row`` (the backoff expires during the rounds), ``progress``
(a claim at tick, up to the cap; some rows keep progress a reset left),
``drain`` (the last todo claimed at tick), ``endpoint-change`` (at tick;
some claim while no nudge may go out, so the row is reset),
``receiver-heal`` (wakes reach nobody or are refused, are refunded, then the
pair is moved one backoff step on and the receiver answers), and what the
rule reads departures for: ``claim-behind`` (a claim stamped 60 s behind the
database, often before the row's last nudge), ``delete-done`` (the host
deletes a todo when it completes it) and ``spanning-claim`` (the claim's
transaction is held open across the tick, so it is stamped before sweeps
that cannot see it). A tenth of planted rows name no todo, as an older
build's do.

Left to cheaper layers: a hook disabled, enabled or re-scoped at tick races
as an endpoint paused does (both are read in the judging statement's one
snapshot, and no delta finds either), and its rule is the contract suite's;
a host that clears ``claimed_at`` on completion looks to every statement as
one that deletes the todo (no claim stamp, the named todo not pending), and
the contract suite runs both; a claim stamped ahead of the database counts
once in the contract suite, and races as any claim at tick (``progress``).

Judging, exactly (no slack window, no retries)
----------------------------------------------
The judge decides with the core itself: for each sweep it builds the pair's
``PairState`` (its work, ``latest_claim`` and whether the named todo
``has_departed``) and ``LedgerRow`` from the trial's facts and runs
``stall_core.plan_tick`` on them at the sweep's ``now``: a charge (number,
``charge_stamp``, named todo), a drain, a reset (``reset_row``; the row is
kept, unreported) or nothing. A delta judges only what it finds: the judge
states ``tick.sql``'s ``find_changed`` on the pair's facts
(``delta_finds``) with the watermark and last full pass the fleet's record
held when the tick read it (the previous judging tick's ``now`` and the
last full pass's, known from every answer), and a delta that does not find
a pair does nothing to it (``deferred``); the next full pass judges it.

What each sweep saw is modelled, not guessed. A sweep's snapshot lies
between its ``now`` and its commit (a delta's finding statement has one of
its own, no later than its judging one's), which comes before ``done`` and, for a
fleet sweep, before the next fleet sweep's ``now`` (the tick lock); a host
statement is in it if it committed before (``ub < now``: surely; ``lb``
before the snapshot's upper bound: maybe), statements of one trial in
order, and a later snapshot never sees less. A sweep's writes land at its
commit, compare-and-set: a charge, reset or drain applies only if no write
to the row came between the snapshot and the commit (a first nudge only if
no row exists), else the sweep reports nothing for the pair. The judge
explores every interleaving the clocks allow of the fleet's sweeps (in
``now`` order, serialised by the lock), an instance beside the lock
(``--fault outside-lock``: its snapshot and commit float free) and every
refund (a refund takes the lock of its instance), with every visibility each
snapshot may have had. A round is clean when one interleaving explains
every sweep's report, every refund's result and the ledger row after the
round; otherwise the interleaving that explains the most is reported,
mismatch by mismatch, and the next round starts from the rows it leaves
(the replay's, not the database's). The counts:

- ``duplicates``: a charge where the rule allows none (a second charge of
  one due time), and every further wake of one charge;
- ``double_resets``: a nudge 1 over a live row where the rule allows no
  charge: a reset no progress explains (one claim or departure used twice);
- ``lost``: no charge where the rule allows only a charge;
- ``stranded``: a step (nudge n+1) where the rule demands nudge 1 (progress
  ignored), or a nudge that reached nobody and was not refunded though its
  row was unchanged;
- ``other`` (per configuration; any makes the run fail): a charge with the
  wrong number, stamp or todo, a wrong or missed deletion, a ledger row that
  does not match the replay, a todo a sweep changed, a worker error.

``db_sweeps_per_tick`` is the non-skipped ``charge_due`` calls over rounds.
Per class it also prints what the races exercised: ``contested`` trials had a
sweep for which the rule allowed more than one outcome (a host statement may
or may not have been visible to it), ``seen`` / ``unseen`` how that fell,
``turned_due`` trials whose threshold or backoff ran out between two sweeps;
``resets`` charges that answered progress (nudge 1 over a live row), and what showed it
(``by_claim`` a claim stamped after the last nudge, ``by_departure`` only the
named todo's departure, ``by_kept`` progress a reset kept);
``unreported_resets`` rows reset and kept by a sweep that reported nothing;
``full`` / ``delta`` the sweeps by kind; ``deferred`` deltas that did not
find a pair whose decision had changed (the full pass did); ``overlapped``
rounds in which the instance beside the lock and a fleet sweep ran at once,
and ``cas`` writes the compare-and-set surely refused (on every explanation).

Positive controls: ``--fault`` runs every worker on a deliberately broken
ledger (``tests.stress.race_worker``: a correct ledger broken from Python),
each of which must make its count non-zero; ``--fault outside-lock`` runs
worker 0 beside the fleet's lock and must find nothing. ``--claim-hold-ms``
has every consumer claim inside a transaction held open that long after the
claim, which widens the progress-at-tick window.
The last line is exactly (one line)::

    races: trials=<int> instances=<int> duplicates=<int> double_resets=<int> lost=<int>
    stranded=<int> db_sweeps_per_tick=<float>

with ``instances`` the largest count run and ``db_sweeps_per_tick`` the
4-instance figure (if run). It exits 1 if any count (``other`` included) is
not 0, and 2 if it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from adapters.postgres import LOOKBACK, migrate
from stall_core import (
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    TodoRef,
    charge_row,
    has_departed,
    latest_claim,
    made_progress,
    plan_tick,
    refunded_row,
    reset_row,
    work_of,
)
from stall_testing import (
    HOST_SQL,
    PostgresHost,
    SkewUnavailable,
    create_database,
    drop_database,
    embedded_postgres,
    skewed_env,
    with_database,
)

ROOT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as `python tests/stress/races.py`: the repository is the root
    sys.path.insert(0, str(ROOT))

# Needs the path set above when run as a script.
from tests.stress.race_worker import FAULTS  # noqa: E402

__all__ = ["ConfigResult", "decide_intents", "delta_finds", "judge", "main", "run_races"]

POLICY = PacingPolicy()
#: Wall-clock shifts of the sweeper processes, cycled over the workers.
OFFSETS = ("+0s", "+2s", "-2s", "+30s", "-30s")
#: Trials per batch: never more due pairs than one tick may charge.
LANES = POLICY.tick_limit
ROUNDS = 4
QUEUE = "q"
KINDS = (
    "new-pair",
    "due-row",
    "progress",
    "drain",
    "endpoint-change",
    "receiver-heal",
    "claim-behind",
    "delete-done",
    "spanning-claim",
)
#: A host action starts this long after the tick commands are written (uniformly; negative:
#: before them), so that sweeps see it, miss it, or race it.
HOST_WINDOW_S = (-0.003, 0.003)
#: How far behind the database the odd claims are stamped.
BEHIND = timedelta(seconds=60)
#: A spanning claim's transaction stays open this long (seconds) before and after the claim.
SPAN_S = (0.002, 0.030)
#: Bounds only a hang reaches: one round's answers, and the workers' start-up.
ROUND_TIMEOUT_S = 600.0
START_TIMEOUT_S = 600.0
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


def pair_state(endpoint: str, facts: Facts, row: LedgerRow | None) -> PairState:
    """The core's view of the pair, as the tick statement reads it from these rows."""
    return PairState(
        endpoint_id=endpoint,
        queue=QUEUE,
        oldest=work_of(
            (
                TodoRef(id=todo_id, created_at=t.created_at)
                for todo_id, t in facts.todos.items()
                if t.state == "pending" and t.gated
            ),
            endpoint_id=endpoint,
            queue=QUEUE,
        ),
        endpoint_active=facts.endpoint_state == "active",
        has_receiver=True,
        latest_claim=latest_claim(t.claimed_at for t in facts.todos.values()),
        named_departed=has_departed(row, facts.pending),
    )


#: ("none",) | ("drain",) | ("charge", number, stamp, todo_id): what a sweep reports of a pair.
Outcome = tuple[Any, ...]
NONE: Outcome = ("none",)
DRAIN: Outcome = ("drain",)


@attrs.frozen
class Intent:
    """What one sweep decided for the pair at its snapshot; it writes it at its commit.

    ``kind`` is none, charge (``nudge``), drain or reset (``row``, the row it
    keeps). ``deferred``: a delta that did not find the pair, whose decision
    was not nothing. ``progress`` says what showed the pair's progress:
    ``claim`` (a claim stamped after the last nudge), ``departure`` (only the
    named todo's departure), ``kept`` (a reset's), or nothing.
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
    if state.latest_claim is not None and state.latest_claim > row.last_nudged_at:
        return "claim"
    return "departure"


def delta_finds(
    facts: Facts,
    row: LedgerRow | None,
    now: datetime,
    watermark: datetime,
    full_mark: datetime,
    policy: PacingPolicy = POLICY,
) -> bool:
    """Whether a delta finds the pair: ``tick.sql``'s ``find_changed``, clause by clause.

    ``watermark`` is the fleet's last judging tick's ``now`` less the lookback,
    ``full_mark`` its last full pass's, both in the pair's time. A pair the
    delta does not find keeps its decision for the next full pass.
    """
    todos = list(facts.todos.values())
    live = row is not None and row.progressed_at is None
    # Claims stamped since the watermark that are progress to the row.
    if live and any(
        t.claimed_at is not None and t.claimed_at > watermark and t.claimed_at > row.last_nudged_at
        for t in todos
        if row is not None
    ):
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
        and t.created_at >= watermark - policy.threshold
        and t.created_at < now - policy.threshold
        for t in todos
    ):
        return True
    if row is None:
        return False
    # The row's backoff step ended since the watermark.
    step = policy.delay_before(row.nudges + 1)
    if row.nudges < policy.cap and watermark - step < row.last_nudged_at <= now - step:
        return True
    # Nudged since the last full pass, and its named todo departed.
    return (
        row.nudges <= policy.cap
        and row.last_nudged_at >= full_mark
        and row.progressed_at is None
        and row.named_todo is not None
        and row.named_todo not in facts.pending
    )


def decide_intents(
    endpoint: str,
    facts: Facts,
    row: LedgerRow | None,
    now: datetime,
    kind: str = "full",
    marks: tuple[tuple[datetime, datetime], tuple[datetime, datetime]] | None = None,
    policy: PacingPolicy = POLICY,
    found: Facts | None = None,
) -> list[Intent]:
    """What a sweep at ``now`` may decide for the pair on these facts: the core's plan.

    A full pass decides ``plan_tick``'s one outcome. A delta decides it if it
    finds the pair (``delta_finds``) on ``found``, the facts its finding
    statement saw (an earlier snapshot, or the same), else nothing; ``marks``
    are the least and the most (watermark, full-pass mark) the fleet's record
    may have held, so where they disagree either may happen (only beside the
    fleet's lock).
    """
    key = (endpoint, QUEUE)
    state = pair_state(endpoint, facts, row)
    plan = plan_tick([state], {} if row is None else {key: row}, now, policy)
    shown = _progress_shown(state, row)
    full = NOTHING
    if plan.charges:
        full = Intent("charge", nudge=plan.charges[0], progress=shown)
    elif plan.cleared:
        full = Intent("drain")
    elif plan.reset:
        assert row is not None  # only a row is reset
        kept = reset_row(row, now)
        full = Intent("reset", row=kept, progress=shown) if kept != row else NOTHING
    if kind != "delta" or full == NOTHING:
        return [full]
    assert marks is not None  # every delta carries its marks
    (w_least, f_least), (w_most, f_most) = marks
    seen = facts if found is None else found
    options = []
    if delta_finds(seen, row, now, w_least, f_least, policy):
        options.append(full)
    if not delta_finds(seen, row, now, w_most, f_most, policy):
        options.append(Intent("none", deferred=True))
    return options


def reported(intent: Intent) -> Outcome:
    """What a sweeper reports of an intent its compare-and-set let through."""
    if intent.kind == "charge":
        assert intent.nudge is not None
        n = intent.nudge
        return ("charge", n.number, n.charged_at, n.todo.id)
    if intent.kind == "drain":
        return DRAIN
    return NONE


def apply_effect(facts: Facts, effect: tuple[Any, ...]) -> Facts:
    """The facts after one host statement."""
    kind = effect[0]
    todos = dict(facts.todos)
    if kind == "claim":
        todos[effect[1]] = attrs.evolve(todos[effect[1]], state="claimed", claimed_at=effect[2])
    elif kind == "complete":
        todos[effect[1]] = attrs.evolve(todos[effect[1]], state="done")
    elif kind == "requeue":
        todos[effect[1]] = attrs.evolve(todos[effect[1]], state="pending")
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


#: (least, most): the (watermark, full-pass mark) pairs the fleet's record may have held.
Marks = tuple[tuple[datetime, datetime], tuple[datetime, datetime]]


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
    shift: timedelta = timedelta(0)
    rounds: list[RoundLog] = attrs.Factory(list)
    created: int = 0

    @property
    def hook(self) -> str:
        return f"h-{self.endpoint}"

    def new_todo_id(self) -> str:
        self.created += 1
        return f"{self.endpoint}-n{self.created}"


def _plant(lane_id: str, d: datetime, rng: random.Random, kind: str, trial: int) -> Lane:
    """Plan one trial of ``kind`` with every timestamp relative to the database's ``d``."""
    todos: dict[str, Todo] = {}

    def add(n: int, *, gated: bool = True, created_at: datetime | None = None) -> None:
        for _ in range(n):
            i = len(todos)
            at = d - timedelta(minutes=10, seconds=i) - _ms(i) if created_at is None else created_at
            todos[f"{lane_id}-{i:02d}"] = Todo(created_at=at, gated=gated)

    def consumed(before: datetime) -> None:
        # A claim from earlier work, consumed by the charge that wrote the row (or a drain).
        i = len(todos)
        todos[f"{lane_id}-{i:02d}"] = Todo(
            created_at=before - timedelta(minutes=30),
            gated=True,
            state="done",
            claimed_at=before - timedelta(seconds=1),
        )

    def live(n: int, stamp: datetime, progressed_at: datetime | None = None) -> LedgerRow:
        # The row a charge left: it names the pair's oldest work, as the charge did, or
        # nothing (an older build's row).
        work = work_of(
            (
                TodoRef(id=i, created_at=t.created_at)
                for i, t in todos.items()
                if t.state == "pending" and t.gated
            ),
            endpoint_id=lane_id,
            queue=QUEUE,
        )
        named = work.id if work is not None and rng.random() >= 0.1 else None
        return LedgerRow(
            endpoint_id=lane_id,
            queue=QUEUE,
            nudges=n,
            last_nudged_at=stamp,
            named_todo=named,
            progressed_at=progressed_at,
        )

    def due_stamp(n: int) -> datetime:
        return d - POLICY.delay_before(n + 1) - _ms(rng.uniform(1, 1000))

    def waiting_stamp() -> datetime:
        return d - _ms(rng.uniform(1000, 240_000))

    row: LedgerRow | None = None
    facts_kw: dict[str, Any] = {}
    scripts: dict[int, list[tuple[Any, ...]]] = {}
    modes = dict.fromkeys(range(ROUNDS), "reach")
    boundary: datetime | None = None
    heal = False
    variant = ""
    consume: list[tuple[Any, ...]] = [("claim_next",), ("complete",)]
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
            ("claim", consume),
            ("claim-only", [("claim_next",)]),
            ("inbound", [("create", True)]),
        ]
        action, scripts[0] = rng.choice(actions)
        variant = f"{variant} {action}"
        scripts[2] = consume
    elif kind == "due-row":
        n = rng.randint(1, 4)
        boundary = d + _ms(rng.uniform(*BOUNDARY_S) * 1000)
        add(rng.randint(1, 3))
        row = live(n, boundary - POLICY.delay_before(n + 1))
        if rng.random() < 0.5:
            consumed(row.last_nudged_at)
        variant = f"n={n}"
        scripts[0] = rng.choice([[], [("create", True)]])
        scripts[2] = [("claim_next",)]
    elif kind == "progress":
        n = rng.randint(1, 5)
        due = n < POLICY.cap and rng.random() < 0.6
        add(rng.randint(2, 3))
        if rng.random() < 0.1:
            # A reset kept progress (it was held back, or not a candidate): nudge 1 at once.
            stamp = waiting_stamp()
            row = live(0, stamp, progressed_at=stamp + _ms(rng.uniform(1, 900)))
            variant = "kept "
        else:
            row = live(n, due_stamp(n) if due else waiting_stamp())
            variant = f"n={n} {'due' if due else 'waiting'} "
        if rng.random() < 0.5:
            consumed(row.last_nudged_at)
        then, scripts[0] = rng.choice(
            [
                ("complete", consume),
                ("requeue", [("claim_next",), ("requeue",)]),
                ("held", [("claim_next",)]),
            ]
        )
        variant += then
        scripts[2] = consume
    elif kind == "drain":
        if rng.random() < 0.2:
            variant = "no-row"
            add(1)
        else:
            n = rng.randint(1, 5)
            due = n < POLICY.cap and rng.random() < 0.5
            add(1)
            row = live(n, due_stamp(n) if due else waiting_stamp())
            variant = f"n={n} {'due' if due else 'waiting'}"
        if rng.random() < 0.4:
            add(1, gated=False, created_at=d - timedelta(minutes=9))  # ungated work stays
        scripts[0] = rng.choice([consume, [("claim_next",)]])
        scripts[2] = [("create", True)]  # the backlog returns: the first backoff again
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
            row = live(n, due_stamp(n))
            variant = f"n={n}"
        if kind == "endpoint-change":
            roll = rng.random()
            if roll < 0.4:
                state = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", state)]
                scripts[2] = [("endpoint", "active")]
                variant += f" {state}"
            elif roll < 0.6:
                # Progress while no nudge may go out: the row is reset (kept), not charged.
                state = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", state), ("claim_next",)]
                scripts[2] = [("endpoint", "active")]
                variant += f" {state}-claimed"
            else:
                facts_kw["endpoint_state"] = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", "active")]
                scripts[2] = [("claim_next",)]
                variant += " resumed"
        else:
            failing = rng.choice(["lost", "refuse"])
            modes[0] = modes[1] = failing
            heal = True
            scripts[0] = rng.choice([[], consume])
            variant += f" {failing}"
    elif kind in ("claim-behind", "delete-done", "spanning-claim"):
        n = rng.randint(1, 4)
        add(rng.randint(2, 3))
        if kind == "claim-behind":
            # A recent nudge, so a claim 60 s behind the database is often stamped before it.
            row = live(n, d - _ms(rng.uniform(1000, 120_000)))
            claim: tuple[Any, ...] = ("claim_next", -BEHIND)
            variant = f"n={n} recent"
        else:
            due = rng.random() < 0.5
            row = live(n, due_stamp(n) if due else waiting_stamp())
            variant = f"n={n} {'due' if due else 'waiting'}"
            claim = ("claim_next",)
            if kind == "spanning-claim":
                claim = ("claim_held", rng.uniform(*SPAN_S), rng.uniform(*SPAN_S))
        if row.named_todo is None:
            variant += " unnamed"
        finish: list[tuple[Any, ...]] = [("delete",)] if kind == "delete-done" else [("complete",)]
        if rng.random() < 0.25 and kind in ("claim-behind", "spanning-claim"):
            finish = []
            variant += " held"
        scripts[0] = [claim, *finish]
        scripts[2] = [("claim_next",), *(finish or [("complete",)])]
    else:
        raise ValueError(f"unknown race class {kind!r}")
    return Lane(
        trial=trial,
        kind=kind,
        variant=variant.strip(),
        endpoint=lane_id,
        facts=Facts(todos=todos, **facts_kw),
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


def _show_row(row: LedgerRow | None) -> str:
    if row is None:
        return "no row"
    kept = "" if row.progressed_at is None else f", progress kept {row.progressed_at}"
    return f"({row.nudges}, {row.last_nudged_at}, names {row.named_todo}{kept})"


def _trace(lane: Lane) -> str:
    """A failing trial, round by round, in pair time: what to read first when a count is not 0."""
    out = [f"  trace of trial {lane.trial} ({lane.kind} {lane.variant}): row {_show_row(lane.row)}"]
    for todo_id, t in sorted(lane.facts.todos.items()):
        out.append(f"    todo {todo_id} {t}")
    for r, rnd in enumerate(lane.rounds):
        out.append(f"    round {r + 1} ({rnd.mode}, shift {rnd.shift}), ends {rnd.end}:")
        out.extend(f"      host {s.effect} lb={s.lb} ub={s.ub}" for s in rnd.statements)
        out.extend(
            f"      sweep w{s.worker}{' (outside)' if s.outside else ''} {s.kind}"
            f" now={s.now} done={s.done} {s.outcome}"
            + (f" marks={s.marks}" if s.marks else "")
            + (f" +{s.extra} wakes" if s.extra else "")
            for s in sorted(rnd.sweeps, key=lambda s: s.now)
        )
        out.extend(
            f"      refund w{f.worker} nudge {f.number} ({f.charged_at}) -> {f.result}"
            f" lb={f.lb} ub={f.ub}"
            for f in rnd.refunds
        )
        out.append(f"      after: row {_show_row(rnd.row_after)}")
    return "\n".join(out)


@attrs.frozen
class Point:
    """One instant an interleaving orders: a snapshot (S), a commit (C) or a refund (R).

    Its true instant lies in [lo, hi]; ``of`` is the sweep's (or refund's) index.
    """

    kind: str
    of: int
    lo: datetime
    hi: datetime


@attrs.frozen
class Pend:
    """A sweep between its snapshot and its commit: what it saw and decided."""

    k: int
    version: int
    row: LedgerRow | None
    intent: Intent


#: One observation an interleaving does not explain: what was observed, what it gives.
Miss = tuple[str, Any, Any, LedgerRow | None]


@attrs.frozen
class St:
    """One interleaving so far: statements seen, the ledger row and its write count, ..."""

    k: int
    version: int
    row: LedgerRow | None
    #: the latest lower bound of the points placed so far
    floor: datetime
    fired: frozenset[int] = frozenset()
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
        if expected[1] == 1 and observed[1] > 1:
            return "stranded"
        return "other"
    if observed == NONE and expected[0] == "charge":
        return "lost"
    return "other"


class _Round:
    """One round of one trial, replayed over every interleaving the clocks allow."""

    def __init__(self, lane: Lane, rnd: RoundLog, stages: Sequence[Facts]) -> None:
        self.lane = lane
        self.rnd = rnd
        self.stages = stages
        assert rnd.end is not None
        end = rnd.end
        self.sweeps = rnd.sweeps
        fleet = sorted(
            (i for i, s in enumerate(rnd.sweeps) if not s.outside), key=lambda i: rnd.sweeps[i].now
        )
        self.chain: list[Point] = []
        for n, i in enumerate(fleet):
            s = rnd.sweeps[i]
            after = rnd.sweeps[fleet[n + 1]].now if n + 1 < len(fleet) else end
            hi = min(s.done, after, end)
            self.chain += [Point("S", i, s.now, hi), Point("C", i, s.now, hi)]
        self.floats: list[Point] = []
        for i, s in enumerate(rnd.sweeps):
            if s.outside:
                hi = min(s.done, end)
                self.floats += [Point("S", i, s.now, hi), Point("C", i, s.now, hi)]
        swept = {s.worker: i for i, s in enumerate(rnd.sweeps)}
        self.refund_sweep: dict[int, int] = {}
        for j, f in enumerate(rnd.refunds):
            if f.worker in swept:
                self.refund_sweep[j] = swept[f.worker]
                self.floats.append(Point("R", j, f.lb, f.ub))
        #: per sweep: (k bounds of its snapshot)
        self.k_bounds = {}
        for i, s in enumerate(rnd.sweeps):
            hi = next(p.hi for p in (*self.chain, *self.floats) if p.kind == "S" and p.of == i)
            self.k_bounds[i] = (
                sum(1 for st in rnd.statements if st.ub < s.now),
                sum(1 for st in rnd.statements if st.lb < hi),
            )
        #: per sweep, what the interleavings reaching its commit said (for the statistics)
        self.at_commit: dict[int, list[tuple[Pend, Outcome, bool]]] = {}
        #: the fleet sweeps whose commit the replay has passed
        self._chain_committed: set[int] = set()

    # -- placing points --

    def _snapshot(self, st: St, i: int) -> list[St]:
        s = self.sweeps[i]
        k_min, k_max = self.k_bounds[i]
        low = max(st.k, k_min)
        out = []
        for k in range(low, max(k_max, low) + 1):
            # A delta finds its pairs in a statement of its own: a snapshot no later.
            for found in range(low, k + 1) if s.kind == "delta" else (k,):
                for intent in decide_intents(
                    self.lane.endpoint,
                    self.stages[k],
                    st.row,
                    s.now,
                    s.kind,
                    s.marks,
                    found=self.stages[found],
                ):
                    pend = Pend(k=k, version=st.version, row=st.row, intent=intent)
                    nxt = attrs.evolve(st, k=k, pending=(*st.pending, (i, pend)))
                    if nxt not in out:
                        out.append(nxt)
        return out

    def _commit(self, st: St, i: int) -> St:
        s = self.sweeps[i]
        pend = next(p for j, p in st.pending if j == i)
        pending = tuple((j, p) for j, p in st.pending if j != i)
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
            nudge = Nudge(
                endpoint_id=self.lane.endpoint,
                queue=QUEUE,
                todo=TodoRef(id=todo, created_at=stamp),
                number=number,
                charged_at=stamp,
            )
            row, version = charge_row(nudge), version + 1
        elif s.outcome == DRAIN:
            row, version = None, version + 1
        return attrs.evolve(st, row=row, version=version, pending=pending, misses=misses, cas=cas)

    def _refund(self, st: St, j: int) -> St:
        f = self.rnd.refunds[j]
        nudge = Nudge(
            endpoint_id=self.lane.endpoint,
            queue=QUEUE,
            todo=TodoRef(id=f.todo, created_at=f.charged_at),
            number=f.number,
            charged_at=f.charged_at,
        )
        refunded = refunded_row(st.row, nudge)
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
        if p.kind == "S":
            return self._snapshot(st, p.of)
        if p.kind == "C":
            return [self._commit(st, p.of)]
        return [self._refund(st, p.of)]

    def _may_fire(self, st: St, x: int) -> bool:
        p = self.floats[x]
        if x in st.fired or p.hi < st.floor:
            return False
        if p.kind == "C":
            return any(j == p.of for j, _ in st.pending)
        if p.kind == "R":
            sweep = self.refund_sweep[p.of]
            if sweep not in self._committed(st):
                return False
            if not self.sweeps[sweep].outside:
                # A fleet refund waits for the fleet's tick lock: never inside a fleet tick.
                return not any(not self.sweeps[j].outside for j, _ in st.pending)
        return True

    def _committed(self, st: St) -> set[int]:
        """The sweeps whose commit this interleaving has placed."""
        fired = {q.of for n, q in enumerate(self.floats) if q.kind == "C" and n in st.fired}
        return self._chain_committed | fired

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

    def replay(self, starts: Iterable[LedgerRow | None]) -> tuple[set[St], bool]:
        """The interleavings that explain the most of the round; whether any is complete."""
        floor = datetime.min.replace(tzinfo=UTC)
        states = {St(k=0, version=0, row=row, floor=floor) for row in starts}
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
            states = _prune(after)
        states = self._gap(states)
        ends = {st for st in states if len(st.fired) == len(self.floats) and not st.pending}
        if not ends:
            return states, False
        finals = set()
        for st in ends:
            misses = st.misses
            if st.row != self.rnd.row_after:
                misses = (*misses, ("row", self.rnd.row_after, st.row, None))
            finals.add(attrs.evolve(st, misses=misses))
        fewest = min(len(st.misses) for st in finals)
        return {st for st in finals if len(st.misses) == fewest}, True


def _prune(states: set[St]) -> set[St]:
    fewest = min(len(st.misses) for st in states)
    return {st for st in states if len(st.misses) <= fewest + SPARE_MISSES}


def judge(lane: Lane) -> Verdict:
    """Replay one trial with the core's rule and count every departure from it.

    See the module's docstring: the judge follows every interleaving and
    visibility the clocks allow; a round is clean when one of them explains
    every report, every refund result and the row after it.
    """
    v = Verdict()
    facts = lane.facts
    starts: set[LedgerRow | None] = {lane.row}
    contested = turned_due = seen = unseen = False

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
                said = f"ledger row {_show_row(observed)} after the round"
                note(kind, r, f"{said}, the replay says {_show_row(expected)}")
            elif what == "refund":
                said = f"a refund answered {observed}"
                note(kind, r, f"{said}, the replay says {expected} on {_show_row(row)}")
            else:
                said = f"a sweep did {observed} over {_show_row(row)}"
                note(kind, r, f"{said}, the rule says {expected}")
        v.stats["cas"] += min(st.cas for st in best)
        beside = [s for s in rnd.sweeps if s.outside]
        v.stats["overlapped"] += any(
            f.now < o.done and o.now < f.done for o in beside for f in rnd.sweeps if not f.outside
        )
        for i, commits in replay.at_commit.items():
            s = rnd.sweeps[i]
            outcomes = {o for _, o, _ in commits}
            contested |= len(outcomes) > 1
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
            if all(p.intent.deferred for p in matched):
                v.stats["deferred"] += 1
            if all(p.intent.kind == "reset" for p in matched):
                v.stats["unreported_resets"] += 1
            if s.outcome[0] == "charge":
                v.stats["charges"] += 1
                shown = {p.intent.progress for p in matched}
                if "" not in shown:
                    v.stats["resets"] += 1
                    if len(shown) == 1:
                        v.stats[f"by_{shown.pop()}"] += 1
        v.stats["refunds"] += len(rnd.refunds)
        facts = stages[-1]
        starts = {st.row for st in best}
    if lane.boundary is not None:
        before = [s for r in lane.rounds for s in r.sweeps if s.now <= lane.boundary]
        after = [s for r in lane.rounds for s in r.sweeps if s.now > lane.boundary]
        turned_due = bool(before and after)
    if v.notes:
        v.trace = _trace(lane)
    v.stats["trials"] += 1
    v.stats["contested"] += contested
    v.stats["seen"] += seen
    v.stats["unseen"] += unseen
    v.stats["turned_due"] += turned_due
    return v


def _check_refunds(rnd: RoundLog, r: int, note: Any) -> None:
    """Each charge that reached nobody has one refund by its sweeper; no other is refunded."""
    charges = {
        (s.worker, s.outcome[1], s.outcome[2]) for s in rnd.sweeps if s.outcome[0] == "charge"
    }
    for worker, number, stamp in sorted(charges):
        mine = [
            f
            for f in rnd.refunds
            if f.worker == worker and (f.number, f.charged_at) == (number, stamp)
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


class Worker:
    """One sweeper process on a shifted wall clock, driven one JSON line at a time."""

    def __init__(self, index: int, offset: str, proc: asyncio.subprocess.Process, log: Path):
        self.index = index
        self.offset = offset
        self.proc = proc
        self.log = log

    @classmethod
    async def start(cls, index: int, dsn: str, workdir: Path, fault: str) -> Worker:
        offset = OFFSETS[index % len(OFFSETS)]
        log = workdir / f"worker-{index}.log"
        env = skewed_env(offset)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        with log.open("ab") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.stress.race_worker",
                "--dsn",
                dsn,
                "--worker",
                str(index),
                "--fault",
                fault,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=ROOT,
                env=env,
            )
        return cls(index, offset, proc, log)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode())

    async def flush(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()

    async def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RaceAbort(f"worker {self.index} exited (log: {self.log})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def stop(self) -> None:
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=5)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


class RaceAbort(RuntimeError):
    """The run could not go on (a worker died, a round timed out, faketime did not work)."""


def _offset_seconds(offset: str) -> float:
    return float(offset.rstrip("s"))


@asynccontextmanager
async def _workers(count: int, dsn: str, workdir: Path, fault: str) -> AsyncIterator[list[Worker]]:
    workers: list[Worker] = []
    try:
        for i in range(count):
            workers.append(await Worker.start(i, dsn, workdir, fault))
        async with asyncio.timeout(START_TIMEOUT_S):
            for w in workers:
                asked = datetime.now(UTC)
                w.send('{"cmd": "hello"}\n')
                await w.flush()
                hello = await w.answer()
                answered = datetime.now(UTC)
                wall = datetime.fromisoformat(hello["wall"])
                skew = (wall - answered).total_seconds()
                # A set-up check that faketime took hold, not part of the judging: the
                # worker's clock read between the question and the answer, shifted.
                shift = timedelta(seconds=_offset_seconds(w.offset))
                if not asked + shift <= wall <= answered + shift:
                    raise RaceAbort(
                        f"worker {w.index} runs {skew:+.1f} s off, not {w.offset}: "
                        "faketime did not shift its clock"
                    )
        yield workers
    finally:
        for w in workers:
            await w.stop()


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


def _committed_first(a: Tick, b: Tick) -> bool:
    """``a``'s record surely committed before ``b``'s: in turn, or ``a`` done before ``b`` began."""
    return _in_turn(a, b) or a.done < b.now


def record_marks(x: Tick, ticks: Sequence[Tick], initial: Tick | None, full: Tick | None) -> Marks:
    """The least and the most (watermark, full-pass mark) ``x``'s delta may have read.

    The record holds the ``now`` of the last tick to commit before ``x`` read
    it, and of the last full pass to: behind the fleet's lock that is one tick
    each, the one before ``x``; a tick beside the lock may or may not have come
    between. ``initial`` and ``full`` are the record as the run found it.
    """
    earlier = [t for t in ticks if t.now < x.now]

    def last(candidates: list[Tick], start: Tick | None) -> list[datetime]:
        # A record is the last one x read unless a later one surely committed after it and
        # before x read: one x took its lock after.
        later = [u for u in candidates if _in_turn(u, x)]
        found = [
            t.now
            for t in candidates
            if not any(u is not t and _committed_first(t, u) for u in later)
        ]
        if start is not None and not later:
            found.append(start.now)
        assert found, "a delta follows a recorded sweep"
        return found

    judged = last(earlier, initial)
    fulls = last([t for t in earlier if t.kind == "full"], full)
    return (
        (min(judged) - LOOKBACK, min(fulls) - LOOKBACK),
        (max(judged) - LOOKBACK, max(fulls) - LOOKBACK),
    )


# -- one configuration ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Options:
    """How to run: the server, the trials, the fleets, and the knobs for controls."""

    dsn: str | None
    trials: int
    instances: tuple[int, ...]
    seed: int
    workdir: Path
    #: a deliberately broken ledger in every worker (race_worker.FAULTS), for controls
    fault: str = "none"
    #: consumers hold their claiming transaction open this long (widens progress at tick)
    claim_hold_s: float = 0.0


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
INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at, claimed_at)
VALUES ($1, $2, $3, $4, $5, $1, $6, $7)
"""
LEDGER_ROWS = """
INSERT INTO stall_nudge.queue_stall_nudges
       (endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""
CLEANUP = (
    "DELETE FROM stall_nudge.queue_stall_nudges WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM todos WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM notify_hooks WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM deliveries WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM endpoints WHERE id = ANY($1::text[])",
    "DELETE FROM stall_nudge.held WHERE endpoint_id = ANY($1::text[])",
)


def _ledger_row(rec: Any, shift: timedelta) -> LedgerRow:
    return LedgerRow(
        endpoint_id=rec["endpoint_id"],
        queue=rec["queue"],
        nudges=rec["nudges"],
        last_nudged_at=rec["last_nudged_at"] + shift,
        named_todo=rec["named_todo"],
        progressed_at=None if rec["progressed_at"] is None else rec["progressed_at"] + shift,
    )


class Coordinator:
    """Runs batches of trials against a fleet of workers and judges them."""

    def __init__(
        self,
        admin: asyncpg.Connection,
        hosts: Sequence[tuple[asyncpg.Pool, PostgresHost]],
        workers: Sequence[Worker],
        rng: random.Random,
        result: ConfigResult,
        claim_hold_s: float,
        record: tuple[Tick | None, Tick | None],
    ) -> None:
        self.admin = admin
        self.hosts = hosts
        self.workers = workers
        self.rng = rng
        self.result = result
        self.claim_hold_s = claim_hold_s
        #: every non-skipped tick so far (the fleet's record follows them)
        self.ticks: list[Tick] = []
        self.initial, self.initial_full = record

    async def batch(self, first_trial: int, size: int) -> None:
        lanes = await self._setup(first_trial, size)
        for r in range(ROUNDS):
            if r == 2:
                await self._heal(lanes)
            await self._round(lanes, r)
        for lane in lanes:
            self.result.add(lane, judge(lane))
        endpoints = [lane.endpoint for lane in lanes]
        async with self.admin.transaction():
            for sql in CLEANUP:
                await self.admin.execute(sql, endpoints)

    async def _setup(self, first_trial: int, size: int) -> list[Lane]:
        async with self.admin.transaction():
            d: datetime = await self.admin.fetchval(CLOCK)
            lanes = []
            for j in range(size):
                trial = first_trial + j
                kind = KINDS[trial % len(KINDS)]
                endpoint = f"r{self.result.instances}t{trial}"
                lanes.append(_plant(endpoint, d, self.rng, kind, trial))
            await self.admin.executemany(
                "INSERT INTO endpoints (id, state) VALUES ($1, $2)",
                [(lane.endpoint, lane.facts.endpoint_state) for lane in lanes],
            )
            await self.admin.executemany(
                "INSERT INTO deliveries (id, endpoint_id, verified, received_at)"
                " VALUES ($1, $2, $3, $4)",
                [
                    (f"{v}-{lane.endpoint}", lane.endpoint, v == "v", d)
                    for lane in lanes
                    for v in ("v", "u")
                ],
            )
            await self.admin.executemany(
                "INSERT INTO notify_hooks (id, endpoint_id, url, secret, enabled)"
                " VALUES ($1, $2, 'http://127.0.0.1:9/hook', 'whsec_races', true)",
                [(lane.hook, lane.endpoint) for lane in lanes],
            )
            await self.admin.executemany(
                TODO_ROWS,
                [
                    (
                        todo_id,
                        lane.endpoint,
                        QUEUE,
                        self._delivery(lane, todo_id, t.gated),
                        t.state,
                        t.created_at,
                        t.claimed_at,
                    )
                    for lane in lanes
                    for todo_id, t in lane.facts.todos.items()
                ],
            )
            await self.admin.executemany(
                LEDGER_ROWS,
                [
                    (
                        lane.endpoint,
                        QUEUE,
                        lane.row.nudges,
                        lane.row.last_nudged_at,
                        lane.row.named_todo,
                        lane.row.progressed_at,
                    )
                    for lane in lanes
                    if lane.row is not None
                ],
            )
        return lanes

    def _delivery(self, lane: Lane, todo_id: str, gated: bool) -> str | None:
        if not gated:
            return f"u-{lane.endpoint}"
        # Some gated todos come from an operator (no delivery): they pass the gate too.
        return None if sum(map(ord, todo_id)) % 5 == 0 else f"v-{lane.endpoint}"

    async def _heal(self, lanes: list[Lane]) -> None:
        """Move each healing pair one backoff step on (all its timestamps back), then it reaches."""
        for lane in lanes:
            if not lane.heal:
                continue
            row = lane.rounds[-1].row_after
            if row is None or row.nudges >= POLICY.cap:
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
    ) -> list[tuple[tuple[Any, ...], datetime, datetime]]:
        """Run one trial's host operations, each bracketed by database clock reads."""
        await asyncio.sleep(delay)
        done: list[tuple[tuple[Any, ...], datetime, datetime]] = []
        lb: datetime = await pool.fetchval(CLOCK)
        claimed: str | None = None
        for op in ops:
            effect: tuple[Any, ...] | None = None
            if op[0] == "claim_held" or (op[0] == "claim_next" and self.claim_hold_s > 0):
                # The host's claim verb in a transaction held open around it: stamped at the
                # transaction's start, seen only at its commit.
                before, after = op[1:] if op[0] == "claim_held" else (0.0, self.claim_hold_s)
                at = lb + op[1] if op[0] == "claim_next" and len(op) > 1 else None
                async with pool.acquire() as conn, conn.transaction():
                    await asyncio.sleep(before)
                    claimed = await conn.fetchval(
                        HOST_SQL["claim_next"],
                        lane.endpoint,
                        QUEUE,
                        "consumer",
                        at,
                        timedelta(minutes=5),
                    )
                    stamp = await conn.fetchval(STAMP, claimed)
                    await asyncio.sleep(after)
                effect = None if claimed is None else ("claim", claimed, stamp)
            elif op[0] == "claim_next":
                at = lb + op[1] if len(op) > 1 else None
                claimed = await host.claim_next(lane.endpoint, QUEUE, owner="consumer", at=at)
                stamp = await pool.fetchval(STAMP, claimed)
                effect = None if claimed is None else ("claim", claimed, stamp)
            elif op[0] in ("complete", "requeue", "delete"):
                if claimed is not None:
                    if op[0] == "complete":
                        await host.complete(claimed)
                        effect = ("complete", claimed)
                    elif op[0] == "requeue":
                        await host.requeue(claimed)
                        effect = ("requeue", claimed)
                    else:
                        await host.delete_todo(claimed)
                        effect = ("delete", claimed)
            elif op[0] == "create":
                todo_id = lane.new_todo_id()
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
                done.append((effect, lb, ub))
            lb = ub
        return done

    async def _round(self, lanes: list[Lane], r: int) -> None:
        modes = {
            f"{lane.endpoint}/{QUEUE}": lane.modes[r] for lane in lanes if lane.modes[r] != "reach"
        }
        command = json.dumps({"cmd": "tick", "wake": modes}) + "\n"
        lead = max(0.0, -HOST_WINDOW_S[0])
        actions = [
            asyncio.create_task(
                self._act(
                    lane,
                    lane.scripts[r],
                    lead + self.rng.uniform(*HOST_WINDOW_S),
                    *self.hosts[j],
                )
            )
            for j, lane in enumerate(lanes)
            if lane.scripts.get(r)
        ]
        if actions and lead:
            await asyncio.sleep(lead)
        for w in self.workers:
            w.send(command)
        await asyncio.gather(*(w.flush() for w in self.workers))
        try:
            async with asyncio.timeout(ROUND_TIMEOUT_S):
                answers = await asyncio.gather(*(w.answer() for w in self.workers))
                acted = await asyncio.gather(*actions)
        except TimeoutError:
            raise RaceAbort(f"round {r + 1} took longer than {ROUND_TIMEOUT_S:g} s") from None
        finally:
            for task in actions:
                task.cancel()
        end: datetime = await self.admin.fetchval(CLOCK)
        endpoints = [lane.endpoint for lane in lanes]
        rows = {
            rec["endpoint_id"]: rec
            for rec in await self.admin.fetch(
                "SELECT endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at"
                " FROM stall_nudge.queue_stall_nudges WHERE endpoint_id = ANY($1::text[])",
                endpoints,
            )
        }
        todos = {
            rec["id"]: rec
            for rec in await self.admin.fetch(
                "SELECT id, endpoint_id, state, claimed_at, ring_attempts, last_ringed_at"
                " FROM todos WHERE endpoint_id = ANY($1::text[])",
                endpoints,
            )
        }
        self.result.rounds += 1
        ok = [a for a in answers if "error" not in a]
        instants = [datetime.fromisoformat(a["now"]) for a in ok]
        if instants:
            self.result.lock_spreads.append((max(instants) - min(instants)).total_seconds())
        swept = [a for a in ok if not a["skipped"]]
        self.result.sweeps_in_round[len(swept)] += 1
        self.result.sweep_durations.extend(a["duration_s"] for a in swept)
        ticks = {
            a["w"]: Tick(
                worker=a["w"],
                now=datetime.fromisoformat(a["now"]),
                done=datetime.fromisoformat(a["done"]),
                kind=a["kind"],
                outside=a["outside"],
            )
            for a in swept
        }
        self.ticks = [*self.ticks[-64:], *ticks.values()]
        marks = {
            w: record_marks(t, self.ticks, self.initial, self.initial_full)
            for w, t in ticks.items()
            if t.kind == "delta"
        }
        logs = {lane.endpoint: RoundLog(mode=lane.modes[r], shift=lane.shift) for lane in lanes}
        acted_by = dict(
            zip([lane.endpoint for lane in lanes if lane.scripts.get(r)], acted, strict=True)
        )
        for lane in lanes:
            log = logs[lane.endpoint]
            for effect, lb, ub in acted_by.get(lane.endpoint, []):
                if effect[0] == "claim":
                    effect = ("claim", effect[1], effect[2] + lane.shift)
                log.statements.append(Stmt(effect=effect, lb=lb + lane.shift, ub=ub + lane.shift))
            log.end = end + lane.shift
        for answer in answers:
            self._record(answer, logs, lanes, marks)
        for lane in lanes:
            log = logs[lane.endpoint]
            rec = rows.get(lane.endpoint)
            log.row_after = None if rec is None else _ledger_row(rec, lane.shift)
            if rec is not None and rec["queue"] != QUEUE:
                log.bad.append(f"a ledger row for queue {rec['queue']!r}")
            _check_todos(lane, log, todos)
            lane.rounds.append(log)

    def _record(
        self,
        answer: dict[str, Any],
        logs: dict[str, RoundLog],
        lanes: list[Lane],
        marks: Mapping[int, Marks],
    ) -> None:
        w = answer["w"]
        if "error" in answer:
            for log in logs.values():
                log.bad.append(f"worker {w} failed its tick: {answer['error']}")
            return
        if answer["skipped"]:
            if answer["charged"] or answer["drained"] or answer["refunds"]:
                for log in logs.values():
                    log.bad.append(f"worker {w} skipped yet reported {answer}")
            return
        self.result.sweeps += 1
        self.result.kinds[answer["kind"]] += 1
        now = datetime.fromisoformat(answer["now"])
        done = datetime.fromisoformat(answer["done"])
        outcomes: dict[str, list[Outcome]] = {lane.endpoint: [] for lane in lanes}
        shift = {lane.endpoint: lane.shift for lane in lanes}
        for endpoint, queue, number, todo_id, charged_at in answer["charged"]:
            if endpoint not in outcomes or queue != QUEUE:
                for log in logs.values():
                    log.bad.append(f"worker {w} charged a pair of no trial: {endpoint}/{queue}")
                continue
            stamp = datetime.fromisoformat(charged_at) + shift[endpoint]
            outcomes[endpoint].append(("charge", number, stamp, todo_id))
        for endpoint, queue in answer["drained"]:
            if endpoint not in outcomes or queue != QUEUE:
                for log in logs.values():
                    log.bad.append(f"worker {w} deleted a row of no trial: {endpoint}/{queue}")
                continue
            outcomes[endpoint].append(DRAIN)
        for endpoint, queue, number, todo, charged_at, result, lb, ub in answer["refunds"]:
            if endpoint in logs and queue == QUEUE:
                logs[endpoint].refunds.append(
                    Refund(
                        worker=w,
                        number=number,
                        charged_at=datetime.fromisoformat(charged_at) + shift[endpoint],
                        todo=todo,
                        result=result,
                        lb=datetime.fromisoformat(lb) + shift[endpoint],
                        ub=datetime.fromisoformat(ub) + shift[endpoint],
                    )
                )
        for endpoint, got in outcomes.items():
            log = logs[endpoint]
            if len(set(got)) > 1:
                log.bad.append(f"worker {w} did {got} to one pair in one sweep")
            mark = marks.get(w)
            log.sweeps.append(
                Sweep(
                    worker=w,
                    now=now + shift[endpoint],
                    done=done + shift[endpoint],
                    kind=answer["kind"],
                    outside=answer["outside"],
                    outcome=got[0] if got else NONE,
                    extra=max(0, len(got) - 1),
                    marks=None if mark is None else _shifted(mark, shift[endpoint]),
                )
            )


def _shifted(marks: Marks, shift: timedelta) -> Marks:
    """``marks`` in a pair's own time."""
    (w_least, f_least), (w_most, f_most) = marks
    return (w_least + shift, f_least + shift), (w_most + shift, f_most + shift)


def _check_todos(lane: Lane, log: RoundLog, todos: Mapping[str, Any]) -> None:
    """Every todo is as the host left it: a sweep never changes a todo."""
    expected = lane_facts_after(lane)
    for stmt in log.statements:
        expected = apply_effect(expected, stmt.effect)
    mine = {k: rec for k, rec in todos.items() if rec["endpoint_id"] == lane.endpoint}
    if set(mine) != set(expected.todos):
        log.bad.append(f"todos {sorted(mine)} in the database, {sorted(expected.todos)} expected")
        return
    for todo_id, rec in mine.items():
        want = expected.todos[todo_id]
        claimed = None if rec["claimed_at"] is None else rec["claimed_at"] + lane.shift
        rung = rec["ring_attempts"] != 0 or rec["last_ringed_at"] is not None
        if (rec["state"], claimed) != (want.state, want.claimed_at) or rung:
            log.bad.append(f"todo {todo_id} is {dict(rec)}, expected {want}")


def lane_facts_after(lane: Lane) -> Facts:
    """The pair's facts after every round recorded so far."""
    facts = lane.facts
    for rnd in lane.rounds:
        for stmt in rnd.statements:
            facts = apply_effect(facts, stmt.effect)
    return facts


async def _record_now(admin: asyncpg.Connection) -> tuple[Tick | None, Tick | None]:
    """The fleet's record as a configuration finds it: its last sweep and last full pass."""
    rec = await admin.fetchrow("SELECT judged_to, full_pass_at FROM stall_nudge.ticks")
    if rec is None:
        return None, None
    at = datetime.min.replace(tzinfo=UTC)

    def tick(now: datetime | None, kind: str) -> Tick | None:
        if now is None:
            return None
        return Tick(worker=-1, now=now, done=at, kind=kind, outside=False)

    return tick(rec["judged_to"], "any"), tick(rec["full_pass_at"], "full")


async def run_config(
    dsn: str, instances: int, trials: int, first_trial: int, rng: random.Random, opts: Options
) -> ConfigResult:
    result = ConfigResult(instances=instances)
    started = time.monotonic()
    admin = await asyncpg.connect(dsn, server_settings={"application_name": "stall-races"})
    pools: list[asyncpg.Pool] = []
    try:
        for _ in range(LANES):
            pools.append(
                await asyncpg.create_pool(
                    dsn,
                    min_size=1,
                    max_size=1,
                    server_settings={"application_name": "stall-races-consumer"},
                )
            )
        hosts = [(pool, PostgresHost(pool)) for pool in pools]
        async with _workers(instances, dsn, opts.workdir, opts.fault) as workers:
            coordinator = Coordinator(
                admin, hosts, workers, rng, result, opts.claim_hold_s, await _record_now(admin)
            )
            # Progress every tenth of a long run; a short one prints only its result.
            step = (trials // 10) // LANES * LANES if trials >= 1000 else 0
            for offset in range(0, trials, LANES):
                await coordinator.batch(first_trial + offset, min(LANES, trials - offset))
                done = offset + LANES
                if step and done % step == 0 and done < trials:
                    bad = sum(result.counts.values())
                    print(
                        f"races[{instances}]: {done}/{trials} trials,"
                        f" {bad} violations so far, {time.monotonic() - started:.0f} s",
                        flush=True,
                    )
    finally:
        for pool in pools:
            await pool.close()
        await admin.close()
    result.seconds = time.monotonic() - started
    return result


# -- the run ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    with embedded_postgres() as embedded:
        yield embedded


async def _races(server: str, opts: Options) -> list[ConfigResult]:
    name = f"stall_races_{uuid.uuid4().hex[:10]}"
    await create_database(server, name)
    try:
        conn = await asyncpg.connect(server)
        try:
            # Commits need not wait for the disk here: visibility and locking are unchanged.
            await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        finally:
            await conn.close()
        dsn = with_database(server, name)
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn, host_schema=True)
        finally:
            await conn.close()
        rng = random.Random(opts.seed)
        results = []
        share, extra = divmod(opts.trials, len(opts.instances))
        first = 0
        for i, count in enumerate(opts.instances):
            mine = share + (1 if i < extra else 0)
            results.append(await run_config(dsn, count, mine, first, rng, opts))
            first += mine
        return results
    finally:
        await drop_database(server, name)


def run_races(opts: Options) -> list[ConfigResult]:
    """Run the trials split over the instance counts; one result per count."""
    with _server(opts.dsn) as server:
        return asyncio.run(_races(server, opts))


def _line(r: ConfigResult) -> str:
    counts = " ".join(f"{k}={r.counts[k]}" for k in COUNTS)
    return (
        f"races[{r.instances} instances]: trials={r.trials} rounds={r.rounds} sweeps={r.sweeps}"
        f" (full={r.kinds['full']} delta={r.kinds['delta']})"
        f" db_sweeps_per_tick={r.sweeps_per_tick:.3f} {counts} seconds={r.seconds:.1f}"
    )


def _timing_line(r: ConfigResult) -> str:
    rounds = ", ".join(f"{n}: {c}" for n, c in sorted(r.sweeps_in_round.items()))
    return (
        f"  timing: rounds by sweeps in them {{{rounds}}};"
        f" try-lock spread p50={_ms_of(r.lock_spreads, 0.5)} p90={_ms_of(r.lock_spreads, 0.9)};"
        f" sweeping tick p50={_ms_of(r.sweep_durations, 0.5)}"
        f" p90={_ms_of(r.sweep_durations, 0.9)}"
    )


def _ms_of(values: Sequence[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}ms"


STATS = (
    "contested",
    "seen",
    "unseen",
    "turned_due",
    "charges",
    "resets",
    "by_claim",
    "by_departure",
    "by_kept",
    "unreported_resets",
    "refunds",
    "full",
    "delta",
    "deferred",
    "overlapped",
    "cas",
)


def _kind_line(kind: str, v: Verdict) -> str:
    stats = " ".join(f"{k}={v.stats[k]}" for k in STATS)
    counts = " ".join(f"{k}={v.counts[k]}" for k in COUNTS)
    return f"  {kind}: trials={v.stats['trials']} {stats} {counts}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Race real sweeper processes on skewed clocks; judge every wake exactly."
    )
    parser.add_argument("--trials", type=int, default=10_000, help="in all (default 10000)")
    parser.add_argument(
        "--instances", type=int, nargs="+", default=[4, 8], help="sweeper counts (default 4 8)"
    )
    parser.add_argument("--dsn", default=os.environ.get("STALL_TEST_DSN"), help="a server DSN")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, help="keep the workers' logs here")
    parser.add_argument(
        "--fault",
        choices=FAULTS,
        default="none",
        help="a control: every worker on a deliberately broken ledger, or one beside the lock",
    )
    parser.add_argument(
        "--claim-hold-ms",
        type=float,
        default=0.0,
        help="consumers hold the claiming transaction open this long (default 0)",
    )
    args = parser.parse_args(argv)
    if args.claim_hold_ms < 0:
        parser.error("--claim-hold-ms must not be negative")
    if args.trials < len(args.instances):
        parser.error("--trials must be at least one per instance count")
    if any(n < 1 for n in args.instances):
        parser.error("--instances must be positive")
    try:
        skewed_env("+0s")
    except SkewUnavailable as exc:
        print(f"races: cannot shift the sweepers' wall clocks: {exc}", file=sys.stderr)
        return 2
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="stall-races-"))
    workdir.mkdir(parents=True, exist_ok=True)
    opts = Options(
        dsn=args.dsn,
        trials=args.trials,
        instances=tuple(args.instances),
        seed=args.seed,
        workdir=workdir,
        fault=args.fault,
        claim_hold_s=args.claim_hold_ms / 1000,
    )
    print(
        f"races: worker logs in {workdir}; offsets {', '.join(OFFSETS)}; fault={opts.fault};"
        f" claim hold {args.claim_hold_ms:g} ms; seed {opts.seed}",
        flush=True,
    )
    try:
        results = run_races(opts)
    except RaceAbort as exc:
        print(f"races: aborted: {exc}", file=sys.stderr)
        return 2
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.counts)
        for note in r.notes:
            print(f"violation: {note}")
        for trace in r.traces:
            print(trace)
        print(_line(r), flush=True)
        print(_timing_line(r))
        for kind in KINDS:
            if kind in r.by_kind:
                print(_kind_line(kind, r.by_kind[kind]))
    largest = max(args.instances)
    figure = next((r for r in results if r.instances == 4), min(results, key=lambda r: r.instances))
    print(
        f"# summary: instances is the largest count run ({largest});"
        f" db_sweeps_per_tick is the {figure.instances}-instance figure;"
        f" other={total['other']}"
    )
    print(
        f"races: trials={sum(r.trials for r in results)} instances={largest}"
        f" duplicates={total['duplicates']} double_resets={total['double_resets']}"
        f" lost={total['lost']} stranded={total['stranded']}"
        f" db_sweeps_per_tick={figure.sweeps_per_tick:.3f}",
        flush=True,
    )
    return 0 if not any(total[k] for k in COUNTS) else 1


if __name__ == "__main__":
    sys.exit(main())
