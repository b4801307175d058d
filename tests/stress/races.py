"""Races: real sweeper processes on skewed wall clocks against one database, judged exactly.

    .venv/bin/python -m tests.stress.races                  # 10,000 trials: 4 and 8 instances
    .venv/bin/python -m tests.stress.races --trials 32      # a short run (the test suite's)
    .venv/bin/python -m tests.stress.races --footprint incremental

Real parts only: one PostgreSQL (``--dsn``, else ``STALL_TEST_DSN``, else an
embedded one) holding a throwaway database this script creates and drops,
migrated in ``--footprint`` (lean, the default, or incremental);
4 and then 8 sweeper processes (``tests.stress.race_worker``), each under
libfaketime (``stall_testing.skewed_env``) with its wall clock shifted by
0, +2 s, -2 s, +30 s or -30 s,
each with its own asyncpg pool and ``PostgresLedger(pool)`` deciding at the
database's clock; consumers claiming, completing and requeueing through
``PostgresHost`` on their own connections while the sweepers tick. The
policy is the spec's default ``PacingPolicy()``: nothing waits five minutes,
because every timestamp is planted relative to the database's ``now()``.

Theory of operation
-------------------
Trials run four at a time (``tick_limit`` of them, so the tick limit never
holds a due pair back), each on its own fresh pair ``(r<N>t<trial>, q)``,
in four rounds. A round writes one ``tick`` command to every worker at once
and runs each trial's host action (claim, complete, requeue, create a todo,
pause or resume the endpoint, disable, enable or re-scope the hook) on its
own connection, starting at a random instant within 3 ms either side of the
commands, so sweeps see it, miss it or race it; then it reads
every worker's answer: whether it skipped (missed the tick lock), the
instant it decided at, its charges, deletions and refunds. Each host
statement is bracketed by database clock reads (``lb`` before it, ``ub``
after its commit). After the round the coordinator reads the trial's ledger
row, todos and claim log (``stall_nudge.claims``, empty when lean). Round 1 is the race;
round 2 settles; round 3 is a second action (the consumer woken claims, the
change is reverted, the backlog returns, or the receiver heals); round 4
settles again.

Race classes (the races that broke): ``new-pair`` (first-nudge insert, some
at the exact threshold instant), ``due-row`` (the backoff expires during the
rounds), ``progress`` (a claim at tick, up to the cap), ``drain`` (the last
todo claimed at tick), ``endpoint-change`` and ``hook-change`` (at tick),
``receiver-heal`` (wakes reach nobody or are refused, are refunded, then the
pair is moved one backoff step on and the receiver answers). Some
``endpoint-change`` trials (``paused-claimed``, ``disabled-claimed``) claim
while no nudge may go out: the row is reset (deleted, unreported). In the
incremental footprint some ``progress`` trials (``late-claim``) start with a
claim in the log stamped before the row's last nudge: one whose transaction
committed after that charge looked, so no charge absorbed it and it is
progress still.

Planting writes todos that are already claimed, which fires the claim log's
trigger; those claims stand for work absorbed before the trial, so their log
rows are removed in the planting transaction and only the planted log is
inserted. The ``receiver-heal`` shift rewrites ``claimed_at`` (the trigger
fires again): in the same transaction the pair's log rows are kept, shifted
like everything else, and the rows the shift added are removed.

Judging, exactly (no slack window, no retries)
----------------------------------------------
The judge replays every trial with its own statement of the ledger rule
(``expect``, written from SPEC-0038 and the design notes, not from the
library), in database time. Sweeps of one round are ordered by their
decision instant ``now``: the tick lock serialises them, so that is commit
order, and each sees its predecessors' commits. A host statement is visible
to a sweep if ``ub < now`` (committed before the sweep read the clock, so
before its statement's snapshot); it may be visible if ``lb`` is before the
next sweep's ``now`` (or the round's end); statements of one action become
visible in order, and never become invisible again.

Progress follows the footprint (``progress_at``). Lean: a todo of the pair
claimed after the row's stamp, by ``claimed_at`` (the spec's timestamps).
Incremental: that, or a claim in the pair's claim log, modelled as a log: a
claim enters it when its statement becomes visible, and stays until a sweep
that sees it charges, drains or resets the pair, or finds no ledger row for
it (that sweep absorbs every claim it sees of the pair, and none it does
not); any other sweep keeps only the pair's latest. A pair with a row and
progress is due nudge 1 at once or, if it is no candidate now, has its row
deleted (a reset, which no sweeper reports); a charge's stamp is its
``now``, or the progress if later. So in the incremental footprint a claim
stamped before a charge read the time but committed after its snapshot is
progress at the next sweep, and never twice. The judge keeps every
hypothesis the observations leave open (how many statements each sweep saw,
so which claims it absorbed, and whether it reset the row); each sweep's
outcome for the pair (one charge with its number, stamp and named todo, a
deletion, or nothing) must be ``expect``'s under at least one, and those it
matches go on. After the round the row and the log in the database must be
ones a surviving hypothesis leaves, which fixes what the next round starts
from. Refunds (a worker's, after its own tick) wait for the tick lock, so no
sweep's snapshot and compare-and-set straddle one. Whether a sweep
saw a refund otherwise changes no outcome (the refunded charge is of the
same round: no backoff from it has run), so the judge applies refunds at the
round's end. A trial's ``receiver-heal`` move is a shift of all its timestamps
(todos, log and ledger row) by one backoff step; the judge adds it back, so
it judges in the pair's own time. The counts:

- ``duplicates``: charges the rule does not allow, i.e. a second charge for
  the same pair and due time with no claim, drain or refund between that
  would justify it (or a charge with no due time at all);
- ``double_resets``: a nudge-1 reset of an existing row not explained by a
  distinct claim, not yet used by an earlier reset, that the resetting sweep
  may have seen and the pair's previous charge cannot have seen for certain
  (newly visible since: that charge would have absorbed it). Its timestamp
  does not matter;
- ``lost``: a sweep that should have charged (the rule allows nothing else)
  and did not: a due pair no round charged, a healed receiver never woken;
- ``stranded``: progress or budget the ledger dropped while gated work is
  left, so the pair climbs to the cap (then silence) while its work is being
  claimed: a claim ignored (an increment, nudge n+1 over a row, while a
  claim that must have been visible to that sweep was still in the log, i.e.
  no earlier absorbing sweep may have seen it; ``ignored_drained`` counts,
  apart, those charged when the round ends with no gated work left, which
  the next sweep's deletion makes harmless), or a nudge that reached nobody
  whose refund failed though nothing else changed its row;
- ``other`` (per configuration; any makes the run fail): a charge with the
  wrong number, stamp or todo, a wrong or missed deletion, a ledger row or
  claim log that does not match the replay, a todo a sweep changed, a
  worker error.

``db_sweeps_per_tick`` is the non-skipped ``charge_due`` calls over rounds.
Per class it also prints how often the race was real: ``contested`` trials
had a sweep for which the rule allowed more than one outcome (a host
statement may or may not have been visible to it), ``seen`` / ``unseen``
how that fell, ``turned_due`` trials whose threshold or backoff ran out
between two sweeps, ``late`` resets owed to a claim of the trial stamped at
or before the previous nudge (in flight while it was charged: the race a
timestamp comparison gets wrong), ``unreported_resets`` sweeps that must
have deleted a row with progress they did not charge.

Positive controls: ``--fault`` runs every worker on a deliberately broken
ledger (``tests.stress.race_worker``), each of which must make its count
non-zero; ``--claim-hold-ms`` has consumers hold their claiming transaction
open (the host's claim statement, then other work), which widens the
progress-at-tick window.
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

from adapters.postgres import migrate
from stall_core import PacingPolicy
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

if __package__ in (None, ""):  # run as `python tests/stress/races.py`: the repository is the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Needs the path set above when run as a script.
from tests.stress.race_worker import FAULTS

__all__ = ["ConfigResult", "expect", "main", "run_races"]

ROOT = Path(__file__).resolve().parents[2]
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
    "hook-change",
    "receiver-heal",
)
#: A host action starts this long after the tick commands are written (uniformly; negative:
#: before them), so that sweeps see it, miss it, or race it.
HOST_WINDOW_S = (-0.003, 0.003)
#: Bounds only a hang reaches: one round's answers, and the workers' start-up.
ROUND_TIMEOUT_S = 600.0
START_TIMEOUT_S = 600.0
#: Where a boundary instant (threshold passed, backoff expired) is planted: this far after setup.
BOUNDARY_S = (0.0, 0.040)
CLOCK = "SELECT clock_timestamp()"
COUNTS = ("duplicates", "double_resets", "lost", "stranded", "other")


def _ms(value: float) -> timedelta:
    """``value`` milliseconds, to the microsecond (the database's resolution)."""
    return timedelta(microseconds=round(value * 1000))


# -- the rule, as the judge states it ----------------------------------------------------


@attrs.frozen
class Row:
    """A ledger row in the pair's own time."""

    nudges: int
    stamp: datetime


@attrs.frozen
class Todo:
    created_at: datetime
    gated: bool
    state: str = "pending"
    claimed_at: datetime | None = None


@attrs.frozen
class Facts:
    """What a sweep may see of one pair: its todos, its endpoint and its hook."""

    todos: Mapping[str, Todo]
    endpoint_state: str = "active"
    hook_enabled: bool = True
    hook_queues: tuple[str, ...] | None = None

    @property
    def receiver(self) -> bool:
        return self.hook_enabled and (self.hook_queues is None or QUEUE in self.hook_queues)


@attrs.frozen(order=True)
class Claim:
    """One claim of the pair: an entry of its claim log from the commit of its statement.

    ``at`` is its ``claimed_at`` (pair time). ``round`` is the round whose
    host statement made it, with that statement's clock bounds ``lb`` and
    ``ub``; -1 for a claim planted in the log before the trial (visible to
    every sweep of the trial).
    """

    round: int
    at: datetime
    todo: str
    lb: datetime | None = None
    ub: datetime | None = None


#: The pair's claim log as one sweep sees it: the visible claims no sweep has absorbed.
Log = frozenset[Claim]


@attrs.frozen
class SweepAt:
    """When a sweep ran: its round, its decision instant, and before when its snapshot was taken."""

    round: int
    now: datetime
    #: the next sweep's ``now`` (or the round's end): the snapshot is before it
    upper: datetime


def must_see(claim: Claim, sweep: SweepAt) -> bool:
    """The claim committed before the sweep read the clock, so before its snapshot."""
    if claim.round != sweep.round:
        return claim.round < sweep.round
    assert claim.ub is not None
    return claim.ub < sweep.now


def may_see(claim: Claim, sweep: SweepAt) -> bool:
    """The claim's statement began before the sweep's snapshot, so it may be in it."""
    if claim.round != sweep.round:
        return claim.round < sweep.round
    assert claim.lb is not None
    return claim.lb < sweep.upper


#: ("none",) | ("drain",) | ("reset",) | ("charge", number, stamp, todo_id)
Outcome = tuple[Any, ...]
NONE: Outcome = ("none",)
DRAIN: Outcome = ("drain",)
#: The row of a pair with progress the sweep does not charge is deleted (stall_core.Reset).
#: A sweep does not report it: its sweeper sees NONE.
RESET: Outcome = ("reset",)
FOOTPRINTS = ("lean", "incremental")


def delay_before(number: int, policy: PacingPolicy = POLICY) -> timedelta:
    """The wait after the last attempt before nudge ``number``: the core's rule."""
    return policy.delay_before(number)


def progress_at(row: Row | None, facts: Facts, log: Log, footprint: str) -> datetime | None:
    """The pair's progress as the sweep reads it, or None.

    Lean: the latest ``claimed_at`` of the pair's todos after the row's stamp
    (the spec's timestamps). Incremental: that, or the latest claim in the
    claim log (commit order), whichever is later. With no row only the log
    counts (the pair's next nudge is a first one anyway).
    """
    found: list[datetime] = []
    if row is not None:
        found += [
            t.claimed_at
            for t in facts.todos.values()
            if t.claimed_at is not None and t.claimed_at > row.stamp
        ]
    if footprint == "incremental":
        found += [c.at for c in log]
    return max(found, default=None)


def expect(
    row: Row | None,
    facts: Facts,
    log: Log,
    now: datetime,
    footprint: str = "lean",
    policy: PacingPolicy = POLICY,
) -> Outcome:
    """What one sweep at ``now`` must do to the pair, by SPEC-0038's ledger rule.

    ``log`` is the pair's claim log as the sweep sees it (incremental: the
    claims visible to it that no earlier sweep absorbed). No gated pending
    work: delete the row. A candidate with no row, or with a row and
    progress (``progress_at``), is charged nudge 1; otherwise nudge n+1 once
    its backoff has passed, up to the cap. A charge stamps ``now``, or the
    progress if later. A row with progress the sweep does not charge is
    deleted (a reset).
    """
    pending = sorted(
        (t.created_at, todo_id)
        for todo_id, t in facts.todos.items()
        if t.state == "pending" and t.gated
    )
    if not pending:
        return DRAIN if row is not None else NONE
    oldest_at, oldest_id = pending[0]
    progress = progress_at(row, facts, log, footprint)
    if not (
        facts.endpoint_state == "active" and facts.receiver and oldest_at < now - policy.threshold
    ):
        return RESET if row is not None and progress is not None else NONE
    stamp = now if progress is None or progress < now else progress
    if row is None or progress is not None:
        return ("charge", 1, stamp, oldest_id)
    if row.nudges < policy.cap and now >= row.stamp + delay_before(row.nudges + 1, policy):
        return ("charge", row.nudges + 1, stamp, oldest_id)
    return NONE


def observed_as(outcome: Outcome) -> Outcome:
    """What the sweeper reports of ``outcome``: a reset is not reported."""
    return NONE if outcome == RESET else outcome


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
    elif kind == "create":
        todos[effect[1]] = Todo(created_at=effect[2], gated=effect[3])
    elif kind == "endpoint":
        return attrs.evolve(facts, endpoint_state=effect[1])
    elif kind == "hook":
        return attrs.evolve(facts, hook_enabled=effect[1])
    elif kind == "hook_queues":
        return attrs.evolve(facts, hook_queues=effect[1])
    else:
        raise ValueError(f"unknown effect {effect!r}")
    return attrs.evolve(facts, todos=todos)


def after_outcome(row: Row | None, outcome: Outcome) -> Row | None:
    if outcome[0] == "charge":
        return Row(outcome[1], outcome[2])
    if outcome[0] in ("drain", "reset"):
        return None
    return row


def log_after(row: Row | None, log: Log, outcome: Outcome) -> Log:
    """What stays in the claim log after a sweep that saw ``row`` and ``log`` and did ``outcome``.

    A sweep absorbs every claim it sees of a pair it charged, drained or
    reset, or of a pair with no ledger row; of the others' it keeps only the
    latest (``claim_superseded``). Claims it did not see are not in ``log``.
    """
    if row is None or outcome[0] in ("charge", "drain", "reset") or not log:
        return frozenset()
    latest = max(c.at for c in log)
    return frozenset(c for c in log if c.at == latest)


# -- one trial: its plan, and what happened ------------------------------------------------


@attrs.frozen
class Stmt:
    """One committed host statement: its effect, and database-clock bounds (pair time)."""

    effect: tuple[Any, ...]
    lb: datetime
    ub: datetime


@attrs.frozen
class Sweep:
    worker: int
    now: datetime
    outcome: Outcome


@attrs.frozen
class Refund:
    """One refund a worker's settle made: its result, and database-clock bounds (pair time)."""

    worker: int
    number: int
    charged_at: datetime
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
    row_after: Row | None = None
    #: the pair's claim log after the round: its claimed_at instants, sorted (pair time)
    log_after: tuple[datetime, ...] = ()
    bad: list[str] = attrs.Factory(list)


@attrs.define
class Lane:
    """One trial: a fresh pair, its planted state, its scripts, and its record."""

    trial: int
    kind: str
    variant: str
    endpoint: str
    facts: Facts
    row: Row | None
    #: round -> host operations, run in order on the trial's own connection
    scripts: dict[int, list[tuple[Any, ...]]]
    #: round -> how the wake treats this pair ("reach", "lost", "refuse")
    modes: dict[int, str]
    #: the planted claim log: claims no charge absorbed before the trial
    log: Log = frozenset()
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


def _plant(
    lane_id: str, d: datetime, rng: random.Random, kind: str, trial: int, footprint: str = "lean"
) -> Lane:
    """Plan one trial of ``kind`` with every timestamp relative to the database's ``d``.

    The claim log is planted only where it is kept (the incremental footprint).
    """
    todos: dict[str, Todo] = {}

    def add(n: int, *, gated: bool = True, created_at: datetime | None = None) -> None:
        for _ in range(n):
            i = len(todos)
            at = d - timedelta(minutes=10, seconds=i) - _ms(i) if created_at is None else created_at
            todos[f"{lane_id}-{i:02d}"] = Todo(created_at=at, gated=gated)

    def absorbed(before: datetime) -> None:
        # A claim from earlier work, already absorbed by the charge that wrote the row (or by
        # a drain): its todo is planted, its log entry is not.
        i = len(todos)
        todos[f"{lane_id}-{i:02d}"] = Todo(
            created_at=before - timedelta(minutes=30),
            gated=True,
            state="done",
            claimed_at=before - timedelta(seconds=1),
        )

    def late(stamp: datetime) -> Claim:
        # A claim stamped before the row's charge read the time, whose transaction committed
        # after that charge's snapshot: no charge has absorbed it, so it is progress still.
        i = len(todos)
        todo_id = f"{lane_id}-{i:02d}"
        at = stamp - _ms(rng.uniform(0.001, 500))
        todos[todo_id] = Todo(
            created_at=stamp - timedelta(minutes=20), gated=True, state="done", claimed_at=at
        )
        return Claim(round=-1, at=at, todo=todo_id)

    def due_row(n: int) -> Row:
        return Row(n, d - delay_before(n + 1) - _ms(rng.uniform(1, 1000)))

    def not_due_row(n: int) -> Row:
        return Row(n, d - _ms(rng.uniform(1000, 240_000)))

    row: Row | None = None
    log: set[Claim] = set()
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
            absorbed(d - timedelta(minutes=40))
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
        row = Row(n, boundary - delay_before(n + 1))
        add(rng.randint(1, 3))
        if rng.random() < 0.5:
            absorbed(row.stamp)
        variant = f"n={n}"
        scripts[0] = rng.choice([[], [("create", True)]])
        scripts[2] = [("claim_next",)]
    elif kind == "progress":
        n = rng.randint(1, 5)
        due = n < POLICY.cap and rng.random() < 0.6
        row = due_row(n) if due else not_due_row(n)
        add(rng.randint(2, 3))
        if rng.random() < 0.5:
            absorbed(row.stamp)
        if rng.random() < 0.25:
            claim = late(row.stamp)
            if footprint == "incremental":
                log.add(claim)
                variant = "late-claim "
        then, scripts[0] = rng.choice(
            [
                ("complete", consume),
                ("requeue", [("claim_next",), ("requeue",)]),
                ("held", [("claim_next",)]),
            ]
        )
        variant += f"n={n} {'due' if due else 'waiting'} {then}"
        scripts[2] = consume
    elif kind == "drain":
        if rng.random() < 0.2:
            variant = "no-row"
        else:
            n = rng.randint(1, 5)
            due = n < POLICY.cap and rng.random() < 0.5
            row = due_row(n) if due else not_due_row(n)
            variant = f"n={n} {'due' if due else 'waiting'}"
        add(1)
        if rng.random() < 0.4:
            add(1, gated=False, created_at=d - timedelta(minutes=9))  # ungated work stays
        scripts[0] = rng.choice([consume, [("claim_next",)]])
        scripts[2] = [("create", True)]  # the backlog returns: the first backoff again
    elif kind in ("endpoint-change", "hook-change", "receiver-heal"):
        if rng.random() < 0.4:
            variant = "no-row"
        else:
            n = rng.randint(1, 4)
            row = due_row(n)
            variant = f"n={n}"
        add(rng.randint(2, 3))
        if kind == "endpoint-change":
            roll = rng.random()
            if roll < 0.4:
                state = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", state)]
                scripts[2] = [("endpoint", "active")]
                variant += f" {state}"
            elif roll < 0.6:
                # Progress while no nudge may go out: the row is reset, not charged.
                state = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", state), ("claim_next",)]
                scripts[2] = [("endpoint", "active")]
                variant += f" {state}-claimed"
            else:
                facts_kw["endpoint_state"] = rng.choice(["paused", "disabled"])
                scripts[0] = [("endpoint", "active")]
                scripts[2] = [("claim_next",)]
                variant += " resumed"
        elif kind == "hook-change":
            roll = rng.random()
            if roll < 0.4:
                scripts[0] = [("hook", False)]
                scripts[2] = [("hook", True)]
                variant += " disabled"
            elif roll < 0.7:
                facts_kw["hook_enabled"] = False
                scripts[0] = [("hook", True)]
                scripts[2] = [("claim_next",)]
                variant += " enabled"
            else:
                facts_kw["hook_queues"] = (QUEUE,)
                scripts[0] = [("hook_queues", ("other",))]
                scripts[2] = [("hook_queues", rng.choice([(QUEUE,), None]))]
                variant += " rescoped"
        else:
            failing = rng.choice(["lost", "refuse"])
            modes[0] = modes[1] = failing
            heal = True
            scripts[0] = rng.choice([[], consume])
            variant += f" {failing}"
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
        log=frozenset(log),
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


def _claims_of(r: int, statements: Sequence[Stmt]) -> list[Claim | None]:
    """Per host statement of round ``r``: the claim it logs, or None."""
    return [
        Claim(round=r, at=s.effect[2], todo=s.effect[1], lb=s.lb, ub=s.ub)
        if s.effect[0] == "claim"
        else None
        for s in statements
    ]


def _newly(made: Sequence[Claim | None], start: int, stop: int) -> Log:
    """The claims of statements ``start`` to ``stop`` (exclusive)."""
    return frozenset(c for c in made[start:stop] if c is not None)


def _show(instants: Iterable[datetime]) -> str:
    return "[" + ", ".join(at.isoformat() for at in sorted(instants)) + "]"


def _trace(lane: Lane) -> str:
    """A failing trial, round by round, in pair time: what to read first when a count is not 0."""
    out = [f"  trace of trial {lane.trial} ({lane.kind} {lane.variant}): row {lane.row}"]
    out.append(f"    planted log {_show(c.at for c in lane.log)}")
    for r, rnd in enumerate(lane.rounds):
        out.append(f"    round {r + 1} ({rnd.mode}, shift {rnd.shift}), ends {rnd.end}:")
        out.extend(f"      host {s.effect} lb={s.lb} ub={s.ub}" for s in rnd.statements)
        out.extend(
            f"      sweep w{s.worker} now={s.now} {s.outcome}"
            for s in sorted(rnd.sweeps, key=lambda s: s.now)
        )
        out.extend(
            f"      refund w{f.worker} nudge {f.number} ({f.charged_at}) -> {f.result}"
            f" lb={f.lb} ub={f.ub}"
            for f in rnd.refunds
        )
        out.append(f"      after: row {rnd.row_after}, log {_show(rnd.log_after)}")
    return "\n".join(out)


#: One open hypothesis: host statements seen so far, the claim log left, the ledger row.
Hyp = tuple[int, Log, Row | None]


def judge(lane: Lane, footprint: str = "lean") -> Verdict:
    """Replay one trial under ``expect`` and count every departure from the rule.

    The judge follows every hypothesis the observations leave open: how many
    of the round's host statements each sweep saw (a prefix, growing from
    sweep to sweep), and so which claims it could read and absorb, and
    whether it reset the row (a reset is not reported). A sweep's outcome
    must be what ``expect`` says under at least one hypothesis; those it
    matches go on. After the round, the ledger row and the claim log the
    database holds must be ones a surviving hypothesis leaves (every claim of
    the round is visible by then), which pins the state the next round
    starts from.
    """
    v = Verdict()
    logged = footprint == "incremental"
    facts = lane.facts
    #: the (log, row) the round may start from (more than one log only if they hold the
    #: same instants; one row, the one the database held)
    starts: set[tuple[Log, Row | None]] = {(lane.log if logged else frozenset(), lane.row)}
    #: every claim of the trial so far, in the order they were made
    claims: list[Claim] = sorted(lane.log)
    #: claims that explained a reset: each explains one
    used: set[Claim] = set()
    #: sweeps that may have absorbed the claims they saw (charged, drained, reset, or saw
    #: no row)
    absorbers: list[SweepAt] = []
    last_charge: SweepAt | None = None
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
        made = _claims_of(r, rnd.statements)
        claims.extend(c for c in made if c is not None)
        sweeps = sorted(rnd.sweeps, key=lambda s: s.now)
        hyps: set[Hyp] = {(0, log, row) for log, row in starts}
        ignored: list[str] = []
        assert rnd.end is not None
        changed_after: list[bool] = []
        for i, sweep in enumerate(sweeps):
            at = SweepAt(
                round=r,
                now=sweep.now,
                upper=sweeps[i + 1].now if i + 1 < len(sweeps) else rnd.end,
            )
            k_min = sum(1 for s in rnd.statements if s.ub < at.now)
            k_max = sum(1 for s in rnd.statements if s.lb < at.upper)
            options: dict[Hyp, Outcome] = {}
            for k0, log0, row0 in hyps:
                low = max(k0, k_min)
                for k in range(low, max(k_max, low) + 1):
                    log = log0 | _newly(made, k0, k) if logged else frozenset()
                    options[(k, log, row0)] = expect(row0, stages[k], log, at.now, footprint)
            distinct = {observed_as(o) for o in options.values()}
            contested |= len(distinct) > 1
            fewest = min(k for k, _, _ in options)
            most = max(k for k, _, _ in options)
            first = {observed_as(o) for (k, _, _), o in options.items() if k == fewest}
            last = {observed_as(o) for (k, _, _), o in options.items() if k == most}
            observed = sweep.outcome
            if first != last:
                # Which interleaving happened: the sweep saw the host action, or not yet.
                seen |= observed in last
                unseen |= observed in first
            matched = {key: o for key, o in options.items() if observed_as(o) == observed}
            #: the rows this sweep may have found (several only after an unreported reset)
            rows = {h[2] for h in matched or options}
            flagged = False
            # A reset is nudge 1 where the row's count would have gone on (a refunded
            # nudge 1, count 0, is tried again as nudge 1: that is no reset).
            if (
                observed[0] == "charge"
                and observed[1] == 1
                and all(row is not None and row.nudges for row in rows)
            ):
                # It needs a claim that no earlier reset used, that this sweep may have seen,
                # and that the previous charge cannot have seen (it would have absorbed it).
                fresh = [
                    c
                    for c in claims
                    if c not in used
                    and may_see(c, at)
                    and (last_charge is None or not must_see(c, last_charge))
                ]
                if fresh:
                    used.add(fresh[0])
                    # A claim of the trial stamped at or before the last nudge, yet progress
                    # (it was in flight then): the race timestamps got wrong.
                    v.stats["late"] += fresh[0].round >= 0 and any(
                        row is not None and fresh[0].at <= row.stamp for row in rows
                    )
                else:
                    flagged = True
                    note(
                        "double_resets",
                        r,
                        f"w{sweep.worker} reset {sorted(rows, key=str)} to 1 at {at.now}"
                        f" (stamp {observed[2]}) with no claim newly visible since the previous"
                        " charge",
                    )
            elif observed[0] == "charge" and observed[1] >= 2 and None not in rows:
                # An increment while the pair must have had progress: a claim committed before
                # this sweep read the clock that no absorbing sweep can have seen.
                missed = [
                    c
                    for c in claims
                    if must_see(c, at) and not any(may_see(c, a) for a in absorbers)
                ]
                if missed:
                    flagged = True
                    ignored.append(
                        f"w{sweep.worker} charged nudge {observed[1]} at {at.now} over"
                        f" {sorted(rows, key=str)}, ignoring the claim of {missed[0].todo}"
                        f" at {missed[0].at}"
                    )
            if not matched and not flagged:
                allowed = sorted(distinct, key=str)
                said = f"w{sweep.worker} at {at.now} did {observed}, the rule allows {allowed}"
                if observed[0] == "charge":
                    kinds = {o[0] for o in distinct}
                    note("duplicates" if "charge" not in kinds else "other", r, said)
                elif observed == NONE and all(o[0] == "charge" for o in distinct):
                    note("lost", r, said)
                else:
                    note("other", r, said)
            if observed[0] == "charge":
                v.stats["charges"] += 1
                if observed[1] == 1 and all(row is not None and row.nudges for row in rows):
                    v.stats["resets"] += 1
                last_charge = at
            if matched and all(o == RESET for o in matched.values()):
                v.stats["unreported_resets"] += 1
            if (
                any(row is None for row in rows)
                or observed[0] != "none"
                or (any(o == RESET for o in matched.values()))
            ):
                absorbers.append(at)
            if matched:
                hyps = {
                    (k, log_after(row, log, o) if logged else log, after_outcome(row, o))
                    for (k, log, row), o in matched.items()
                }
            else:
                hyps = {
                    (
                        k,
                        log_after(row, log, observed) if logged else log,
                        after_outcome(row, observed),
                    )
                    for k, log, row in options
                }
            changed_after.append(observed != NONE)
        # An ignored claim strands the pair when work is left: the count it carries is too
        # high, so the pair reaches the cap (silence) early. When the claim took the last
        # work, the next sweep deletes the row and nothing carries on.
        work_left = any(t.state == "pending" and t.gated for t in stages[-1].todos.values())
        for text in ignored:
            if work_left:
                note("stranded", r, text)
            else:
                v.stats["ignored_drained"] += 1
        # Each charge that reached nobody is refunded, unless a later sweep changed its row.
        charges = [(i, s) for i, s in enumerate(sweeps) if s.outcome[0] == "charge"]
        for i, sweep in charges:
            number, stamp = sweep.outcome[1], sweep.outcome[2]
            mine = [
                f
                for f in rnd.refunds
                if f.worker == sweep.worker and (f.number, f.charged_at) == (number, stamp)
            ]
            later_change = any(changed_after[i + 1 :])
            if rnd.mode == "reach":
                if mine:
                    note("other", r, f"a nudge that reached its receiver was refunded: {mine}")
                continue
            v.stats["refunds"] += 1
            if len(mine) != 1:
                note("stranded", r, f"nudge {number} ({stamp}) reached nobody; refunds: {mine}")
            elif isinstance(mine[0].result, str):
                note("other", r, f"refund of nudge {number} failed: {mine[0].result}")
            elif mine[0].result is False and not later_change:
                note("stranded", r, f"refund of nudge {number} ({stamp}) missed its unchanged row")
            elif mine[0].result is True:
                hyps = {
                    (k, log, Row(number - 1, stamp) if row == Row(number, stamp) else row)
                    for k, log, row in hyps
                }
        charged = {(s.worker, s.outcome[1], s.outcome[2]) for _, s in charges}
        for f in rnd.refunds:
            if (f.worker, f.number, f.charged_at) not in charged:
                note("other", r, f"w{f.worker} refunded a nudge it did not charge: {f}")
        facts = stages[-1]
        kept = {h for h in hyps if h[2] == rnd.row_after}
        if not kept:
            said = " or ".join(sorted({str(h[2]) for h in hyps}))
            note("other", r, f"ledger row {rnd.row_after} after the round, the replay says {said}")
            kept = {(k, log, rnd.row_after) for k, log, _ in hyps}
        # Every claim of the round is visible now: the log holds what no sweep absorbed.
        finals = {
            (log | _newly(made, k, len(made)) if logged else log, row) for k, log, row in kept
        }
        starts = {f for f in finals if sorted(c.at for c in f[0]) == list(rnd.log_after)}
        if not starts:
            said = " or ".join(sorted(_show(c.at for c in f) for f, _ in finals))
            note("other", r, f"claim log {_show(rnd.log_after)} after the round, replay: {said}")
            known = {c.at: c for c in claims}
            starts = {
                (
                    frozenset(
                        known.get(at, Claim(round=r, at=at, todo="?")) for at in rnd.log_after
                    ),
                    rnd.row_after,
                )
            }
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


# -- one configuration ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Options:
    """How to run: the server, the trials, the fleets, and the knobs for controls."""

    dsn: str | None
    trials: int
    instances: tuple[int, ...]
    seed: int
    workdir: Path
    #: a deliberately broken ledger in every worker (race_worker.FAULTS), for positive controls
    fault: str = "none"
    #: consumers hold their claiming transaction open this long (widens progress at tick)
    claim_hold_s: float = 0.0
    #: the footprint the database is migrated in (FOOTPRINTS)
    footprint: str = "lean"


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
CLEANUP = (
    "DELETE FROM queue_stall_nudges WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM stall_nudge.claims WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM todos WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM notify_hooks WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM deliveries WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM endpoints WHERE id = ANY($1::text[])",
    "DELETE FROM stall_nudge.changes WHERE endpoint_id = ANY($1::text[])",
    "DELETE FROM stall_nudge.held WHERE endpoint_id = ANY($1::text[])",
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
        footprint: str,
    ) -> None:
        self.footprint = footprint
        self.admin = admin
        self.hosts = hosts
        self.workers = workers
        self.rng = rng
        self.result = result
        self.claim_hold_s = claim_hold_s

    async def batch(self, first_trial: int, size: int) -> None:
        lanes = await self._setup(first_trial, size)
        for r in range(ROUNDS):
            if r == 2:
                await self._heal(lanes)
            await self._round(lanes, r)
        for lane in lanes:
            self.result.add(lane, judge(lane, self.footprint))
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
                lanes.append(_plant(endpoint, d, self.rng, kind, trial, self.footprint))
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
                "INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)"
                " VALUES ($1, $2, 'http://127.0.0.1:9/hook', 'whsec_races', $3, $4)",
                [
                    (
                        lane.hook,
                        lane.endpoint,
                        None if lane.facts.hook_queues is None else list(lane.facts.hook_queues),
                        lane.facts.hook_enabled,
                    )
                    for lane in lanes
                ],
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
            # Planting claimed todos fired the claim log's trigger: those claims were absorbed
            # before the trial; only the planted log (claims not yet absorbed) stays.
            await self.admin.execute(
                "DELETE FROM stall_nudge.claims WHERE endpoint_id = ANY($1::text[])",
                [lane.endpoint for lane in lanes],
            )
            await self.admin.executemany(
                "INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)"
                " VALUES ($1, $2, $3)",
                [(lane.endpoint, QUEUE, claim.at) for lane in lanes for claim in lane.log],
            )
            await self.admin.executemany(
                "INSERT INTO queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at)"
                " VALUES ($1, $2, $3, $4)",
                [
                    (lane.endpoint, QUEUE, lane.row.nudges, lane.row.stamp)
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
            step = delay_before(row.nudges + 1)
            async with self.admin.transaction():
                # Shifting claimed_at fires the claim log's trigger: keep the pair's log as it
                # was (shifted like everything else), not the rows the shift itself adds.
                kept = await self.admin.fetch(
                    "DELETE FROM stall_nudge.claims WHERE endpoint_id = $1"
                    " RETURNING queue, claimed_at",
                    lane.endpoint,
                )
                await self.admin.execute(
                    "UPDATE todos SET created_at = created_at - $2::interval,"
                    " claimed_at = claimed_at - $2::interval WHERE endpoint_id = $1",
                    lane.endpoint,
                    step,
                )
                await self.admin.execute(
                    "DELETE FROM stall_nudge.claims WHERE endpoint_id = $1", lane.endpoint
                )
                await self.admin.executemany(
                    "INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)"
                    " VALUES ($1, $2, $3)",
                    [(lane.endpoint, k["queue"], k["claimed_at"] - step) for k in kept],
                )
                await self.admin.execute(
                    "UPDATE queue_stall_nudges SET last_nudged_at = last_nudged_at - $2::interval"
                    " WHERE endpoint_id = $1",
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
            if op[0] == "claim_next" and self.claim_hold_s > 0:
                # The host's claim verb inside a transaction that does other work first.
                async with pool.acquire() as conn, conn.transaction():
                    claimed = await conn.fetchval(
                        HOST_SQL["claim_next"],
                        lane.endpoint,
                        QUEUE,
                        "consumer",
                        None,
                        timedelta(minutes=5),
                    )
                    await asyncio.sleep(self.claim_hold_s)
                effect = None if claimed is None else ("claim", claimed)
            elif op[0] == "claim_next":
                claimed = await host.claim_next(lane.endpoint, QUEUE, owner="consumer")
                effect = None if claimed is None else ("claim", claimed)
            elif op[0] in ("complete", "requeue"):
                if claimed is not None:
                    await (host.complete if op[0] == "complete" else host.requeue)(claimed)
                    effect = (op[0], claimed)
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
            elif op[0] == "hook":
                await host.set_hook_enabled(lane.hook, op[1], reason="operator")
                effect = op
            elif op[0] == "hook_queues":
                await host.set_hook_queues(lane.hook, op[1])
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
                "SELECT endpoint_id, queue, nudges, last_nudged_at FROM queue_stall_nudges"
                " WHERE endpoint_id = ANY($1::text[])",
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
        logged = await self.admin.fetch(
            "SELECT endpoint_id, queue, claimed_at FROM stall_nudge.claims"
            " WHERE endpoint_id = ANY($1::text[])",
            endpoints,
        )
        self.result.rounds += 1
        ok = [a for a in answers if "error" not in a]
        instants = [datetime.fromisoformat(a["now"]) for a in ok]
        if instants:
            self.result.lock_spreads.append((max(instants) - min(instants)).total_seconds())
        self.result.sweeps_in_round[sum(1 for a in ok if not a["skipped"])] += 1
        self.result.sweep_durations.extend(a["duration_s"] for a in ok if not a["skipped"])
        logs = {lane.endpoint: RoundLog(mode=lane.modes[r], shift=lane.shift) for lane in lanes}
        acted_by = dict(
            zip([lane.endpoint for lane in lanes if lane.scripts.get(r)], acted, strict=True)
        )
        for lane in lanes:
            log = logs[lane.endpoint]
            for effect, lb, ub in acted_by.get(lane.endpoint, []):
                if effect[0] == "claim":
                    effect = ("claim", effect[1], todos[effect[1]]["claimed_at"] + lane.shift)
                log.statements.append(Stmt(effect=effect, lb=lb + lane.shift, ub=ub + lane.shift))
            log.end = end + lane.shift
        for answer in answers:
            self._record(answer, logs, lanes)
        for lane in lanes:
            log = logs[lane.endpoint]
            rec = rows.get(lane.endpoint)
            log.row_after = (
                None if rec is None else Row(rec["nudges"], rec["last_nudged_at"] + lane.shift)
            )
            if rec is not None and rec["queue"] != QUEUE:
                log.bad.append(f"a ledger row for queue {rec['queue']!r}")
            mine = [c for c in logged if c["endpoint_id"] == lane.endpoint]
            log.log_after = tuple(sorted(c["claimed_at"] + lane.shift for c in mine))
            if any(c["queue"] != QUEUE for c in mine):
                log.bad.append(f"claims logged for another queue: {[dict(c) for c in mine]}")
            _check_todos(lane, log, todos)
            lane.rounds.append(log)

    def _record(self, answer: dict[str, Any], logs: dict[str, RoundLog], lanes: list[Lane]) -> None:
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
        now = datetime.fromisoformat(answer["now"])
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
        for endpoint, queue, number, _todo, charged_at, result, lb, ub in answer["refunds"]:
            if endpoint in logs and queue == QUEUE:
                logs[endpoint].refunds.append(
                    Refund(
                        worker=w,
                        number=number,
                        charged_at=datetime.fromisoformat(charged_at) + shift[endpoint],
                        result=result,
                        lb=datetime.fromisoformat(lb) + shift[endpoint],
                        ub=datetime.fromisoformat(ub) + shift[endpoint],
                    )
                )
        for endpoint, got in outcomes.items():
            log = logs[endpoint]
            if len(got) > 1:
                log.bad.append(f"worker {w} did {got} to one pair in one sweep")
            log.sweeps.append(
                Sweep(worker=w, now=now + shift[endpoint], outcome=got[0] if got else NONE)
            )


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
                admin, hosts, workers, rng, result, opts.claim_hold_s, opts.footprint
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
            await migrate(conn, host_schema=True, footprint=opts.footprint)
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


def _kind_line(kind: str, v: Verdict) -> str:
    s = v.stats
    counts = " ".join(f"{k}={v.counts[k]}" for k in COUNTS)
    return (
        f"  {kind}: trials={s['trials']} contested={s['contested']}"
        f" (seen={s['seen']} unseen={s['unseen']}) turned_due={s['turned_due']}"
        f" charges={s['charges']} resets={s['resets']} refunds={s['refunds']}"
        f" late={s['late']} unreported_resets={s['unreported_resets']}"
        f" ignored_drained={s['ignored_drained']}"
        f" {counts}"
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
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, help="keep the workers' logs here")
    parser.add_argument(
        "--fault",
        choices=FAULTS,
        default="none",
        help="positive control: run every worker on a deliberately broken ledger",
    )
    parser.add_argument(
        "--footprint",
        choices=FOOTPRINTS,
        default="lean",
        help="the footprint to migrate the database in (default lean)",
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
        footprint=args.footprint,
    )
    print(
        f"races: worker logs in {workdir}; footprint {opts.footprint};"
        f" offsets {', '.join(OFFSETS)}; fault={opts.fault};"
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
        f"# summary ({opts.footprint} footprint): instances is the largest count run"
        f" ({largest});"
        f" db_sweeps_per_tick is the {figure.instances}-instance figure"
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
