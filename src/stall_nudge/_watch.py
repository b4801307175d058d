"""The ports as the reaper's sweep uses them: the adapters, watched for an operator and bounded.

Each wrapper satisfies a port of the core and adds one thing a sidecar
needs and the core must not know: the ledger sets the wire clock and
counts its rows after each tick, the hook directory counts the hooks a
failure disables, and the dispatcher's hand-overs are bounded in time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from adapters.http import HookDispatcher
from adapters.postgres import (
    DATABASE_ERRORS,
    BoundedPool,
    PostgresHooks,
    PostgresLedger,
    describe,
    ledger_statements,
)
from stall_core import (
    ChargeOutcome,
    HookDirectory,
    HookHealth,
    HookTarget,
    LedgerError,
    LedgerPort,
    Nudge,
    PacingPolicy,
    TodoRef,
    WakeError,
    WakePort,
    WakeReceipt,
    format_seconds,
)

from ._tally import Tally
from ._wire_clock import WireClock

__all__ = ["BoundedDispatcher", "WatchedHooks", "WatchedLedger"]

log = logging.getLogger("stall_nudge.reaper")

_T = TypeVar("_T")

#: What reading the ledger after a tick may raise when the database fails.
_READ_ERRORS: tuple[type[BaseException], ...] = (LedgerError, *DATABASE_ERRORS)


class WatchedLedger:
    """The ledger as the reaper's sweeper drives it: each tick also reads for the operator.

    After each charge it sets the wire clock from the tick's ``now`` (read
    just after this host's clock), and counts the ledger's rows after a tick
    that can have changed how many there are (a charge or a clear), and at
    each full pass (for anything else: a hand edit, a migrate), so a quiet
    delta costs no count. Neither can fail the tick: a failure is one line
    at warning.
    """

    def __init__(
        self,
        ledger: PostgresLedger,
        *,
        pool: BoundedPool,
        clock: WireClock,
        tally: Tally,
    ) -> None:
        self._ledger = ledger
        self._pool = pool
        self._clock = clock
        self._tally = tally

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        asked_at = self._clock.host()
        outcome = await self._ledger.charge_due(policy=policy, every=every)
        self._clock.measured(outcome.now, asked_at)
        if not (outcome.charged or outcome.cleared or outcome.kind == "full"):
            return outcome
        try:
            counted = await self._pool.fetchrow(ledger_statements()["count_ledger_rows"])
            self._tally.ledger_rows = counted[0]
        except _READ_ERRORS as exc:
            log.warning("reading the ledger after the tick failed: %s", _reason(exc))
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        return await self._ledger.refund(nudge)


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, LedgerError) else describe(exc)


class WatchedHooks:
    """The hook directory as the dispatcher uses it, counting the hooks a failure disables."""

    def __init__(self, hooks: PostgresHooks, tally: Tally) -> None:
        self._hooks = hooks
        self._tally = tally

    async def hooks_covering(self, endpoint_id: str, queue: str) -> Sequence[HookTarget]:
        return await self._hooks.hooks_covering(endpoint_id, queue)

    async def record_success(self, hook_id: str) -> None:
        await self._hooks.record_success(hook_id)

    async def record_successes(self, hook_ids: Collection[str]) -> None:
        await self._hooks.record_successes(hook_ids)

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        health = await self._hooks.record_failure(
            hook_id, at=at, reason=reason, disable_after=disable_after
        )
        # The booking that reached the limit is the one that disabled the hook.
        if (
            health is not None
            and not health.enabled
            and health.consecutive_failures == disable_after
        ):
            self._tally.disables += 1
        return health


class BoundedDispatcher:
    """The dispatcher's hand-overs (the sweep's wakes, the host's notifies), each bounded in time.

    A hand-over reads the pair's hooks and books the refused ones, one
    database call per hook; the bound covers them all, so a tick's worst
    case does not grow with the number of hooks. Past it the wake counts as
    refused (a nudge is refunded); nothing was queued, since queueing comes
    after the last database call.
    """

    def __init__(self, dispatcher: HookDispatcher, timeout: float) -> None:
        self._dispatcher = dispatcher
        self._timeout = timeout

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        handing = f"handing {nudge.endpoint_id}/{nudge.queue} to the dispatcher"
        return await self._within(handing, self._dispatcher.wake(nudge))

    async def notify(self, *, endpoint_id: str, queue: str, todo: TodoRef, reason: str) -> int:
        call = self._dispatcher.notify(
            endpoint_id=endpoint_id, queue=queue, todo=todo, reason=reason
        )
        return await self._within(f"looking up the hooks of {endpoint_id}/{queue}", call)

    async def _within(self, what: str, call: Awaitable[_T]) -> _T:
        try:
            async with asyncio.timeout(self._timeout):
                return await call
        except TimeoutError:
            raise WakeError(f"{what} timed out after {format_seconds(self._timeout)}") from None


def _conforms(
    wake: BoundedDispatcher, ledger: WatchedLedger, hooks: WatchedHooks
) -> tuple[WakePort, LedgerPort, HookDirectory]:
    """mypy checks here that the wrappers satisfy the core's ports."""
    return wake, ledger, hooks
