"""The ports the sweep drives. Adapters satisfy them structurally (no inheritance)."""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from ._policy import PacingPolicy
from ._values import ChargeOutcome, HookHealth, HookTarget, Nudge

__all__ = ["HookDirectory", "LedgerError", "LedgerPort", "WakeError", "WakePort", "WakeReceipt"]

#: Resolves once a wake's fate is known: True when at least one receiver
#: answered 2xx, False when none did (every attempt failed or the transport
#: gave up on it). It never raises.
WakeReceipt = Awaitable[bool]


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
