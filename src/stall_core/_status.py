"""Answering "is my queue drained?": one pair's verdict, from the same decision the sweep makes."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

import attrs

from ._decide import (
    Capped,
    Charge,
    Clear,
    Idle,
    IdleReason,
    Reset,
    Wait,
    decide,
    effective_nudges,
    is_quarantine,
    later,
    made_progress,
    names_fit,
    next_due_at,
)
from ._policy import PacingPolicy
from ._values import LedgerRow, PairState

__all__ = ["PairStatus", "Unreadable", "Verdict", "pair_status"]


class Verdict(enum.Enum):
    """What the sweep will do with a pair, in the words `stall-nudge status` prints."""

    FRESH = "fresh"  # work, but younger than the threshold
    DUE = "due"  # the next tick charges it (tick limit permitting)
    BACKING_OFF = "backing-off"  # nudged, waiting out the backoff
    CAPPED = "capped"  # cap reached without progress: silent, work stays claimable
    NO_RECEIVER = "no-receiver"  # no enabled notify hook covers the queue
    ENDPOINT_INACTIVE = "endpoint-inactive"  # endpoint paused or disabled
    HELD_BY_GATE = "held-by-gate"  # only todos the sender gate holds back: pull only
    QUARANTINE = "quarantine"  # held deliveries: never nudged
    NAMES_TOO_LONG = "names-too-long"  # pending todos, names past NAMES_MAX_BYTES: never work
    DRAINED = "drained"  # no pending work; a leftover row is cleared next tick
    UNREADABLE = "unreadable"  # sendable todos, all created at instants the sweep cannot read


@attrs.frozen(kw_only=True)
class Unreadable:
    """A host value of a pair the sweep cannot read (``stall_core.readable``): a person's to fix.

    The todo holding it, the column (``created_at`` of a pending todo: not
    work; ``claimed_at`` of any: not progress) and the value as PostgreSQL
    prints it (``-infinity``, ``0001-01-01 00:00:00+00 BC``; ``NULL``).
    """

    todo_id: str
    column: str
    value: str


@attrs.frozen(kw_only=True)
class PairStatus:
    """One line of the status report."""

    endpoint_id: str
    queue: str
    #: Pending todos that pass the sender gate (``passes_gate``).
    sendable: int
    #: Pending todos the sender gate holds back.
    held_by_gate: int
    oldest_age: timedelta | None
    #: The effective count: nudges since the last progress (None: no ledger row).
    effective_nudges: int | None
    last_nudged_at: datetime | None
    next_due_at: datetime | None
    verdict: Verdict
    #: The most consecutive failed deliveries of an enabled hook covering the pair: a
    #: receiver that is failing shows here before auto-disable turns it off.
    hook_failures: int = 0
    #: Disabled hooks of the endpoint whose queue filter covers the pair.
    hooks_disabled: int = 0
    #: The todo the last nudge named (None: no ledger row, or one an older build charged).
    named_todo: str | None = None
    #: A host value of the pair the sweep cannot read (None: every one is readable).
    unreadable: Unreadable | None = None


def pair_status(
    pair: PairState,
    row: LedgerRow | None,
    *,
    sendable: int,
    held_by_gate: int,
    now: datetime,
    policy: PacingPolicy,
    hook_failures: int = 0,
    hooks_disabled: int = 0,
    unreadable: Unreadable | None = None,
) -> PairStatus:
    """The verdict the sweep's own ``decide`` gives this pair at ``now``.

    A pair with no work says why (``_no_work``), whether or not a leftover
    ledger row is cleared next tick.
    """
    decision = decide(pair, row, now, policy)
    if isinstance(decision, Reset):  # the row keeps the progress; the verdict is the reason
        decision = Idle(reason=decision.reason)
    next_due: datetime | None = None
    match decision:
        case Charge():
            verdict, next_due = Verdict.DUE, now
        case Wait(due_at=due_at):
            verdict, next_due = Verdict.BACKING_OFF, due_at
        case Capped():
            verdict = Verdict.CAPPED
        case Idle(reason=IdleReason.FRESH):
            verdict = Verdict.FRESH
            assert pair.oldest is not None  # FRESH needs work
            # Not before: the first tick strictly after the threshold, or the backoff if later.
            next_due = later(pair.oldest.created_at, policy.threshold)
            if row is not None and not made_progress(pair, row):
                backoff = next_due_at(row, policy)
                next_due = None if backoff is None else max(next_due, backoff)
        case Idle(reason=IdleReason.NO_RECEIVER):
            verdict = Verdict.NO_RECEIVER
        case Idle(reason=IdleReason.ENDPOINT_INACTIVE):
            verdict = Verdict.ENDPOINT_INACTIVE
        case Clear() | Idle():
            verdict = _no_work(pair, sendable, held_by_gate, unreadable)
    return PairStatus(
        endpoint_id=pair.endpoint_id,
        queue=pair.queue,
        sendable=sendable,
        held_by_gate=held_by_gate,
        oldest_age=None if pair.oldest is None else now - pair.oldest.created_at,
        effective_nudges=None if row is None else effective_nudges(pair, row),
        last_nudged_at=None if row is None else row.last_nudged_at,
        next_due_at=next_due,
        verdict=verdict,
        hook_failures=hook_failures,
        hooks_disabled=hooks_disabled,
        named_todo=None if row is None else row.named_todo,
        unreadable=unreadable,
    )


def _no_work(
    pair: PairState, sendable: int, held_by_gate: int, unreadable: Unreadable | None
) -> Verdict:
    """Why a pair has no work: by design (quarantine), for a person, or none is pending."""
    if is_quarantine(pair.queue):
        return Verdict.QUARANTINE
    if (sendable or held_by_gate) and not names_fit(pair.endpoint_id, pair.queue):
        return Verdict.NAMES_TOO_LONG
    if sendable and unreadable is not None:  # sendable, and none of it created readably
        return Verdict.UNREADABLE
    if held_by_gate:
        return Verdict.HELD_BY_GATE
    return Verdict.DRAINED
