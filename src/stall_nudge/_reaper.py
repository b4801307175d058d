"""``open_reaper``: the sweep as the sidecar runs it, for a host's own event loop.

Theory of operation
-------------------
The reaper wires the core's ``Sweeper`` to the Postgres ledger and the HTTP
dispatcher, and watches them for an operator:

- Each tick goes through ``_WatchedLedger``: it measures how far the
  database's clock is from this host's (the dispatcher stamps the wire with
  the database's time), counts the ledger's rows, and at debug says why
  every other pair was left alone. Each tick's result goes to a ``Tally``
  (metrics, ``health``).
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
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from importlib import metadata

import asyncpg

from adapters.http import DispatchStats, HookDispatcher
from adapters.postgres import (
    DATABASE_ERRORS,
    HOST_TABLES,
    SCHEMA_VERSION,
    BoundedPool,
    Installed,
    PostgresHooks,
    PostgresLedger,
    describe,
    installed,
    ledger_statements,
    missing_tables,
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
    PairStatus,
    Progress,
    Sweeper,
    TickFailure,
    TickReport,
    TodoRef,
    WakeError,
    WakePort,
    WakeReceipt,
    format_duration,
    positive_seconds,
    printable,
)

from ._connect import StartupError, close_pool, connect
from ._logs import one_line_faults, start_line
from ._pairs import by_urgency, why_not_nudged
from ._tally import Health, Tally

__all__ = ["Reaper", "open_reaper"]

log = logging.getLogger("stall_nudge.reaper")

#: Seconds any one database call may take (the ledger's default).
TIMEOUT_S = 30.0
#: Seconds from ``stop`` to the end of the ``open_reaper`` block, at most.
STOP_TIMEOUT_S = 60.0
#: Pairs a tick explains at debug, the most urgent first.
EXPLAIN_LIMIT = 100
#: What reading the ledger after a tick may raise when the database fails.
_READ_ERRORS: tuple[type[BaseException], ...] = (LedgerError, *DATABASE_ERRORS)


def _version() -> str:
    try:
        return metadata.version("stall-nudge")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


def _seconds(value: float) -> str:
    return format_duration(timedelta(seconds=value))


class _WireClock:
    """This host's clock moved onto the database's: ``sent_at`` and ``webhook-timestamp``.

    Until the database first answers, it is this host's own clock.
    """

    def __init__(self) -> None:
        self.offset: timedelta | None = None

    def __call__(self) -> datetime:
        return datetime.now(UTC) + (self.offset or timedelta(0))

    def measured(self, database_now: datetime, asked_at: datetime) -> None:
        """Take the database's ``now``, read just after this host's ``asked_at``."""
        first = self.offset is None
        self.offset = database_now - asked_at
        if first:
            self._say()

    def _say(self) -> None:
        assert self.offset is not None
        # Info, not a warning: the wire is right whatever this host's clock says (the
        # offset gauge is there to alert on).
        ahead = round(-self.offset.total_seconds())
        where = (
            "in step with it"
            if not ahead
            else f"{abs(ahead)} s {'ahead' if ahead > 0 else 'behind'}"
        )
        log.info("wire clock: the database's (this host is %s)", where)


class Reaper:
    """A running sweep: tick it yourself, or ``run`` it until ``stop`` is set.

    Built by ``open_reaper``; leaving that block shuts it down.
    """

    def __init__(
        self,
        *,
        sweeper: Sweeper,
        ledger: PostgresLedger,
        dispatcher: HookDispatcher,
        tally: Tally,
        clock: _WireClock,
        timeout: float,
        stop_timeout: float,
        refuse_private: bool,
        schema: Installed,
    ) -> None:
        self._sweeper = sweeper
        self._ledger = ledger
        self._dispatcher = dispatcher
        self._tally = tally
        self._clock = clock
        self._timeout = timeout
        self._stop_timeout = stop_timeout
        self._refuse_private = refuse_private
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

    async def notify(self, *, endpoint_id: str, queue: str, todo: TodoRef, reason: str) -> int:
        """Send a ``todo.ready`` for ``reason`` (``created``, ``requeued``) to the pair's hooks.

        The reaper's own dispatcher sends it: signed, on the database's clock,
        retried and counted like a nudge. ``todo`` names the todo the wake is
        about; its title is sent, so it must pass the sender gate. Returns
        the deliveries queued (0: no enabled hook covers the queue). Raises
        ``stall_core.WakeError`` when the queue is full, the reaper is
        stopping, or the hook lookup takes more than ``timeout`` seconds.
        """
        try:
            async with asyncio.timeout(self._timeout):
                return await self._dispatcher.notify(
                    endpoint_id=endpoint_id, queue=queue, todo=todo, reason=reason
                )
        except TimeoutError:
            raise WakeError(
                f"looking up the hooks of {endpoint_id}/{queue} timed out after {self._timeout:g} s"
            ) from None

    async def drain(self) -> None:
        """Wait until each nudge handed over so far has its outcome (retries included), refunded."""
        await self._dispatcher.drain()
        await self._sweeper.settle()

    def start_fields(self, interval: float) -> dict[str, str]:
        """The facts of the start-up line, in order (``_logs.start_line``)."""
        refused = "link-local and metadata addresses"
        if self._refuse_private:
            refused += ", loopback and private ranges"
        return {
            "version": _version(),
            "schema version": str(self._schema.version),
            "footprint": self._schema.footprint,
            "interval": _seconds(interval),
            "tick limit": str(self.policy.tick_limit),
            "hooks refused": refused,
            "stop within": _seconds(self._stop_timeout),
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
            _seconds(self._stop_timeout - self._reserve()),
            _seconds(self._stop_timeout),
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
        # shield keeps the bound from cancelling the refunds themselves: ``abandon``
        # does, and counts the nudges whose refund had not finished.
        settling = asyncio.ensure_future(self._sweeper.settle())
        try:
            async with asyncio.timeout(self._until_stop_ends()):
                await asyncio.shield(settling)
        except TimeoutError:
            kept = await self._sweeper.abandon()
            log.warning(
                "refunds cut off at the stop bound: %d nudge(s) keep their charge "
                "(one backoff step late, never work lost)",
                kept,
            )
        finally:
            settling.cancel()  # a no-op once settled; cancelled from outside, it cuts them off
            await asyncio.gather(settling, return_exceptions=True)

    async def _abandon(self) -> None:
        """Stop at once: no refunds, no waiting for deliveries."""
        await self._sweeper.abandon()
        await self._dispatcher.close(deadline=0)


class _WatchedLedger:
    """The ledger as the reaper's sweeper drives it: each tick also reads for the operator.

    After each charge it sets the wire clock from the tick's ``now`` (read
    just after this host's clock), counts the ledger's rows, and at debug
    logs why each pair it did not nudge waits. None of that can fail the
    tick: a failure is one line at warning.
    """

    def __init__(
        self,
        ledger: PostgresLedger,
        *,
        pool: BoundedPool,
        clock: _WireClock,
        tally: Tally,
    ) -> None:
        self._ledger = ledger
        self._pool = pool
        self._clock = clock
        self._tally = tally

    @property
    def progress(self) -> Progress:
        return self._ledger.progress

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        asked_at = datetime.now(UTC)
        outcome = await self._ledger.charge_due(policy=policy, every=every)
        self._clock.measured(outcome.now, asked_at)
        try:
            counted = await self._pool.fetchrow(ledger_statements()["count_ledger_rows"])
            self._tally.ledger_rows = counted[0]
            if not outcome.skipped and log.isEnabledFor(logging.DEBUG):
                await self._explain(outcome, policy)
        except _READ_ERRORS as exc:
            log.warning("reading the ledger after the tick failed: %s", _reason(exc))
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        return await self._ledger.refund(nudge)

    async def _explain(self, outcome: ChargeOutcome, policy: PacingPolicy) -> None:
        _, pairs = await self._ledger.status(policy=policy)
        charged = {nudge.key for nudge in outcome.charged}
        waiting = [p for p in by_urgency(pairs, policy) if (p.endpoint_id, p.queue) not in charged]
        limited = len(outcome.charged) >= policy.tick_limit
        for pair in waiting[:EXPLAIN_LIMIT]:
            log.debug(
                "%s/%s not nudged: %s",
                printable(pair.endpoint_id),
                printable(pair.queue),
                why_not_nudged(pair, policy=policy, limited=limited),
                extra={"endpoint": printable(pair.endpoint_id), "queue": printable(pair.queue)},
            )
        if len(waiting) > EXPLAIN_LIMIT:
            log.debug("%d more pairs not nudged, less urgent", len(waiting) - EXPLAIN_LIMIT)


class _WatchedHooks:
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


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, LedgerError) else describe(exc)


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


async def _schema(conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record]) -> Installed:
    """What the database records of ours, for the start-up line.

    A role that may not read our schema learns so at its first tick, in one
    line; the start-up line then says the footprint is unknown.
    """
    try:
        schema = await installed(conn)
    except asyncpg.InsufficientPrivilegeError:
        return Installed(version=SCHEMA_VERSION, footprint="unknown (no right to read it)")
    return schema if schema is not None else Installed(version=0, footprint="none")


async def _check_tables(pool: asyncpg.Pool, within: float) -> Installed:
    """Refuse a database that lacks the host's tables or ours, naming what to run.

    Returns the schema version and footprint the database records, for the
    start-up line.
    """
    try:
        async with asyncio.timeout(within):
            async with pool.acquire() as conn:
                missing = await missing_tables(conn)
                schema = None if missing else await _schema(conn)
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
    assert schema is not None  # read once nothing is missing
    if schema.version < SCHEMA_VERSION:
        raise StartupError(
            f"schema version {schema.version}, this build needs {SCHEMA_VERSION} "
            "(run stall-nudge migrate)"
        )
    return schema


async def _read_clock(pool: BoundedPool, clock: _WireClock) -> None:
    """Measure the wire clock at start; without an answer, say which clock the wire gets."""
    asked_at = datetime.now(UTC)
    try:
        row = await pool.fetchrow(ledger_statements()["now"])
    except DATABASE_ERRORS as exc:
        log.warning(
            "wire clock: this host's until a tick reads the database's (reading it failed: %s)",
            describe(exc),
        )
        return
    clock.measured(row[0], asked_at)


@asynccontextmanager
async def _pool(
    database: str | asyncpg.Pool, call_timeout: float
) -> AsyncIterator[tuple[asyncpg.Pool, bool]]:
    """The pool to use, and whether it is ours: one opened on a DSN; the host's stays open."""
    if isinstance(database, str):
        async with connect(database, timeout=call_timeout) as pool:
            yield pool, True
    else:
        yield database, False


@asynccontextmanager
async def open_reaper(
    database: str | asyncpg.Pool,
    *,
    # Each database call's bound, not this call's: PostgresLedger(timeout=...) names it so.
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109
    stop_timeout: float = STOP_TIMEOUT_S,
    refuse_private: bool = False,
) -> AsyncIterator[Reaper]:
    """The sweep on ``database`` (a DSN, or the host's own asyncpg pool), ready to tick.

    - Every database call (a tick's charge, a refund, a hook lookup) takes
      at most ``timeout`` seconds, on the client and on the server.
    - It first checks the tables and raises ``StartupError`` (one line)
      when the host's or ours are missing or the database is unusable.
    - Webhook timestamps (``sent_at``, ``webhook-timestamp``) come from the
      database's clock, measured at start and at every tick.
    - Leaving the block normally takes at most ``stop_timeout`` seconds
      from ``stop.set()`` (or from leaving, without ``run``): deliveries in
      flight (retries included) get all but a reserve, refunds of what
      reached nobody the rest, then a pool it opened is closed or cut off.
    - Leaving on an exception, a cancellation included, returns at once:
      deliveries are abandoned, nudges not yet known to have reached a
      receiver keep their charge (one backoff step late, never work lost),
      and connections are cut off. Nothing is left running.
    - Hooks never reach link-local or metadata addresses; ``refuse_private``
      (multi-tenant deployments) also keeps them off loopback and private
      ranges, checked on the address actually connected to.
    - While it is open, a database or network fault that asyncpg's pool or
      the dispatcher would log with a traceback is logged as one line.

    A pool you pass stays yours: it is not closed. A connection the sweep
    was using when cancelled is cut off (a silent server would never
    acknowledge the cancel), never handed back mid-statement.
    """
    positive_seconds("timeout", timeout)
    positive_seconds("stop_timeout", stop_timeout)
    with one_line_faults():
        async with _pool(database, timeout) as (pool, ours):
            schema = await _check_tables(pool, timeout)
            bounded = BoundedPool(pool, timeout)
            tally, clock = Tally(), _WireClock()
            await _read_clock(bounded, clock)
            dispatcher = HookDispatcher(
                hooks=_WatchedHooks(PostgresHooks(bounded), tally),
                clock=clock,
                refuse_private=refuse_private,
            )
            ledger = PostgresLedger(pool, timeout=timeout)
            sweeper = Sweeper(
                ledger=_WatchedLedger(ledger, pool=bounded, clock=clock, tally=tally),
                wake=_BoundedWake(dispatcher, timeout),
                policy=PacingPolicy(),
            )
            reaper = Reaper(
                sweeper=sweeper,
                ledger=ledger,
                dispatcher=dispatcher,
                tally=tally,
                clock=clock,
                timeout=timeout,
                stop_timeout=stop_timeout,
                refuse_private=refuse_private,
                schema=schema,
            )
            await dispatcher.start()
            try:
                yield reaper
            except BaseException:
                await reaper._abandon()
                raise
            await reaper._shut_down()
            if ours:
                # What is left of the stop, or cut off now; connect()'s own close is then a no-op.
                await close_pool(pool, reaper._until_stop_ends())


def _conforms(
    wake: _BoundedWake, ledger: _WatchedLedger, hooks: _WatchedHooks
) -> tuple[WakePort, LedgerPort, HookDirectory]:
    """mypy checks here that the reaper's wrappers satisfy the core's ports."""
    return wake, ledger, hooks
