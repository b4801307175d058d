"""Answering "is my queue drained?": one pair's verdict, from the same decision the sweep makes."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
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
from ._operate import OUTCOMES, HistoryEntry, Silence, silences_pair
from ._policy import PacingPolicy
from ._text import printable
from ._values import LedgerRow, PairState

__all__ = [
    "NEXT_STEPS",
    "REACHED_NOBODY",
    "RECENT_OUTCOMES",
    "PairStatus",
    "Receiver",
    "Unreadable",
    "Verdict",
    "next_step",
    "pair_status",
    "receiver_health",
]


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
    SILENCED = "silenced"  # a candidate an operator's silence keeps from being charged


#: The outcomes of a charge that reached no receiver (``stall_core.OUTCOMES``): a pair's
#: latest one in its history is ``PairStatus.last_failure_at``.
REACHED_NOBODY = tuple(outcome for outcome in OUTCOMES if outcome != "delivered")
#: How many of a pair's last charges status shows with their outcomes, newest first.
RECENT_OUTCOMES = 3
#: The outcomes in which the receivers were asked and none answered: a pair's last one,
#: with the hooks answering again since, is a recovered receiver (``receiver_health``).
RECEIVER_FAILED = ("gave-up", "hook-disabled")


class Receiver(enum.Enum):
    """The health of a pair's receivers (its enabled covering hooks), as status words it."""

    NONE = "none"  # no enabled hook covers the pair: nothing to wake
    OK = "ok"  # no failure booked, none in the pair's history
    FAILING = "failing"  # a covering hook's last deliveries failed, every attempt
    RECOVERED = "recovered"  # failures in the pair's history, but its hooks answer again


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
    #: Whether an enabled hook covers the pair (``has_receiver``), whatever its verdict.
    has_receiver: bool = True
    #: The host's name for the endpoint (None: the host keeps none).
    endpoint_name: str | None = None
    #: When a nudge of the pair last reached no receiver (``REACHED_NOBODY``, settled at),
    #: from its history (None: never, within the history's retention).
    last_failure_at: datetime | None = None
    #: When the silences covering the pair end (None: none covers it), whatever its verdict.
    silenced_until: datetime | None = None
    #: The silence covering the pair that ends last: who, why and until when (None: none,
    #: or it was not read).
    silence: Silence | None = None
    #: The pair's last charges (at most ``RECENT_OUTCOMES``) from its history, newest
    #: first, each with its outcome (None: its delivery is under way).
    last_outcomes: tuple[HistoryEntry, ...] = ()


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
    endpoint_name: str | None = None,
    last_failure_at: datetime | None = None,
    silences: Iterable[Silence] = (),
    last_outcomes: Sequence[HistoryEntry] = (),
) -> PairStatus:
    """The verdict the sweep's own ``decide`` gives this pair at ``now``.

    A pair with no work says why (``_no_work``), whether or not a leftover
    ledger row is cleared next tick. ``silences`` are those not ended at
    ``now`` (the ledger's ``silences``): the one covering the pair
    (``silences_pair``) that ends last is shown, whatever the verdict. A
    silenced pair is next due when its silence ends, or its backoff if later.
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
        case Idle(reason=IdleReason.SILENCED):
            verdict = Verdict.SILENCED
            assert pair.silenced_until is not None  # SILENCED needs a silence
            next_due = pair.silenced_until
            if row is not None and not made_progress(pair, row):
                backoff = next_due_at(row, policy)
                next_due = None if backoff is None else max(next_due, backoff)
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
        has_receiver=pair.has_receiver,
        endpoint_name=endpoint_name,
        last_failure_at=last_failure_at,
        silenced_until=pair.silenced_until,
        silence=max(
            (s for s in silences if silences_pair(s, pair.endpoint_id, pair.queue, now)),
            key=lambda s: s.ends_at,
            default=None,
        ),
        last_outcomes=tuple(last_outcomes),
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


def receiver_health(status: PairStatus) -> Receiver:
    """How the pair's receivers fare, from the hook directory and the pair's history.

    A success resets a hook's failures in a row, so a pair whose latest
    settled nudge found no receiver answering (``RECEIVER_FAILED``), with no
    failure booked now, has a receiver that answered since: recovered, not
    failing. Once a later nudge is delivered, or when our own dispatcher
    refused the last one (no receiver was asked), it is simply ok.
    """
    if not status.has_receiver or status.verdict is Verdict.NO_RECEIVER:
        return Receiver.NONE
    if status.hook_failures:
        return Receiver.FAILING
    settled = next((e.outcome for e in status.last_outcomes if e.outcome is not None), None)
    if status.last_failure_at is not None and settled in RECEIVER_FAILED:
        return Receiver.RECOVERED
    return Receiver.OK


#: What a person does about each verdict that asks for one, in one line. ``{endpoint}``,
#: ``{queue}`` and ``{nudges}`` are filled in by ``next_step``; the other verdicts need
#: nothing, or only time.
NEXT_STEPS: dict[Verdict, str] = {
    Verdict.CAPPED: "{nudges} nudges woke no consumer of {queue}: fix the consumer, then "
    "`stall-nudge reset {endpoint} {queue}`",
    Verdict.NO_RECEIVER: "no enabled hook covers {queue}: enable one, or this queue is "
    "drained by pull only",
    Verdict.ENDPOINT_INACTIVE: "endpoint {endpoint} is paused or disabled: resume it, or "
    "this queue is drained by pull only",
    Verdict.HELD_BY_GATE: "{queue} holds only todos of unverified deliveries: verify them, "
    "or this queue is drained by pull only",
    Verdict.UNREADABLE: "the sweep cannot read when {queue}'s todos were created: fix the "
    "value on the host",
    Verdict.NAMES_TOO_LONG: "{endpoint} and {queue} are too long together to be nudged: "
    "use a shorter queue name",
}
#: The verdicts of a pair the sweep nudges, or has: a failing receiver is why it is not drained.
_NUDGED = frozenset({Verdict.DUE, Verdict.BACKING_OFF, Verdict.FRESH, Verdict.CAPPED})
#: What a person does when a covering hook fails every attempt: a verdict of its own would
#: hide the sweep's decision, so it is a step beside it.
FAILING_STEP = "{endpoint}'s hook fails every attempt: check its URL and the receiver's logs"


def next_step(status: PairStatus) -> str | None:
    """The one line that tells a person what to do about the pair; None when nothing to do.

    A failing receiver of a pair the sweep nudges comes first: it is why a
    due or backing-off pair is not drained. Names are escaped and cut
    (``printable``).
    """
    failing = receiver_health(status) is Receiver.FAILING
    template = FAILING_STEP if failing and status.verdict in _NUDGED else None
    template = template or NEXT_STEPS.get(status.verdict)
    if template is None:
        return None
    return template.format(
        endpoint=printable(status.endpoint_id),
        queue=printable(status.queue),
        nudges=status.effective_nudges or 0,
    )
