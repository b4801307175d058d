"""Plain values the sweep reads, decides on and hands to its ports."""

from __future__ import annotations

import enum
from datetime import datetime

import attrs

__all__ = [
    "QUARANTINE_QUEUE",
    "ChargeOutcome",
    "HookHealth",
    "HookTarget",
    "LedgerRow",
    "Nudge",
    "PairKey",
    "PairState",
    "Progress",
    "TodoRef",
    "aware",
    "positive_int",
    "positive_seconds",
]

#: Held deliveries live here; they never count as pending work (SPEC-0038).
QUARANTINE_QUEUE = "quarantine"

#: (endpoint_id, queue): the unit the sweep nudges and the ledger keys on.
PairKey = tuple[str, str]


def aware(name: str, value: datetime) -> datetime:
    """Return ``value`` if it carries a time zone, else raise naming ``name``.

    Naive datetimes compare wrongly against the database's timestamptz, so
    every instant entering the core must be aware.
    """
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value.isoformat()}")
    return value


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an integer >= 1 (not a bool), else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def positive_seconds(name: str, value: float) -> float:
    """Return ``value`` if it is a finite number of seconds > 0, else raise naming ``name``."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and 0 < value < float("inf")):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return value


def _must_be_aware(_: object, attribute: attrs.Attribute[datetime], value: datetime) -> None:
    aware(attribute.name, value)


def _aware_or_none(
    _: object, attribute: attrs.Attribute[datetime | None], value: datetime | None
) -> None:
    if value is not None:
        aware(attribute.name, value)


@attrs.frozen(kw_only=True)
class TodoRef:
    """The fields of a todo a wake names; only ever a gate-passing todo."""

    id: str
    created_at: datetime = attrs.field(validator=_must_be_aware)
    title: str | None = None


class Progress(enum.Enum):
    """What "a claim in the pair after the last nudge" (SPEC-0038 "Progress") means to a ledger.

    The spec's words read two ways, and a ledger declares which it offers:
    ``TIMESTAMPS`` compares each todo's ``claimed_at`` with the row's
    ``last_nudged_at``, which the host's rows alone can answer; ``COMMIT_ORDER``
    also counts a claim stamped before a charge read the time that committed
    after the charge looked (a claim log sees it, timestamps cannot). Either
    way a claim counts once: the charge that consumes it stamps the row at or
    after it (``charge_stamp``).
    """

    TIMESTAMPS = "timestamps"
    COMMIT_ORDER = "commit-order"


@attrs.frozen(kw_only=True)
class PairState:
    """What the sweep knows of one (endpoint, queue) pair at one instant.

    ``oldest`` is the oldest pending, unclaimed todo whose delivery passes
    the sender gate (None when there is none). ``progress_at`` is the latest
    claim on a todo of the pair after its last nudge, as the ledger reads
    "after" (``Progress``), or None when there is none: with a ledger row,
    that is progress.
    """

    endpoint_id: str
    queue: str
    oldest: TodoRef | None
    endpoint_active: bool
    has_receiver: bool
    progress_at: datetime | None = attrs.field(default=None, validator=_aware_or_none)

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class LedgerRow:
    """A queue_stall_nudges row: the pacing state of one pair.

    ``nudges`` counts the nudges since progress that reached a receiver; it
    is 0 only after a first nudge was refunded. ``last_nudged_at`` is the
    pacing base: the instant of the last attempt, or the latest claim its
    charge consumed if that is later.
    """

    endpoint_id: str
    queue: str
    nudges: int
    last_nudged_at: datetime = attrs.field(validator=_must_be_aware)

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class Nudge:
    """One charged wake: the pair, the todo it names and its number since progress.

    ``charged_at`` is the ``last_nudged_at`` its charge wrote; with ``number``
    it identifies the charge, so a refund can never undo a later one.
    """

    endpoint_id: str
    queue: str
    todo: TodoRef
    number: int
    charged_at: datetime = attrs.field(validator=_must_be_aware)

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class ChargeOutcome:
    """What one ledger tick committed: the nudges to deliver, the rows deleted.

    ``now`` is the instant the ledger decided at, read from its own time
    authority. ``skipped`` means this tick decided nothing: another instance
    held the tick, or the fleet swept less than the interval asked for ago.
    ``swept_at`` is when the fleet last swept, on the same clock (``now``
    when this tick swept; None when the ledger keeps no such record): a loop
    schedules its next tick an interval after it.
    """

    now: datetime = attrs.field(validator=_must_be_aware)
    charged: tuple[Nudge, ...] = ()
    drained: tuple[PairKey, ...] = ()
    skipped: bool = False
    swept_at: datetime | None = attrs.field(default=None, validator=_aware_or_none)


@attrs.frozen(kw_only=True)
class HookTarget:
    """One enabled hook to deliver to; its URL and secret stay out of reprs and logs."""

    id: str
    endpoint_id: str
    url: str = attrs.field(repr=False)
    secret: str = attrs.field(repr=False)


@attrs.frozen(kw_only=True)
class HookHealth:
    """A hook's standing after a failure was booked."""

    consecutive_failures: int
    enabled: bool
