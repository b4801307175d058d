"""``open_reaper``: the sweep as the sidecar runs it, for a host's own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import asyncpg

from adapters.http import DispatchStats, HookDispatcher
from adapters.postgres import (
    DATABASE_ERRORS,
    HOST_TABLES,
    BoundedPool,
    PostgresHooks,
    PostgresLedger,
    describe,
    missing_tables,
)
from stall_core import (
    Nudge,
    PacingPolicy,
    Sweeper,
    TickFailure,
    TickReport,
    WakeError,
    WakePort,
    WakeReceipt,
    positive_seconds,
)

from ._connect import StartupError, connect

__all__ = ["Reaper", "open_reaper"]

#: Seconds any one database call may take (the ledger's default).
TIMEOUT_S = 30.0
#: Seconds shutdown gives deliveries in flight: a retry may be 30 s away.
SHUTDOWN_DEADLINE_S = 45.0


class Reaper:
    """A running sweep: tick it yourself, or ``run`` it until ``stop`` is set.

    Built by ``open_reaper``; leaving that block shuts it down.
    """

    def __init__(
        self,
        *,
        sweeper: Sweeper,
        dispatcher: HookDispatcher,
        timeout: float,
        shutdown_deadline: float,
    ) -> None:
        self._sweeper = sweeper
        self._dispatcher = dispatcher
        self._timeout = timeout
        self._shutdown_deadline = shutdown_deadline

    @property
    def timeout(self) -> float:
        """Seconds any one database call may take."""
        return self._timeout

    @property
    def shutdown_deadline(self) -> float:
        """Seconds a graceful shutdown gives deliveries in flight."""
        return self._shutdown_deadline

    @property
    def tick_bound(self) -> float:
        """The most seconds a tick takes: the charge, then per nudge a hand-over and a refund."""
        return self._timeout * (1 + 2 * self._sweeper.policy.tick_limit)

    @property
    def stop_bound(self) -> float:
        """The most seconds from ``stop.set()`` to the end of the ``open_reaper`` block.

        The tick in progress, the shutdown deadline for deliveries, then
        the refunds of what reached nobody and the pool's close, one
        ``timeout`` each (refunds run side by side).
        """
        return self.tick_bound + self._shutdown_deadline + 2 * self._timeout

    @property
    def stats(self) -> DispatchStats:
        """The notify-hook dispatcher's counters since start."""
        return self._dispatcher.stats

    @property
    def refunded(self) -> int:
        """Nudges refunded since start (they reached no receiver)."""
        return self._sweeper.refunded

    @property
    def unrefunded(self) -> int:
        """Nudges that reached no receiver and whose refund failed (they count toward the cap)."""
        return self._sweeper.unrefunded

    async def tick(self) -> TickReport:
        """One tick; raises ``stall_core.LedgerError`` when the database fails it."""
        return await self._sweeper.tick()

    async def drain(self) -> None:
        """Wait until each nudge handed over so far has its outcome (retries included), refunded."""
        await self._dispatcher.drain()
        await self._sweeper.settle()

    async def run(
        self,
        *,
        interval: float | timedelta,
        stop: asyncio.Event,
        on_report: Callable[[TickReport], None] | None = None,
        on_error: Callable[[TickFailure], None] | None = None,
    ) -> int:
        """Tick every ``interval`` until ``stop`` is set; return the ticks run.

        Each tick goes to ``on_report``, a failed one to ``on_error``; a
        failed tick is logged and the loop goes on.
        """
        return await self._sweeper.run(
            interval=interval, stop=stop, on_report=on_report, on_error=on_error
        )

    async def _shut_down(self) -> None:
        """Let deliveries finish (at most the deadline), then refund what reached nobody."""
        await self._dispatcher.close(deadline=self._shutdown_deadline)
        # Receipts are all resolved now; each refund is one bounded ledger call.
        await self._sweeper.settle()

    async def _abandon(self) -> None:
        """Stop at once: no refunds, no waiting for deliveries."""
        await self._sweeper.abandon()
        await self._dispatcher.close(deadline=0)


class _BoundedWake:
    """The dispatcher as the sweep's wake port, each hand-over bounded by ``timeout`` seconds.

    A hand-over reads the pair's hooks and books the refused ones, one
    database call per hook; the bound covers them all, so a tick's worst
    case does not grow with the number of hooks. Past it the nudge counts
    as refused (and is refunded); nothing was queued, since queueing comes
    after the last database call.
    """

    def __init__(self, dispatcher: HookDispatcher, timeout: float) -> None:
        self._dispatcher = dispatcher
        self._timeout = timeout

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._dispatcher.wake(nudge)
        except TimeoutError:
            raise WakeError(
                f"handing {nudge.endpoint_id}/{nudge.queue} to the dispatcher timed out "
                f"after {self._timeout:g} s"
            ) from None


async def _check_tables(pool: asyncpg.Pool, within: float) -> None:
    """Refuse a database that lacks the host's tables or ours, naming what to run."""
    try:
        async with asyncio.timeout(within):
            async with pool.acquire() as conn:
                missing = await missing_tables(conn)
    except TimeoutError:
        raise StartupError(f"the start-up table check timed out after {within:g} s") from None
    except DATABASE_ERRORS as exc:
        raise StartupError(f"the start-up table check failed: {describe(exc)}") from None
    host = [t for t in missing if t in HOST_TABLES]
    if host:
        raise StartupError(
            f"host tables missing: {', '.join(host)} "
            "(for a demo or test database: stall-nudge migrate --host-schema)"
        )
    if missing:
        raise StartupError(
            f"stall-nudge's own tables missing: {', '.join(missing)} (run stall-nudge migrate)"
        )


@asynccontextmanager
async def _pool(database: str | asyncpg.Pool, call_timeout: float) -> AsyncIterator[asyncpg.Pool]:
    """The pool to use: one opened on a DSN is ours and closed after; the host's stays open."""
    if isinstance(database, str):
        async with connect(database, timeout=call_timeout) as pool:
            yield pool
    else:
        yield database


@asynccontextmanager
async def open_reaper(
    database: str | asyncpg.Pool,
    *,
    # Each database call's bound, not this call's: PostgresLedger(timeout=...) names it so.
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109
    shutdown_deadline: float = SHUTDOWN_DEADLINE_S,
    refuse_private: bool = False,
) -> AsyncIterator[Reaper]:
    """The sweep on ``database`` (a DSN, or the host's own asyncpg pool), ready to tick.

    - Every database call (a tick's charge, a refund, a hook lookup) takes
      at most ``timeout`` seconds, on the client and on the server.
    - It first checks the tables and raises ``StartupError`` (one line)
      when the host's or ours are missing or the database is unusable.
    - Leaving the block normally gives deliveries in flight
      ``shutdown_deadline`` seconds (retries included), refunds what
      reached nobody, and closes the pool it opened: at most
      ``Reaper.stop_bound`` seconds after ``stop`` is set.
    - Leaving on an exception, a cancellation included, returns at once:
      deliveries are abandoned, nudges not yet known to have reached a
      receiver keep their charge (one backoff step late, never work lost),
      and connections are cut off. Nothing is left running.
    - Hooks never reach link-local or metadata addresses; ``refuse_private``
      (multi-tenant deployments) also keeps them off loopback and private
      ranges, checked on the address actually connected to.

    A pool you pass stays yours: it is not closed. A connection the sweep
    was using when cancelled is cut off (a silent server would never
    acknowledge the cancel), never handed back mid-statement.
    """
    positive_seconds("timeout", timeout)
    if not 0 <= shutdown_deadline < float("inf"):
        raise ValueError(
            f"shutdown_deadline must be a number of seconds, got {shutdown_deadline!r}"
        )
    async with _pool(database, timeout) as pool:
        await _check_tables(pool, timeout)
        dispatcher = HookDispatcher(
            hooks=PostgresHooks(BoundedPool(pool, timeout)), refuse_private=refuse_private
        )
        sweeper = Sweeper(
            ledger=PostgresLedger(pool, timeout=timeout),
            wake=_BoundedWake(dispatcher, timeout),
            policy=PacingPolicy(),
        )
        reaper = Reaper(
            sweeper=sweeper,
            dispatcher=dispatcher,
            timeout=timeout,
            shutdown_deadline=shutdown_deadline,
        )
        await dispatcher.start()
        try:
            yield reaper
        except BaseException:
            await reaper._abandon()
            raise
        await reaper._shut_down()
        # Leaving _pool closes a pool it opened, within ``timeout`` (connect()).


def _conforms(wake: _BoundedWake) -> WakePort:
    """mypy checks here that the bounded wake satisfies the core's wake port."""
    return wake
