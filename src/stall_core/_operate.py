"""What a person on call does to the sweep, and what it remembers: silences, resets, a nudge
now, and the history of every charge and its outcome.

Theory of operation
-------------------
A **silence** keeps the pairs it covers (one pair, or every queue of an
endpoint) from being charged until it ends: ``silences_pair`` is the rule,
``decide`` applies it (a silenced candidate is ``Idle``, or ``Reset`` when it
made progress), so a silenced pair is neither charged nor counted against
the tick limit, and keeps its ledger row and count. A **reset** is
``reset_row`` written by hand: the pair's next nudge is nudge 1, due at once.
A **nudge now** (``nudge_now``) is a reset and a tick, under the tick lock,
for a candidate not nudged within ``NUDGE_NOW_GAP``: two operators and a
sweeping fleet that race wake the pair once. The **history** keeps one
entry per charge, with its outcome once known, and one per operator action.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import attrs

from ._decide import Charge, Idle, IdleReason, Wait, _candidacy, later
from ._durations import format_duration
from ._policy import PacingPolicy
from ._values import LedgerRow, Nudge, PairState, aware

__all__ = [
    "ACTIONS",
    "NUDGE_NOW_GAP",
    "OUTCOMES",
    "DeliveryOutcome",
    "HistoryEntry",
    "NoSuchPair",
    "Silence",
    "nudge_now",
    "nudge_now_detail",
    "silenced_until",
    "silences_pair",
]

#: What a charge came to: a receiver answered 2xx; the transport refused it at once
#: (refunded); every attempt failed (refunded); every attempt failed and that failure
#: disabled a hook (refunded).
OUTCOMES = ("delivered", "refused", "gave-up", "hook-disabled")
#: What an operator did; a charge's history entry is ``charged``.
ACTIONS = ("silenced", "unsilenced", "reset", "nudged")
#: A nudge now is refused this soon after the pair's last nudge: two operators and a
#: sweeping fleet racing wake it once, and the second is told when the first was.
NUDGE_NOW_GAP = timedelta(minutes=1)


class NoSuchPair(LookupError):
    """An operator named an endpoint the host does not have, or a queue it has no trace of."""


def _aware(_: object, attribute: attrs.Attribute[datetime], value: datetime) -> None:
    aware(attribute.name, value)


@attrs.frozen(kw_only=True)
class Silence:
    """Keeps the pairs it covers from being charged from ``starts_at`` until ``ends_at``.

    ``queue`` None covers every queue of the endpoint. ``by`` and ``reason``
    are the operator's words; both instants are on the ledger's clock.
    """

    endpoint_id: str
    queue: str | None
    starts_at: datetime = attrs.field(validator=_aware)
    ends_at: datetime = attrs.field(validator=_aware)
    by: str
    reason: str


def silences_pair(silence: Silence, endpoint_id: str, queue: str, now: datetime) -> bool:
    """True when ``silence`` covers the pair at ``now``: its endpoint, its queue or all, not ended.

    A silence holds from when it is recorded: only its end is compared, so a
    clock moved back does not lift it.
    """
    return (
        silence.endpoint_id == endpoint_id
        and (silence.queue is None or silence.queue == queue)
        and now < silence.ends_at
    )


def silenced_until(
    silences: Iterable[Silence], endpoint_id: str, queue: str, now: datetime
) -> datetime | None:
    """When the last silence covering the pair at ``now`` ends; None when none covers it."""
    ends = (s.ends_at for s in silences if silences_pair(s, endpoint_id, queue, now))
    return max(ends, default=None)


def nudge_now(
    pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy
) -> Charge | Idle | Wait:
    """What an operator's nudge now does to a pair: charge nudge 1, or why not.

    ``Idle`` names why the pair is not a candidate (``silenced`` included);
    ``Wait`` says it was nudged less than ``NUDGE_NOW_GAP`` ago and when a
    nudge now is next allowed. Otherwise the pair starts over (``reset_row``)
    and is charged nudge 1 in the same tick, whatever its count: an
    operator's nudge gives a fixed consumer the whole schedule again.
    """
    aware("now", now)
    work = _candidacy(pair, now, policy)
    if isinstance(work, IdleReason):
        return Idle(reason=work)
    if row is not None and now < later(row.last_nudged_at, NUDGE_NOW_GAP):
        return Wait(due_at=later(row.last_nudged_at, NUDGE_NOW_GAP))
    return Charge(number=1, todo=work)


def nudge_now_detail(decision: Charge | Idle | Wait, reason: str) -> str:
    """The history's detail of a nudge now: the operator's reason and what came of it."""
    match decision:
        case Idle(reason=why):
            came = f"not a candidate: {why.value}"
        case Wait(due_at=due_at):
            came = f"nudged within {format_duration(NUDGE_NOW_GAP)}, until {due_at.isoformat()}"
        case _:
            came = "started over at nudge 1"
    return f"{reason}; {came}" if reason else came


@attrs.frozen(kw_only=True)
class DeliveryOutcome:
    """One charged nudge's fate, as ``open_reaper(on_delivery=...)`` and the history get it.

    ``outcome`` is one of ``OUTCOMES``; ``detail`` says why it was not
    delivered (the refusal, the last attempt's failure). ``refunded`` says
    whether its charge was taken back (False once a later charge, reset or
    clear superseded it, or the refund failed).
    """

    nudge: Nudge
    outcome: str = attrs.field(validator=attrs.validators.in_(OUTCOMES))
    detail: str | None = None
    refunded: bool = False


@attrs.frozen(kw_only=True)
class HistoryEntry:
    """One line of the history: a charge (``charged``, its outcome once known) or an action.

    For a charge: ``nudge``, ``todo_id`` and ``outcome`` (None while its
    delivery is under way), ``detail`` why it was not delivered, and
    ``settled_at`` when its outcome was booked. For an action (``ACTIONS``):
    ``by`` and ``detail`` (the reason), and for a silence ``until``.
    ``queue`` is None for an action on every queue of an endpoint.
    """

    at: datetime = attrs.field(validator=_aware)
    endpoint_id: str
    queue: str | None
    event: str
    nudge: int | None = None
    todo_id: str | None = None
    outcome: str | None = None
    detail: str | None = None
    by: str | None = None
    until: datetime | None = None
    settled_at: datetime | None = None
