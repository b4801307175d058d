"""``open_reaper``: the sweep as the sidecar runs it, for a host's own event loop.

Theory of operation
-------------------
The reaper runs the core's ``Sweeper`` on the Postgres ledger and the HTTP
dispatcher, as ``_bootstrap`` wires them, and watches them for an operator:

- Each tick goes through ``WatchedLedger`` (``_watch``): it measures how
  far the database's clock is from this host's (the dispatcher stamps the
  wire with the database's time, ``_wire_clock``) and counts the ledger's
  rows. Each tick's result goes to a ``Tally`` (metrics, ``health``).
- ``open_reaper`` first refuses a database it cannot sweep (``_startup``).
- One setting, ``stop_timeout``, bounds everything from ``stop`` to the end
  of the block. The tick in progress and the deliveries in flight get all
  but a reserve (a quarter, at most one call's ``timeout``); refunds of the
  nudges that reached nobody get the rest, then the pool is closed or cut
  off. A shorter stop gives up deliveries still retrying first, then
  refunds: a nudge not refunded keeps its charge, which costs latency,
  never work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from importlib import metadata

import asyncpg

from adapters.http import DispatchStats
from adapters.postgres import HISTORY_RETENTION, LOOKBACK, Installed
from stall_core import (
    FULL_PASS_INTERVAL,
    Clock,
    DeliveryOutcome,
    HistoryEntry,
    LedgerRow,
    NudgeNowResult,
    PacingPolicy,
    PairStatus,
    Silence,
    TickFailure,
    TickReport,
    TodoRef,
    format_seconds,
    positive_seconds,
)

from ._bootstrap import TIMEOUT_S, Parts, bootstrap
from ._connect import close_pool
from ._logs import one_line_faults, start_line
from ._startup import check_database
from ._tally import Health, Tally
from ._wire_clock import read_clock

__all__ = ["Reaper", "open_reaper"]

log = logging.getLogger("stall_nudge.reaper")

#: Seconds from ``stop`` to the end of the ``open_reaper`` block, at most.
STOP_TIMEOUT_S = 60.0


def _version() -> str:
    try:
        return metadata.version("stall-nudge")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


class Reaper:
    """Runs the Sweeper's ticks on the host's cadence: tick it yourself, or ``run`` it.

    ``run`` ticks until ``stop`` is set. Built by ``open_reaper``; leaving
    that block shuts it down.
    """

    def __init__(self, *, parts: Parts, stop_timeout: float, schema: Installed) -> None:
        self._sweeper = parts.sweeper
        self._ledger = parts.ledger
        self._dispatcher = parts.dispatcher
        self._wake = parts.wake
        self._tally = parts.tally
        self._clock = parts.wire_clock
        self._timeout = parts.timeout
        self._stop_timeout = stop_timeout
        self._refuse_private = parts.refuse_private
        self._schema = schema
        self._interval: float | None = None
        self._running = False
        #: Monotonic time the stop began (None: not stopping).
        self._stop_began: float | None = None

    @property
    def timeout(self) -> float:
        """Seconds any one database call may take."""
        return self._timeout

    @property
    def stop_bound(self) -> float:
        """The most seconds from ``stop.set()`` to the end of the ``open_reaper`` block."""
        return self._stop_timeout

    @property
    def policy(self) -> PacingPolicy:
        return self._sweeper.policy

    @property
    def stats(self) -> DispatchStats:
        """The notify-hook dispatcher's counters since start."""
        return self._dispatcher.stats

    @property
    def delivered(self) -> int:
        """Nudges a receiver answered since start."""
        return self._sweeper.delivered

    @property
    def refunded(self) -> int:
        """Nudges refunded since start (they reached no receiver)."""
        return self._sweeper.refunded

    @property
    def unrefunded(self) -> int:
        """Nudges that reached no receiver and whose refund failed (they count toward the cap)."""
        return self._sweeper.unrefunded

    @property
    def tally(self) -> Tally:
        """Tick outcomes and durations, nudges by queue, ledger rows: what metrics report."""
        return self._tally

    @property
    def clock_offset(self) -> timedelta | None:
        """The database's clock minus this host's, as last measured (None: not yet)."""
        return self._clock.offset

    def health(self, *, interval: float | timedelta | None = None) -> Health:
        """Whether the loop runs, and whether the last tick succeeded within three intervals.

        ``interval`` defaults to the running loop's; give it when you tick by hand.
        """
        if isinstance(interval, timedelta):
            interval = interval.total_seconds()
        return self._tally.health(
            running=self._running and self._stop_began is None,
            interval=interval if interval is not None else self._interval,
            mono=time.monotonic(),
        )

    async def tick(self) -> TickReport:
        """One tick; raises ``stall_core.LedgerError`` when the database fails it."""
        started = time.monotonic()
        try:
            report = await self._sweeper.tick()
        except Exception as exc:
            self._record(
                TickFailure(
                    tick=self._sweeper.ticks,
                    error=str(exc).strip() or type(exc).__name__,
                    duration_s=time.monotonic() - started,
                )
            )
            raise
        self._record(report)
        return report

    async def status(self) -> tuple[datetime, list[PairStatus]]:
        """Every pair judged as the sweep judges it, on the database's clock (``status``)."""
        return await self._ledger.status(policy=self.policy)

    # -- what a person on call does: each recorded in the history, with who and why --------

    async def silence(
        self, endpoint_id: str, queue: str | None, *, lasting: timedelta, by: str, reason: str
    ) -> Silence:
        """Keep the pair (or every queue of the endpoint) from being charged for ``lasting``.

        A silenced pair is neither charged nor counted against the tick limit,
        and keeps its ledger row and count. Silencing again replaces the
        silence. Raises ``stall_core.NoSuchPair`` for a pair the host does not have.
        """
        return await self._ledger.silence(endpoint_id, queue, lasting=lasting, by=by, reason=reason)

    async def unsilence(
        self, endpoint_id: str, queue: str | None, *, by: str, reason: str = ""
    ) -> Silence | None:
        """End the silence of exactly this pair (or endpoint) now; None when none holds."""
        return await self._ledger.unsilence(endpoint_id, queue, by=by, reason=reason)

    async def reset(
        self, endpoint_id: str, queue: str, *, by: str, reason: str = ""
    ) -> LedgerRow | None:
        """Start a capped or backing-off pair over: the next tick charges it as nudge 1.

        Returns the row as reset; None when the pair has no row (its next
        nudge is a first one already).
        """
        return await self._ledger.reset(endpoint_id, queue, by=by, reason=reason)

    async def nudge(
        self, endpoint_id: str, queue: str, *, by: str, reason: str = ""
    ) -> tuple[NudgeNowResult, TickReport]:
        """Charge the pair now if it is a candidate, as a tick would, and hand over its wake.

        The tick runs under the fleet's tick lock, through the same statement,
        tick limit and delivery as every tick, so two operators and a running
        fleet wake the pair once (``stall_core.nudge_now`` says why not).
        ``settle()`` then waits for the delivery's outcome.
        """
        result = await self._ledger.nudge_now(
            endpoint_id, queue, policy=self.policy, by=by, reason=reason
        )
        return result, await self._sweeper.deliver(result.outcome)

    async def silences(self) -> tuple[datetime, tuple[Silence, ...]]:
        """The database's now and every silence not ended yet."""
        return await self._ledger.silences()

    async def history(
        self,
        *,
        endpoint_id: str | None = None,
        queue: str | None = None,
        since: timedelta | None = None,
        limit: int = 1000,
    ) -> tuple[HistoryEntry, ...]:
        """Charges with their outcomes and operator actions, newest first."""
        return await self._ledger.history(
            endpoint_id=endpoint_id, queue=queue, since=since, limit=limit
        )

    async def notify(self, *, endpoint_id: str, queue: str, todo: TodoRef, reason: str) -> int:
        """Send a ``todo.ready`` for ``reason`` (``created``, ``requeued``) to the pair's hooks.

        The reaper's own dispatcher sends it: signed, on the database's clock,
        retried and counted like a nudge. ``todo`` names the todo the wake is
        about; its title is sent, so it must pass the sender gate. Returns
        the deliveries queued (0: no enabled hook covers the queue). Raises
        ``stall_core.WakeError`` when the queue is full, the reaper is
        stopping, or the hook lookup takes more than ``timeout`` seconds.
        """
        return await self._wake.notify(
            endpoint_id=endpoint_id, queue=queue, todo=todo, reason=reason
        )

    async def settle(self) -> None:
        """Wait until each nudge handed over so far has its outcome (retries included), refunded."""
        await self._dispatcher.settle()
        await self._sweeper.settle()

    def start_fields(self, interval: float) -> dict[str, str]:
        """The facts of the start-up line, in order (``_logs.start_line``)."""
        refused = "link-local and metadata addresses"
        if self._refuse_private:
            refused += ", loopback, private and special-purpose ranges"
        return {
            "version": _version(),
            "schema version": str(self._schema.version),
            "host schema": self._schema.host_schema or "unknown",
            "interval": format_seconds(interval),
            "tick limit": str(self.policy.tick_limit),
            "hooks refused": refused,
            "stop within": format_seconds(self._stop_timeout),
        }

    async def run(
        self,
        *,
        interval: float | timedelta,
        stop: asyncio.Event,
        on_report: Callable[[TickReport], None] | None = None,
        on_error: Callable[[TickFailure], None] | None = None,
    ) -> int:
        """Tick every ``interval`` until ``stop`` is set; return the ticks run.

        Each tick goes to ``on_report``, a failed one to ``on_error``. A
        failed tick is logged once, by the library, in one line, and the loop
        goes on: use ``on_error`` to record or count it, not to log it again.
        Once ``stop`` is set, a tick still running past its share of
        ``stop_timeout`` is cut off: what it had not committed is rolled back,
        what it had keeps its charge.
        """
        seconds = positive_seconds(
            "interval", interval.total_seconds() if isinstance(interval, timedelta) else interval
        )
        if self._running:
            raise RuntimeError("the reaper is already running")
        self._interval, self._running = seconds, True
        log.info(start_line(self.start_fields(seconds)))
        before = sum(self._tally.ticks.values())

        def reported(report: TickReport) -> None:
            self._record(report)
            if on_report is not None:
                on_report(report)

        def failed(failure: TickFailure) -> None:
            self._record(failure)
            if on_error is not None:
                on_error(failure)

        sweep = asyncio.create_task(
            self._sweeper.run(interval=seconds, stop=stop, on_report=reported, on_error=failed),
            name="stall-nudge sweep",
        )
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({sweep, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                self._begin_stop()
                await self._finish_tick(sweep)
            else:
                await sweep  # the sweep ended without a stop: a bug, raised here
        finally:
            stopped.cancel()
            if not sweep.done():
                sweep.cancel()
            await asyncio.gather(sweep, stopped, return_exceptions=True)
            self._running = False
        return sum(self._tally.ticks.values()) - before

    async def _finish_tick(self, sweep: asyncio.Task[int]) -> None:
        """Let the tick in progress end within its share of the stop, else cut it off."""
        done, _ = await asyncio.wait({sweep}, timeout=self._until_deliveries_end())
        if not done:
            sweep.cancel()
            log.warning(
                "the tick in progress was cut off at the stop bound: what it had not "
                "committed is rolled back, what it had keeps its charge"
            )
            await asyncio.gather(sweep, return_exceptions=True)
        elif not sweep.cancelled():
            sweep.result()  # raises what the sweep raised (a bug)

    def _record(self, result: TickReport | TickFailure) -> None:
        self._tally.record(result, mono=time.monotonic())

    # -- the stop: one bound for all of it -------------------------------------------

    def _reserve(self) -> float:
        """Seconds of the stop kept for refunds and closing the pool."""
        return min(self._timeout, self._stop_timeout / 4)

    def _begin_stop(self) -> None:
        if self._stop_began is not None:
            return
        self._stop_began = time.monotonic()
        log.info(
            "stopping: the tick in progress and %d deliveries in flight get up to %s, "
            "then refunds of nudges that reached nobody the rest: all done within %s",
            self._dispatcher.outstanding,
            format_seconds(self._stop_timeout - self._reserve()),
            format_seconds(self._stop_timeout),
        )

    def _until_deliveries_end(self) -> float:
        assert self._stop_began is not None
        end = self._stop_began + self._stop_timeout - self._reserve()
        return max(0.0, end - time.monotonic())

    def _until_stop_ends(self) -> float:
        assert self._stop_began is not None
        return max(0.0, self._stop_began + self._stop_timeout - time.monotonic())

    async def _shut_down(self) -> None:
        """Deliveries first, then refunds, each within its share of ``stop_timeout``."""
        self._begin_stop()
        await self._dispatcher.close(deadline=self._until_deliveries_end())
        # Receipts are all resolved now; each refund is one bounded ledger call. The
        # bound stops the wait, not the refunds: ``abandon`` does, and counts the nudges
        # whose refund had not finished.
        try:
            async with asyncio.timeout(self._until_stop_ends()):
                await self._sweeper.settle()
        except TimeoutError:
            kept = await self._sweeper.abandon()
            log.warning(
                "refunds cut off at the stop bound: %d nudge(s) keep their charge "
                "(one backoff step late, never work lost)",
                kept,
            )
        except asyncio.CancelledError:
            await self._sweeper.abandon()
            raise

    async def _abandon(self) -> None:
        """Stop at once: no refunds, no waiting for deliveries."""
        await self._sweeper.abandon()
        await self._dispatcher.close(deadline=0)


@asynccontextmanager
async def open_reaper(
    database: str | asyncpg.Pool,
    *,
    clock: Clock | None = None,
    # Each database call's bound, not this call's: PostgresLedger(timeout=...) names it so.
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109
    stop_timeout: float = STOP_TIMEOUT_S,
    refuse_private: bool = False,
    lookback: timedelta = LOOKBACK,
    full_pass_interval: timedelta = FULL_PASS_INTERVAL,
    history_retention: timedelta = HISTORY_RETENTION,
    on_delivery: Callable[[DeliveryOutcome], None] | None = None,
) -> AsyncIterator[Reaper]:
    """The sweep on ``database`` (a DSN, or the host's own asyncpg pool), ready to tick.

    - Every database call (a tick's charge, a refund, a hook lookup) takes
      at most ``timeout`` seconds, on the client and on the server.
    - It first checks the tables and raises ``StartupError`` (one line)
      when the host's or ours are missing or the database is unusable.
    - Webhook timestamps (``sent_at``, ``webhook-timestamp``) come from the
      database's clock, measured at start and at every tick. ``clock``
      replaces the database's for decisions and the wire alike (the demo's
      accelerated time, tests).
    - Leaving the block normally takes at most ``stop_timeout`` seconds
      from ``stop.set()`` (or from leaving, without ``run``): deliveries in
      flight (retries included) get all but a reserve, refunds of what
      reached nobody the rest, then a pool it opened is closed or cut off.
    - Leaving on an exception, a cancellation included, returns at once:
      deliveries are abandoned, nudges not yet known to have reached a
      receiver keep their charge (one backoff step late, never work lost),
      and connections are cut off. Nothing is left running.
    - A usual tick judges what changed since the last one, reading the host's
      timestamps from ``lookback`` before it (a transaction still open then
      is seen); a full pass judges every pair at least every
      ``full_pass_interval`` (what no timestamp shows is seen within it).
    - Hooks never reach link-local or metadata addresses; ``refuse_private``
      (multi-tenant deployments) also keeps them off loopback, private and
      every other special-purpose range (``adapters.http.RANGES``), checked
      on the address actually connected to.
    - ``on_delivery`` gets each charged nudge's outcome (delivered, refused,
      gave up, hook disabled: ``stall_core.DeliveryOutcome``), the way
      ``run(on_report=...)`` gets each tick; the history keeps the same, for
      ``history_retention`` (pruned a little every tick).
    - While it is open, a database or network fault that asyncpg's pool or
      the dispatcher would log with a traceback is logged as one line.

    A pool you pass stays yours: it is not closed. A connection the sweep
    was using when cancelled is cut off (a silent server would never
    acknowledge the cancel), never handed back mid-statement.
    """
    positive_seconds("timeout", timeout)
    positive_seconds("stop_timeout", stop_timeout)
    with one_line_faults():
        async with bootstrap(
            database,
            clock=clock,
            timeout=timeout,
            lookback=lookback,
            full_pass_interval=full_pass_interval,
            refuse_private=refuse_private,
            history_retention=history_retention,
            on_delivery=on_delivery,
        ) as parts:
            schema = await check_database(parts.pool, timeout)
            if clock is None:
                await read_clock(parts.bounded, parts.wire_clock)
            reaper = Reaper(parts=parts, stop_timeout=stop_timeout, schema=schema)
            await parts.dispatcher.start()
            try:
                yield reaper
            except BaseException:
                await reaper._abandon()
                raise
            await reaper._shut_down()
            if parts.owns_pool:
                # What is left of the stop, or cut off now; connect()'s own close is then a no-op.
                await close_pool(parts.pool, reaper._until_stop_ends())
