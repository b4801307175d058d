"""Plain values the sweep reads, decides on and hands to its ports."""

from __future__ import annotations

from datetime import datetime

import attrs

__all__ = [
    "QUARANTINE_QUEUE",
    "TICK_KINDS",
    "ChargeOutcome",
    "HookHealth",
    "HookTarget",
    "LedgerRow",
    "Nudge",
    "PairKey",
    "PairState",
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


@attrs.frozen(kw_only=True)
class PairState:
    """What the sweep knows of one (endpoint, queue) pair at one instant, read from the host's rows.

    ``oldest`` is the pair's work as ``stall_core.work_of`` finds it (None
    when there is none). ``latest_claim`` is its latest new claim, one the
    last tick did not read (``stall_core.latest_claim``; None: none).
    ``named_departed`` says the todo its ledger row names is no longer
    pending in this pair: claimed, finished, deleted or moved (False without
    a row or a named todo). ``silenced_until`` is when the silences covering
    the pair now end (``stall_core.silenced_until``; None: none covers it).
    """

    endpoint_id: str
    queue: str
    oldest: TodoRef | None
    endpoint_active: bool
    has_receiver: bool
    latest_claim: datetime | None = attrs.field(default=None, validator=_aware_or_none)
    named_departed: bool = False
    silenced_until: datetime | None = attrs.field(default=None, validator=_aware_or_none)

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class LedgerRow:
    """A queue_stall_nudges row: the pacing state of one pair.

    ``nudges`` counts the nudges since progress that reached a receiver; it
    is 0 after a first nudge was refunded, or after progress no nudge has
    answered yet. ``last_nudged_at`` is the pacing base: the instant of the
    last attempt. ``named_todo`` is the todo the last charge named (None on a
    row an older build charged); ``progressed_at`` is when progress was kept
    for a nudge still to come (None: none is kept).
    """

    endpoint_id: str
    queue: str
    nudges: int
    last_nudged_at: datetime = attrs.field(validator=_must_be_aware)
    named_todo: str | None = None
    progressed_at: datetime | None = attrs.field(default=None, validator=_aware_or_none)

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


#: What a tick judged: every pair (``full``), or the pairs whose decision can have changed
#: since the last tick (``delta``).
TICK_KINDS = ("delta", "full")


def _tick_kind(_: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and value not in TICK_KINDS:
        raise ValueError(f"{attribute.name} must be one of {TICK_KINDS} or None, got {value!r}")


@attrs.frozen(kw_only=True)
class ChargeOutcome:
    """What one ledger tick committed: the nudges to deliver, the rows cleared.

    ``now`` is the instant the ledger decided at, read from its own time
    authority. ``skipped`` means this tick decided nothing: another instance
    held the tick, or the fleet swept less than the interval asked for ago.
    ``swept_at`` is when the fleet last swept, on the same clock (``now``
    when this tick swept; None when the ledger keeps no such record): a loop
    schedules its next tick an interval after it. ``kind`` and ``judged``
    say what the tick looked at: every pair or what changed (None when it
    skipped), and how many pairs it judged.
    """

    now: datetime = attrs.field(validator=_must_be_aware)
    charged: tuple[Nudge, ...] = ()
    cleared: tuple[PairKey, ...] = ()
    skipped: bool = False
    swept_at: datetime | None = attrs.field(default=None, validator=_aware_or_none)
    kind: str | None = attrs.field(default=None, validator=_tick_kind)
    judged: int = 0


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
