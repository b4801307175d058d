"""The ports the sweep drives. Adapters satisfy them structurally (no inheritance)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from ._policy import PacingPolicy
from ._values import ChargeOutcome, Nudge

__all__ = ["LedgerError", "LedgerPort", "WakeError", "WakePort"]


class LedgerError(Exception):
    """The ledger could not decide or charge.

    Nothing was committed, except when the connection dropped after the
    commit: then the charges stand and only their wakes are lost, which the
    next backoff repairs.
    """


class WakeError(Exception):
    """The wake transport refused one nudge (its charge stands: the next backoff retries)."""


class LedgerPort(Protocol):
    """The nudge ledger over the host's board of todos."""

    async def charge_due(self, *, now: datetime, policy: PacingPolicy) -> ChargeOutcome:
        """Decide and charge, atomically, the pairs due for a nudge at ``now``.

        Decisions follow ``stall_core.plan_tick``: at most ``policy.tick_limit``
        charges, least-nudged first. The decision is re-checked against the
        ledger row as it stands when the charge is written, so a nudge that
        another sweeper committed first is neither counted nor returned. Rows
        of pairs with no gate-passing pending todo are deleted in the same
        call. Returns only once everything is committed; on failure raises
        ``LedgerError`` with nothing written. Never changes a todo.
        """
        ...


class WakePort(Protocol):
    """The transport that turns one charged nudge into a consumer wake."""

    async def wake(self, nudge: Nudge) -> None:
        """Deliver (or queue for delivery) one todo.ready with reason "stalled".

        Called only after the nudge's charge committed, on the instance that
        charged it. Raises ``WakeError`` when the transport cannot take the
        nudge; the charge stands and the pair's next backoff retries.
        """
        ...
