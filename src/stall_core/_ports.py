"""The ports the sweep drives. Adapters satisfy them structurally (no inheritance)."""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import attrs

from ._decide import Charge, Idle, Wait
from ._operate import DeliveryOutcome, HistoryEntry, Silence
from ._policy import PacingPolicy
from ._values import ChargeOutcome, HookHealth, HookTarget, LedgerRow, Nudge

__all__ = [
    "ExplainedReceipt",
    "HistoryPort",
    "HookDirectory",
    "LedgerError",
    "LedgerPort",
    "NudgeNowResult",
    "OperatorPort",
    "WakeError",
    "WakePort",
    "WakeReceipt",
]

#: Resolves once a wake's fate is known: True when at least one receiver
#: answered 2xx, False when none did (every attempt failed or the transport
#: gave up on it). It never raises.
WakeReceipt = Awaitable[bool]


@runtime_checkable
class ExplainedReceipt(Protocol):
    """A receipt that also says why, once resolved: the dispatcher's do.

    ``detail`` is the last failure's text (None when delivered), and
    ``hook_disabled`` is True when that failure disabled a hook.
    """

    detail: str | None
    hook_disabled: bool


class LedgerError(Exception):
    """The ledger could not decide, charge or refund.

    Nothing was committed, except when the connection dropped after the
    commit: then the charges stand and only their wakes are lost, which the
    next backoff repairs.
    """


class WakeError(Exception):
    """The wake transport refused one nudge outright; the sweeper refunds its charge."""


class LedgerPort(Protocol):
    """The nudge ledger over the host's board of todos; it is also the sweep's clock."""

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        """Decide and charge, atomically, the pairs due for a nudge now.

        "Now" is read from the ledger's own time authority once this tick
        holds the fleet's tick lock; an instance that does not get the lock
        returns a skipped outcome and decides nothing. With ``every`` (a
        looping instance's interval), a tick that finds the fleet swept less
        than ``every`` ago skips too, so a fleet on any phases sweeps once an
        interval; each sweep is recorded (``ChargeOutcome.swept_at``). Decisions follow
        ``stall_core.plan_tick``: at most ``policy.tick_limit`` charges,
        least-nudged first; rows with progress left uncharged are reset
        (``reset_row``). The decision is re-checked against the ledger row as
        it stands when the charge is written, so a nudge another sweeper
        committed first is neither counted nor returned. Rows of pairs with no
        work (``work_of``) are cleared in the same call. Returns only
        once everything is committed; on failure raises ``LedgerError`` with
        nothing written. Never changes a todo.
        """
        ...

    async def refund(self, nudge: Nudge) -> bool:
        """Take back the charge of a nudge that reached no receiver; True if refunded.

        Follows ``stall_core.refunded_row``: compare-and-set on the row that
        nudge's charge wrote, so a later charge or a clear is never undone.
        Raises ``LedgerError`` when the ledger cannot be reached.
        """
        ...


class WakePort(Protocol):
    """The transport that turns one charged nudge into a consumer wake."""

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        """Take one todo.ready with reason "stalled" for delivery; return its receipt.

        Called only after the nudge's charge committed, on the instance that
        charged it. Raises ``WakeError`` when the transport cannot take the
        nudge at all; otherwise the receipt tells, later, whether it reached
        a receiver.
        """
        ...


class HookDirectory(Protocol):
    """The host's notify hooks, as the dispatcher needs them."""

    async def hooks_covering(self, endpoint_id: str, queue: str) -> Sequence[HookTarget]:
        """The endpoint's enabled hooks whose queue filter covers ``queue`` (None = all), by id."""
        ...

    async def record_success(self, hook_id: str) -> None:
        """Book a delivered message: the consecutive failure count goes back to 0."""
        ...

    async def record_successes(self, hook_ids: Collection[str]) -> None:
        """Book a batch of delivered messages at once: one round trip however many hooks."""
        ...

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        """Book a failed delivery atomically; the ``disable_after``-th in a row disables the hook.

        Disabling sets ``enabled`` false, ``disabled_at = at`` and
        ``disabled_reason = reason``; an already disabled hook keeps its
        original reason and time. Returns None when the hook no longer exists.
        """
        ...


class HistoryPort(Protocol):
    """Where each charge's outcome is kept; the ledger's history (``stall_core.HistoryEntry``)."""

    async def record_outcome(self, outcome: DeliveryOutcome) -> None:
        """Book the outcome on the charge's history entry, once: a second booking is ignored."""
        ...


@attrs.frozen(kw_only=True)
class NudgeNowResult:
    """What an operator's nudge now did: the tick it ran, and the pair's fate in it.

    ``decision`` is ``stall_core.nudge_now``'s (``Charge``: the pair was
    reset and the tick judged it), ``charged`` the pair's nudge if the tick
    charged it (None: held back by the tick limit, or it changed meanwhile).
    """

    outcome: ChargeOutcome
    decision: Charge | Idle | Wait
    charged: Nudge | None
    row: LedgerRow | None


class OperatorPort(Protocol):
    """What a person on call does to the ledger, each recorded with who, when and why.

    Each verb raises ``stall_core.NoSuchPair`` for an endpoint the host does
    not have, or a queue with no todo and no ledger row; ``LedgerError``
    when the ledger cannot be reached. Instants are the ledger's clock.
    """

    async def silence(
        self, endpoint_id: str, queue: str | None, *, lasting: timedelta, by: str, reason: str
    ) -> Silence:
        """Silence the pair (or every queue of the endpoint) for ``lasting``, replacing one."""
        ...

    async def unsilence(
        self, endpoint_id: str, queue: str | None, *, by: str, reason: str
    ) -> Silence | None:
        """End the silence on exactly this pair (or endpoint) now; None when none holds."""
        ...

    async def reset(
        self, endpoint_id: str, queue: str, *, by: str, reason: str
    ) -> LedgerRow | None:
        """Start the pair over (``reset_row``): its next nudge is nudge 1, due at once."""
        ...

    async def nudge_now(
        self, endpoint_id: str, queue: str, *, policy: PacingPolicy, by: str, reason: str
    ) -> NudgeNowResult:
        """Under the tick lock, reset the pair if ``nudge_now`` allows and run a tick with it."""
        ...

    async def silences(self) -> tuple[datetime, tuple[Silence, ...]]:
        """The ledger's now and every silence not ended yet, by endpoint and queue."""
        ...

    async def history(
        self,
        *,
        endpoint_id: str | None = None,
        queue: str | None = None,
        since: timedelta | None = None,
        limit: int = 1000,
    ) -> tuple[HistoryEntry, ...]:
        """The history, newest first, of one endpoint (and queue), within ``since``."""
        ...
