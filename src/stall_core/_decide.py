"""The sweep's rules: pure functions of (pair, ledger row, now, policy), each SPEC-0038 rule once.

Theory of operation
-------------------
Every rule that decides whether a pair is nudged is one function here; the
Postgres judge (adapters/postgres/tick.sql) restates those the spec puts in
the query and names the function it mirrors, and the differential tests
hold the two together by those names. The rules, in the order a tick
applies them:

=============  ===============================================================
rule           statement
=============  ===============================================================
readable       an instant every reader judges alike: strictly inside a Python
               datetime's range; a host value outside it (an infinity, a year
               BC or past 9999, NULL) is never work nor progress
work_of        the pair's oldest pending todo that passes the sender gate and
               was created at a readable instant (ties broken by id); the
               ledger reads it (``PairState.oldest``); the quarantine queue
               has none (``is_candidate``)
is_candidate   work older than the threshold (strictly), an active endpoint,
               an enabled hook covering the queue
made_progress  a ledger row, and: progress a reset kept, or the todo the row
               names has departed (``has_departed``), or a claim stamped
               after the row's last nudge (``latest_claim``, readable claims
               only)
is_due         a candidate with no row or progress (nudge 1, at once), or
               below the cap with its backoff step over (``next_due_at``)
charge_order   least nudged (``effective_nudges``), oldest work, then
               endpoint_id and queue by code point
tick limit     the first ``tick_limit`` due pairs in that order are charged
               (``plan_tick``)
charge_row     nudge ``effective + 1`` names the work; its stamp is now, or
               the latest claim if later (``charge_stamp``), so a claim
               counts once whatever its stamp
reset_row      progress no charge answered: the row keeps it (count 0)
drain          a row whose pair has no work is deleted
=============  ===============================================================

``decide`` classifies one pair; ``plan_tick`` turns a whole board into the
charges, drains and resets of one tick. Nothing here reads a clock or
touches IO: the sweeper and the ledger adapters gather the inputs and
apply the outputs.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime, timedelta

import attrs

from ._policy import PacingPolicy
from ._values import QUARANTINE_QUEUE, LedgerRow, Nudge, PairKey, PairState, TodoRef, aware

__all__ = [
    "FIRST_INSTANT",
    "FULL_PASS_INTERVAL",
    "HELD_RETRY_FRACTION",
    "LAST_INSTANT",
    "Capped",
    "Charge",
    "Decision",
    "Drain",
    "Idle",
    "IdleReason",
    "Reset",
    "TickPlan",
    "Wait",
    "charge_order",
    "charge_row",
    "charge_stamp",
    "decide",
    "effective_nudges",
    "full_pass_due",
    "has_departed",
    "is_candidate",
    "is_due",
    "later",
    "latest_claim",
    "made_progress",
    "next_due_at",
    "next_sweep_in",
    "plan_tick",
    "readable",
    "refunded_row",
    "reset_row",
    "starts_over",
    "swept_recently",
    "work_of",
]


class IdleReason(enum.Enum):
    """Why a pair with no ledger business this tick is left alone."""

    NO_WORK = "no-work"  # no gate-passing, non-quarantine pending todo
    ENDPOINT_INACTIVE = "endpoint-inactive"
    NO_RECEIVER = "no-receiver"
    FRESH = "fresh"  # its oldest gate-passing todo is within the threshold


@attrs.frozen(kw_only=True)
class Charge:
    """Charge the pair now: this will be nudge ``number`` since progress."""

    number: int
    todo: TodoRef


@attrs.frozen(kw_only=True)
class Wait:
    """A candidate backing off: the next nudge is due at ``due_at``."""

    due_at: datetime


@attrs.frozen(kw_only=True)
class Capped:
    """A candidate that spent ``cap`` nudges without progress: silence."""

    nudges: int


@attrs.frozen(kw_only=True)
class Drain:
    """A ledger row whose pair has no pending work left: delete it."""


@attrs.frozen(kw_only=True)
class Idle:
    """Not a candidate; its ledger row (if any) stays as it is."""

    reason: IdleReason


@attrs.frozen(kw_only=True)
class Reset:
    """Progress, but no nudge now (not a candidate, for ``reason``): the row keeps it.

    The row's count goes to 0 and it remembers the progress (``reset_row``),
    so the pair's next nudge is a first one, due at once, even after the
    claim or departure that showed it is gone from the host's rows.
    """

    reason: IdleReason


Decision = Charge | Wait | Capped | Drain | Reset | Idle


def _candidacy(pair: PairState, now: datetime, policy: PacingPolicy) -> TodoRef | IdleReason:
    work = None if pair.queue == QUARANTINE_QUEUE else pair.oldest
    if work is None:
        return IdleReason.NO_WORK
    if not pair.endpoint_active:
        return IdleReason.ENDPOINT_INACTIVE
    if not pair.has_receiver:
        return IdleReason.NO_RECEIVER
    if not work.created_at < now - policy.threshold:
        return IdleReason.FRESH
    return work


#: The ends of a Python datetime's range, in UTC. asyncpg writes each as PostgreSQL's
#: -infinity and infinity (and reads those back as naive datetimes), so neither is an
#: instant: ``readable`` excludes both, as the Postgres judge does.
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def readable(at: datetime) -> bool:
    """True for an instant every reader judges alike: strictly between the ends of the range.

    A host's timestamptz also holds -infinity, infinity, years BC and years
    past 9999; PostgreSQL reads those as not readable (rule ``readable``),
    and the Python ends stand for the infinities. A todo created at an
    instant that is not readable is not work, and a claim stamped with one
    is not progress: both stay on the board, and ``status`` shows them.
    """
    return FIRST_INSTANT < at < LAST_INSTANT


def later(at: datetime, delta: timedelta) -> datetime:
    """``at + delta`` for a ``delta`` of 0 or more, or ``LAST_INSTANT`` past the range's end."""
    return LAST_INSTANT if at > LAST_INSTANT - delta else at + delta


def work_of(pending: Iterable[TodoRef]) -> TodoRef | None:
    """The pair's work among its pending todos that pass the sender gate: the oldest readable.

    Ties go by id in code point order, so every reader names the same todo.
    A todo created at an instant that is not ``readable`` is not work.
    """
    work = (t for t in pending if readable(t.created_at))
    return min(work, key=lambda t: (t.created_at, t.id), default=None)


def is_candidate(pair: PairState, now: datetime, policy: PacingPolicy) -> bool:
    """True when the pair is stalled: gated work past the threshold, active, reachable."""
    return isinstance(_candidacy(pair, now, policy), TodoRef)


def latest_claim(claimed: Iterable[datetime | None]) -> datetime | None:
    """The latest readable ``claimed_at`` among a pair's todos (None: none was ever claimed).

    A claim stamped with an instant that is not ``readable`` is not read:
    the departure of the todo a nudge named still shows it.
    """
    return max((c for c in claimed if c is not None and readable(c)), default=None)


def has_departed(row: LedgerRow | None, pending: Collection[str]) -> bool:
    """True when the todo ``row`` names is not among the pair's ``pending`` todo ids.

    Departed means claimed, finished, deleted or moved to another pair: the
    row is gone or no longer pending in this pair. A change of its gate is
    not a departure (the todo is still pending here). A row an older build
    charged names no todo, and never departs.
    """
    return row is not None and row.named_todo is not None and row.named_todo not in pending


def made_progress(pair: PairState, row: LedgerRow | None) -> bool:
    """SPEC-0038 "a claim on any todo in that pair after the last nudge", read two ways.

    A claim stamped after the row's ``last_nudged_at``, or the departure of
    the todo the last nudge named, whichever shows first: the departure
    catches what a stamp cannot (a host clock behind the database, a claim
    whose transaction spanned the charge, a todo deleted or un-stamped at
    completion). Progress a reset kept counts until a charge answers it.
    """
    if row is None:
        return False
    if row.progressed_at is not None or pair.named_departed:
        return True
    return pair.latest_claim is not None and pair.latest_claim > row.last_nudged_at


def starts_over(pair: PairState, row: LedgerRow | None) -> bool:
    """True when the pair's next nudge is nudge 1, due at once: no row, or progress."""
    return row is None or made_progress(pair, row)


def effective_nudges(pair: PairState, row: LedgerRow | None) -> int:
    """Nudges spent since progress: 0 with no row or after progress."""
    if starts_over(pair, row):
        return 0
    assert row is not None  # starts_over is True without a row
    return row.nudges


def next_due_at(row: LedgerRow, policy: PacingPolicy) -> datetime | None:
    """When the nudge after ``row.nudges`` may fire, absent progress; None once capped."""
    if row.nudges >= policy.cap:
        return None
    return later(row.last_nudged_at, policy.delay_before(row.nudges + 1))


def is_due(pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy) -> bool:
    """True when the pair would be charged now but for the tick limit."""
    return isinstance(decide(pair, row, now, policy), Charge)


def charge_order(
    spent: int, oldest: TodoRef, endpoint_id: str, queue: str
) -> tuple[int, datetime, str, str]:
    """The key due pairs are charged by, smallest first (``str`` compares by code point)."""
    return (spent, oldest.created_at, endpoint_id, queue)


def charge_stamp(pair: PairState, now: datetime) -> datetime:
    """The ``last_nudged_at`` a charge at ``now`` writes: ``now``, or the latest claim if later.

    A claim stamped ahead of the ledger's clock (a host clock ahead, a
    claim's transaction that read the time after the charge did) is
    consumed by this charge: the stamp does not fall behind it, so it is
    never "after the last nudge" again, and the backoff runs from after it.
    """
    claimed = pair.latest_claim
    return now if claimed is None or claimed < now else claimed


def charge_row(nudge: Nudge) -> LedgerRow:
    """The ledger row a committed charge leaves behind: the progress it answered is consumed."""
    return LedgerRow(
        endpoint_id=nudge.endpoint_id,
        queue=nudge.queue,
        nudges=nudge.number,
        last_nudged_at=nudge.charged_at,
        named_todo=nudge.todo.id,
    )


def reset_row(row: LedgerRow, now: datetime) -> LedgerRow:
    """The row after progress no charge answered this tick: count 0, the progress kept.

    The stamp and the named todo stay, so a refund of an earlier nudge no
    longer matches, and the progress outlives the claim or departure that
    showed it.
    """
    kept = row.progressed_at if row.progressed_at is not None else now
    return attrs.evolve(row, nudges=0, progressed_at=kept)


def refunded_row(row: LedgerRow | None, nudge: Nudge) -> LedgerRow | None:
    """The row after refunding ``nudge``, which reached no receiver; None when nothing to refund.

    Compare-and-set: only the row that nudge's own charge wrote (same count,
    stamp and named todo) is refunded, so a refund can never undo a later
    charge, a reset or a drain. Two charges may share a count and a stamp
    (both nudge 1, both stamped with one claim stamped ahead of the clock),
    never the todo they name as well: the first one's todo departed to make
    the second one a nudge 1. The stamp stays: the retry waits one step.
    """
    written = (row.nudges, row.last_nudged_at, row.named_todo) if row is not None else None
    if written != (nudge.number, nudge.charged_at, nudge.todo.id):
        return None
    assert row is not None  # it matched
    return attrs.evolve(row, nudges=row.nudges - 1)


def decide(pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy) -> Decision:
    """Classify one pair at ``now``: charge, wait, capped, drain, reset or idle."""
    aware("now", now)
    if row is not None and row.key != pair.key:
        raise ValueError(f"ledger row {row.key!r} does not belong to pair {pair.key!r}")
    work = _candidacy(pair, now, policy)
    if work is IdleReason.NO_WORK and row is not None:
        return Drain()
    if isinstance(work, IdleReason):
        return Reset(reason=work) if made_progress(pair, row) else Idle(reason=work)
    if starts_over(pair, row):
        return Charge(number=1, todo=work)
    assert row is not None  # starts_over is True without a row
    due_at = next_due_at(row, policy)
    if due_at is None:
        return Capped(nudges=row.nudges)
    if now >= due_at:
        return Charge(number=row.nudges + 1, todo=work)
    return Wait(due_at=due_at)


@attrs.frozen(kw_only=True)
class TickPlan:
    """One tick's work: nudges to charge (at most tick_limit), rows to delete and to reset."""

    charges: tuple[Nudge, ...]
    drained: tuple[PairKey, ...]
    #: Pairs that were due but held back by the tick limit.
    held_back: int = 0
    #: Rows with progress this tick does not charge (``Reset``, or held back): ``reset_row``.
    reset: tuple[PairKey, ...] = ()


def plan_tick(
    pairs: Iterable[PairState],
    ledger_rows: Mapping[PairKey, LedgerRow],
    now: datetime,
    policy: PacingPolicy,
) -> TickPlan:
    """Decide one tick over a whole board.

    Due pairs are charged in ``charge_order``, at most ``tick_limit`` of
    them, so every ledger picks the same four. A row whose pair is absent
    from ``pairs`` has no pending work: drained. A row with progress that is
    not charged (a ``Reset``, or held back by the tick limit) is reset.
    """
    due: list[tuple[tuple[int, datetime, str, str], Nudge]] = []
    drained: list[PairKey] = []
    reset: list[PairKey] = []
    progressed: set[PairKey] = set()
    seen: set[PairKey] = set()
    for pair in pairs:
        if pair.key in seen:
            raise ValueError(f"pair {pair.key!r} appears twice")
        seen.add(pair.key)
        row = ledger_rows.get(pair.key)
        decision = decide(pair, row, now, policy)
        if isinstance(decision, Drain):
            drained.append(pair.key)
        elif isinstance(decision, Reset):
            reset.append(pair.key)
        elif isinstance(decision, Charge):
            if made_progress(pair, row):
                progressed.add(pair.key)
            nudge = Nudge(
                endpoint_id=pair.endpoint_id,
                queue=pair.queue,
                todo=decision.todo,
                number=decision.number,
                charged_at=charge_stamp(pair, now),
            )
            order = charge_order(decision.number - 1, decision.todo, *pair.key)
            due.append((order, nudge))
    drained.extend(key for key in ledger_rows if key not in seen)
    due.sort(key=lambda item: item[0])
    charges = tuple(nudge for _, nudge in due[: policy.tick_limit])
    reset.extend(n.key for _, n in due[policy.tick_limit :] if n.key in progressed)
    return TickPlan(
        charges=charges,
        drained=tuple(sorted(drained)),
        held_back=max(0, len(due) - policy.tick_limit),
        reset=tuple(sorted(reset)),
    )


#: The longest a ledger that judges only what changed may go without judging every
#: pair: the bound on how late a change no timestamp shows (a hook re-enabled, a
#: delivery verified later, a todo deleted) is seen.
FULL_PASS_INTERVAL = timedelta(minutes=5)


def full_pass_due(
    last_full_pass_at: datetime | None, now: datetime, interval: timedelta = FULL_PASS_INTERVAL
) -> bool:
    """True when this tick must judge every pair: none yet, or ``interval`` has passed.

    A clock that went back (a moved test clock, a restored database) also
    asks for one: a full pass is never wrong, only dearer.
    """
    aware("now", now)
    if not interval > timedelta(0):
        raise ValueError(f"the full-pass interval must be positive, got {interval!r}")
    if last_full_pass_at is None:
        return True
    aware("last_full_pass_at", last_full_pass_at)
    return not last_full_pass_at <= now < last_full_pass_at + interval


def swept_recently(swept_at: datetime | None, now: datetime, every: timedelta | None) -> bool:
    """True when a looping instance skips: the fleet swept less than ``every`` before ``now``.

    A record from the future (a moved test clock, a restored database) does
    not hold a tick back: skipping is for pacing, and a stale record must
    never stop the sweep.
    """
    aware("now", now)
    if every is None or swept_at is None:
        return False
    return swept_at <= now < swept_at + every


#: A tick skipped while its fleet's record says a sweep is due met another instance
#: holding the tick (sweeping, or refunding); it looks again after this part of an
#: interval, not at once: the holder's record commits only when it is done.
HELD_RETRY_FRACTION = 10


def next_sweep_in(
    swept_at: datetime | None, now: datetime, every: timedelta, *, skipped: bool = False
) -> timedelta:
    """How long a looping instance waits after a tick at ``now``: to ``every`` past the last sweep.

    The fleet's record, not this instance's own phase, sets the pace, so N
    instances on any phases sweep once an interval between them. Never more
    than ``every`` (a record from the future, a moved clock), never less than
    nothing; without a record, a whole interval. A ``skipped`` tick that
    found a sweep due found the tick held by another instance, whose record
    is not committed yet: it looks again after ``every / HELD_RETRY_FRACTION``
    (looking again at once would query the database in a loop until then).
    """
    aware("now", now)
    if swept_at is None:
        return every
    wait = min(max(swept_at + every - now, timedelta(0)), every)
    if skipped and not wait:
        return every / HELD_RETRY_FRACTION
    return wait
