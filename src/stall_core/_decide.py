"""The sweep's decisions: pure functions of (pair, ledger row, now, policy).

Everything that affects whether a pair is nudged lives in this file, so it
can be read as the spec's state table. ``decide`` classifies one pair;
``plan_tick`` turns a whole board into the charges and drains of one
tick. Nothing here reads a clock or touches IO: the sweeper and the ledger
adapters gather the inputs and apply the outputs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import attrs

from ._policy import PacingPolicy
from ._values import QUARANTINE_QUEUE, LedgerRow, Nudge, PairKey, PairState, TodoRef, aware

__all__ = [
    "FULL_PASS_INTERVAL",
    "HELD_RETRY_FRACTION",
    "Capped",
    "Charge",
    "Decision",
    "Drain",
    "Idle",
    "IdleReason",
    "Reset",
    "TickPlan",
    "Wait",
    "charge_row",
    "charge_stamp",
    "decide",
    "effective_nudges",
    "full_pass_due",
    "is_candidate",
    "made_progress",
    "next_due_at",
    "next_sweep_in",
    "plan_tick",
    "progress_by_timestamps",
    "refunded_row",
    "starts_over",
    "swept_recently",
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
    """Progress, but no nudge now (not a candidate, for ``reason``): delete the row.

    Its next nudge is a first one, due at once, exactly as progress makes it:
    the row would only keep the claim waiting to be seen again. Consuming it
    where it is seen is what lets a backlog of claims be judged once.
    """

    reason: IdleReason


Decision = Charge | Wait | Capped | Drain | Reset | Idle


def is_candidate(pair: PairState, now: datetime, policy: PacingPolicy) -> bool:
    """True when the pair is stalled: gated work past the threshold, active, reachable."""
    return isinstance(_candidacy(pair, now, policy), TodoRef)


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


def made_progress(pair: PairState, row: LedgerRow | None) -> bool:
    """True when some todo of the pair was claimed after the pair's last nudge.

    The ledger reads "after" (``Progress``) and reports the latest such claim
    as ``PairState.progress_at``; the charge that consumes it stamps the row
    at or after it, so each claim counts once.
    """
    return row is not None and pair.progress_at is not None


def progress_by_timestamps(
    claimed: Iterable[datetime | None], row: LedgerRow | None
) -> datetime | None:
    """``Progress.TIMESTAMPS``: the latest of a pair's ``claimed_at`` after its row's last nudge.

    None without a row (nothing to be after) or without a later claim. A
    claim exactly at ``last_nudged_at`` is not after it: the charge that
    consumed a claim stamps the row with that claim's instant at the latest.
    """
    if row is None:
        return None
    return max((c for c in claimed if c is not None and c > row.last_nudged_at), default=None)


def starts_over(pair: PairState, row: LedgerRow | None) -> bool:
    """True when the pair's next nudge is nudge 1, due at once: no row, or progress."""
    return row is None or made_progress(pair, row)


def effective_nudges(pair: PairState, row: LedgerRow | None) -> int:
    """Nudges spent since progress: 0 with no row or after a claim."""
    if starts_over(pair, row):
        return 0
    assert row is not None  # starts_over is True without a row
    return row.nudges


def next_due_at(row: LedgerRow, policy: PacingPolicy) -> datetime | None:
    """When the nudge after ``row.nudges`` may fire, absent progress; None once capped."""
    if row.nudges >= policy.cap:
        return None
    return row.last_nudged_at + policy.delay_before(row.nudges + 1)


def charge_stamp(pair: PairState, now: datetime) -> datetime:
    """The ``last_nudged_at`` a charge at ``now`` writes: ``now``, or a later claim it consumes.

    A claim's transaction may read the time after the charge did and still
    commit before the charge looks; the charge consumes it, and its stamp
    does not fall behind it, so every consumed claim is at or before the
    stamp (never "after the last nudge" again) and the backoff runs from
    after the claim.
    """
    claimed = pair.progress_at
    return now if claimed is None or claimed < now else claimed


def refunded_row(row: LedgerRow | None, nudge: Nudge) -> LedgerRow | None:
    """The row after refunding ``nudge``, which reached no receiver; None when nothing to refund.

    Compare-and-set: only the row that nudge's own charge wrote (same count,
    same stamp) is refunded, so a refund can never undo a later charge, and
    a drained row stays deleted. The stamp stays: the retry waits one step.
    """
    if row is None or (row.nudges, row.last_nudged_at) != (nudge.number, nudge.charged_at):
        return None
    return attrs.evolve(row, nudges=row.nudges - 1)


def decide(pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy) -> Decision:
    """Classify one pair at ``now``: charge, wait, capped, drain or idle."""
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


def charge_row(nudge: Nudge) -> LedgerRow:
    """The ledger row a committed charge leaves behind."""
    return LedgerRow(
        endpoint_id=nudge.endpoint_id,
        queue=nudge.queue,
        nudges=nudge.number,
        last_nudged_at=nudge.charged_at,
    )


@attrs.frozen(kw_only=True)
class TickPlan:
    """One tick's work: nudges to charge (at most tick_limit) and rows to delete."""

    charges: tuple[Nudge, ...]
    drained: tuple[PairKey, ...]
    #: Pairs that were due but held back by the tick limit.
    held_back: int = 0
    #: Pairs with progress this tick does not charge (``Reset``, or held back): rows deleted.
    reset: tuple[PairKey, ...] = ()


def plan_tick(
    pairs: Iterable[PairState],
    ledger_rows: Mapping[PairKey, LedgerRow],
    now: datetime,
    policy: PacingPolicy,
) -> TickPlan:
    """Decide one tick over a whole board.

    Due pairs are charged least-nudged first (effective count), then by
    oldest pending todo, then endpoint_id and queue (by code point, the
    order of Postgres' "C" collation), so every ledger picks the same four.
    A row whose pair is absent from ``pairs`` has no pending work: deleted.
    A pair with progress that is not charged (a ``Reset``, or held back by
    the tick limit) has its row deleted too: its progress is consumed.
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
            order = (decision.number - 1, decision.todo.created_at, pair.endpoint_id, pair.queue)
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
#: pair: the bound on how late a change it cannot see (a hook re-enabled, a delivery
#: verified later) is nudged.
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
