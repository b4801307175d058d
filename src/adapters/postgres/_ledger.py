"""The Postgres nudge ledger: one tick lock, then one statement decides, charges and deletes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg
import attrs

from adapters.postgres.sql import expanded, queries, sendable, statements
from stall_core import (
    FULL_PASS_INTERVAL,
    QUARANTINE_QUEUE,
    ChargeOutcome,
    Clock,
    LedgerError,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    Progress,
    TodoRef,
    aware,
    full_pass_due,
    pair_status,
    positive_int,
    positive_seconds,
    swept_recently,
)

from ._errors import DATABASE_ERRORS, as_ledger_error
from ._pool import hand_back
from ._types import PooledConnection

if TYPE_CHECKING:
    from stall_core import LedgerPort

__all__ = [
    "COMPACT_AT",
    "TICKS",
    "TICK_LOCK_KEY",
    "FleetRecord",
    "PostgresLedger",
    "charge_due_parameters",
    "charge_outcome",
    "ledger_statements",
    "readable_statements",
]


@attrs.frozen(kw_only=True)
class FleetRecord:
    """The fleet's record of its sweeps, and the footprint they run in."""

    footprint: str
    swept_at: datetime | None
    #: The sweeping instances' interval; None until a looping instance swept.
    interval: timedelta | None
    full_pass_at: datetime | None
    #: How long the last full pass took; None before the first one.
    full_pass_took: timedelta | None

    @property
    def advice(self) -> tuple[str, ...]:
        """What an operator should know: a full pass taking more than a tenth of the interval."""
        if self.full_pass_took is None or not self.interval:
            return ()
        if self.full_pass_took * 10 <= self.interval:
            return ()
        return (
            f"the full pass took {self.full_pass_took / timedelta(milliseconds=1):.0f} ms,"
            f" more than a tenth of the {self.interval.total_seconds():g} s interval:"
            " consider --footprint incremental (docs/host-schema.md)",
        )


def fleet_record(r: asyncpg.Record) -> FleetRecord:
    """The FleetRecord of a ``sweep_record`` row."""
    return FleetRecord(
        footprint=r["footprint"],
        swept_at=r["swept_at"],
        interval=None if r["interval_ms"] is None else timedelta(milliseconds=r["interval_ms"]),
        full_pass_at=r["full_pass_at"],
        full_pass_took=None
        if r["full_pass_ms"] is None
        else timedelta(milliseconds=r["full_pass_ms"]),
    )


#: Each statement built from the parts of tick.sql, by name: the lean tick (every tick a
#: full pass), the incremental footprint's full pass and usual tick, and status.
TICKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tick_lean", ("find_every_pair", "judge", "report")),
    ("tick_full", ("find_every_pair", "judge", "keep_hints", "report")),
    (
        "tick_changed",
        ("find_changed", "find_backoff_ended", "find_held", "judge", "keep_hints", "report"),
    ),
    ("pair_status", ("find_every_pair", "count_pending", "status")),
)


def readable_statements() -> Mapping[str, str]:
    """Every statement the ledger sends, rules expanded and comments kept: what a reviewer reads.

    expanded/ holds them (a test keeps it current) and ``stall-nudge sql`` prints them.
    """
    return {
        **expanded("adapters.postgres", "ledger.sql"),
        **statements("adapters.postgres", "tick.sql", TICKS),
    }


_SQL = {
    **queries("adapters.postgres", "ledger.sql"),
    **sendable(statements("adapters.postgres", "tick.sql", TICKS)),
}


def ledger_statements() -> Mapping[str, str]:
    """Every statement the ledger sends, by name, as sent (harnesses build broken ones)."""
    return _SQL


_log = logging.getLogger(__name__)

#: The advisory lock key of the fleet's tick: b"stallnud" read as a big-endian bigint.
TICK_LOCK_KEY = int.from_bytes(b"stallnud", "big")
#: How many rows a log must hold for a tick to compact it first (about 3 to 7 s of
#: judging them on a slow machine, against the 30 s timeout).
COMPACT_AT = 1_000_000
#: About how many rows a block of either log holds: a compaction statement reads the
#: blocks of about COMPACT_AT / 20 rows.
ROWS_PER_BLOCK = 100


class PostgresLedger:
    """LedgerPort over switchboard's tables and our ``queue_stall_nudges``.

    Safe with any number of instances on one database. Each tick takes the
    fleet's transaction-level tick lock (an instance that misses it skips),
    reads the time after it, and charges in one statement whose snapshot
    therefore sees every earlier sweep's commit. The statement still
    compare-and-sets each row it charges on the row as locked, for older
    builds that sweep without the lock during a deploy.

    The database's clock is the time authority: the threshold, the backoff
    and progress (hosts stamp ``claimed_at`` with ``now()``) are all measured
    on it, so a sidecar's own clock never matters. ``clock`` replaces it for
    tests and the demo, which move time by hand. Every call is bounded by
    ``timeout`` seconds, on the client (a black-holed server) and on the
    server (statement and lock timeouts).

    What a tick reads follows the database's footprint, read each tick. Lean:
    every tick is a full pass over the host's rows (``tick_lean``), and
    progress is read from the todos' ``claimed_at``. Incremental: triggers log
    what changed, so a tick judges only those pairs (``tick_changed``), after
    a cheap test that there is one; every ``full_pass_interval`` one tick of
    the fleet judges every pair (``tick_full``), which repairs whatever the
    triggers could not see; progress is read from the claim log (commit
    order) and from ``claimed_at`` alike. Both kinds find pairs differently
    and judge them with one judging part (tick.sql).

    After a sweeper outage the incremental logs hold every claim and arrival
    since, and one statement reading them all may outlast the timeout, again
    on every tick. So a tick that finds ``compact_at`` rows in a log first
    compacts both (each pair's latest claim, its oldest change), a range of
    blocks per statement, for at most half its timeout, and commits that; it
    judges in a second transaction once the compaction got through, otherwise
    the next tick goes on with it. Compacting changes no decision.
    ``compact_for`` (seconds, under ``timeout``) replaces that half.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        clock: Clock | None = None,
        timeout: float = 30.0,
        full_pass_interval: timedelta = FULL_PASS_INTERVAL,
        compact_at: int = COMPACT_AT,
        compact_for: float | None = None,
    ) -> None:
        positive_seconds("timeout", timeout)
        if not full_pass_interval > timedelta(0):
            raise ValueError(f"full_pass_interval must be positive, got {full_pass_interval!r}")
        positive_int("compact_at", compact_at)
        if compact_for is not None and positive_seconds("compact_for", compact_for) >= timeout:
            raise ValueError(
                f"compact_for must be under timeout ({timeout!r}), got {compact_for!r}"
            )
        self._pool = pool
        self._clock = clock
        self._timeout = timeout
        self._full_pass_interval = full_pass_interval
        self._compact_at = compact_at
        #: Per log, the block its compaction goes on from; None: through, this round.
        self._compacting: dict[str, int | None] = {}
        self._compact_for = timeout / 2 if compact_for is None else compact_for
        self._footprint: str | None = None

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def footprint(self) -> str | None:
        """The database's footprint as the last tick read it (None before the first)."""
        return self._footprint

    @property
    def progress(self) -> Progress:
        """Commit order where the claim log is fed (incremental), else the todos' timestamps."""
        return Progress.COMMIT_ORDER if self._footprint == "incremental" else Progress.TIMESTAMPS

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        outcome = await self._tick(policy, every, may_compact=True)
        if outcome is None:  # the logs compacted through: judge them in a new transaction
            outcome = await self._tick(policy, every, may_compact=False)
        assert outcome is not None  # only a tick that may compact leaves the judging
        return outcome

    async def _tick(
        self, policy: PacingPolicy, every: timedelta | None, *, may_compact: bool
    ) -> ChargeOutcome | None:
        """One tick; None when it compacted the logs through and left the judging to a new one."""
        async with self._connection("charging due pairs", transaction=True) as conn:
            lock = await conn.fetchrow(
                _SQL["tick_lock"], TICK_LOCK_KEY, str(int(self._timeout * 1000))
            )
            assert lock is not None  # a SELECT with no FROM returns its one row
            got: bool = lock["got"]
            if got:
                lock = await conn.fetchrow(_SQL["tick_record"])
                assert lock is not None  # one row, as tick_lock's
            now = lock["now"] if self._clock is None else aware("clock()", self._clock())
            swept_at: datetime | None = lock["swept_at"]
            self._footprint = lock["footprint"]
            if not got:
                return ChargeOutcome(now=now, skipped=True, swept_at=swept_at)
            if swept_recently(swept_at, now, every):
                return ChargeOutcome(now=now, skipped=True, swept_at=swept_at)
            parameters = charge_due_parameters(now, policy)
            interval_ms = None if every is None else every / timedelta(milliseconds=1)
            if lock["footprint"] == "lean":
                statement = "tick_lean"
            else:
                threshold_us = parameters[1]
                if may_compact and await conn.fetchval(
                    _SQL["backlog"], now, threshold_us, self._compact_at
                ):
                    compacted = await self._compact(conn, now, threshold_us)
                    _log.info(
                        "a log held %d rows or more: compacted %s",
                        self._compact_at,
                        "through, judging next" if compacted else "in part, the next tick goes on",
                    )
                    return None if compacted else ChargeOutcome(now=now, swept_at=swept_at)
                if full_pass_due(lock["full_pass_at"], now, self._full_pass_interval):
                    statement = "tick_full"
                elif await conn.fetchval(_SQL["anything_to_judge"], *parameters[:4]):
                    statement = "tick_changed"
                else:
                    await conn.execute(_SQL["record_sweep"], now, interval_ms, None, None)
                    return ChargeOutcome(now=now, swept_at=now)
            loop = asyncio.get_running_loop()
            started = loop.time()
            rows = await conn.fetch(_SQL[statement], *parameters)
            full = statement != "tick_changed"
            took_ms = (loop.time() - started) * 1000 if full else None
            await conn.execute(
                _SQL["record_sweep"], now, interval_ms, now if full else None, took_ms
            )
        return charge_outcome(rows, now)

    async def _compact(self, conn: PooledConnection, now: datetime, threshold_us: object) -> bool:
        """One statement, then more for up to ``compact_for`` s; whether a round got through.

        A round is one pass over each log's blocks, a range per statement. Where
        a pass stopped is this instance's memory only, a hint: a range skipped
        (its tick rolled back) waits for the next round, or is judged whole.
        """
        loop = asyncio.get_running_loop()
        until = loop.time() + self._compact_for
        blocks = max(1, self._compact_at // (20 * ROWS_PER_BLOCK))
        ran = False
        for table, statement, arguments in (
            ("stall_nudge.claims", "compact_claims", ()),
            ("stall_nudge.changes", "compact_changes", (now, threshold_us)),
        ):
            first = self._compacting.get(table, 0)
            if first is None:  # through already, this round
                continue
            end = await conn.fetchval(_SQL["log_blocks"], table)
            while first < end:
                if ran and loop.time() > until:
                    self._compacting[table] = first
                    return False
                await conn.execute(_SQL[statement], *arguments, (first, 0), (first + blocks, 0))
                ran, first = True, first + blocks
            self._compacting[table] = None
        self._compacting.clear()
        return True

    async def refund(self, nudge: Nudge) -> bool:
        what = f"refunding {nudge.endpoint_id}/{nudge.queue}"
        async with self._connection(what, transaction=True) as conn:
            # Wait for the tick lock: a sweep in progress finishes first, and the next
            # one's snapshot sees the refund whole (its compare-and-set then holds).
            await conn.execute(_SQL["hold_tick"], TICK_LOCK_KEY)
            refunded = await conn.fetchval(
                _SQL["refund"], nudge.endpoint_id, nudge.queue, nudge.number, nudge.charged_at
            )
        return refunded is not None

    @asynccontextmanager
    async def hold_tick(self) -> AsyncIterator[None]:
        """Hold the fleet's tick lock (waiting for it first): every sweep skips meanwhile.

        For maintenance, and for tests that stand in for another instance
        mid-sweep. The wait for the lock is not bounded by ``timeout``.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            with as_ledger_error("taking the tick lock failed"):
                await conn.execute(_SQL["hold_tick"], TICK_LOCK_KEY)
            yield

    @asynccontextmanager
    async def _connection(
        self, what: str, *, transaction: bool = False
    ) -> AsyncIterator[PooledConnection]:
        """A pooled connection for at most ``timeout`` seconds in all, acquiring included.

        Past the deadline the connection is cut off, not rolled back (a
        black-holed server would never answer the ROLLBACK), and
        ``LedgerError`` says the tick timed out. Database errors are
        ``LedgerError`` naming ``what`` failed.
        """
        deadline = asyncio.get_running_loop().time() + self._timeout
        conn: PooledConnection | None = None
        # Set once the connection is known idle: only then is it handed back. Any
        # other way out (the deadline, a cancellation, even before BEGIN) cuts it
        # off, since a release waits for the server to acknowledge, which a
        # black-holed server never does.
        idle = False
        try:
            async with asyncio.timeout_at(deadline):
                with as_ledger_error(f"{what} failed"):
                    conn = await self._pool.acquire()
                    if not transaction:
                        yield conn
                        idle = True
                        return
                    tx = conn.transaction()
                    await tx.start()
                    try:
                        yield conn
                    except asyncio.CancelledError:
                        raise
                    except BaseException:
                        with contextlib.suppress(*DATABASE_ERRORS):
                            await tx.rollback()
                            idle = True
                        raise
                    await tx.commit()
                    idle = True
        except TimeoutError:
            raise LedgerError(f"{what} failed: timed out after {self._timeout:g} s") from None
        finally:
            if conn is not None:
                await hand_back(self._pool, conn, idle=idle, within=self._timeout)

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        """Every ledger row, keyed by pair."""
        with as_ledger_error("reading the ledger failed"):
            rows = await self._pool.fetch(_SQL["ledger_rows"])
        return {(r["endpoint_id"], r["queue"]): _ledger_row(r) for r in rows}

    async def fleet(self) -> FleetRecord:
        """The fleet's sweep record and footprint, as status and migrate --check show them."""
        async with self._connection("reading the fleet's sweep record") as conn:
            record = await conn.fetchrow(_SQL["sweep_record"])
        assert record is not None  # one row, even before the first sweep
        return fleet_record(record)

    async def status(self, *, policy: PacingPolicy) -> tuple[datetime, list[PairStatus]]:
        """Every pair with pending work or a ledger row, judged by the sweep's own decision.

        Returns the instant judged at, on the ledger's clock, with the pairs.
        """
        async with self._connection("reading the queue status") as conn:
            rows = await conn.fetch(_SQL["pair_status"], QUARANTINE_QUEUE)
            now = (
                await conn.fetchval(_SQL["now"])
                if self._clock is None
                else aware("clock()", self._clock())
            )
        return now, [
            pair_status(
                PairState(
                    endpoint_id=r["endpoint_id"],
                    queue=r["queue"],
                    oldest=None
                    if r["todo_id"] is None
                    else TodoRef(id=r["todo_id"], created_at=r["created_at"], title=r["title"]),
                    endpoint_active=r["endpoint_active"],
                    has_receiver=r["has_receiver"],
                    progress_at=r["progress_at"],
                ),
                None if r["nudges"] is None else _ledger_row(r),
                pending_gated=r["gated"],
                pending_ungated=r["ungated"],
                now=now,
                policy=policy,
                hook_failures=r["hook_failures"],
                hooks_disabled=r["hooks_disabled"],
            )
            for r in rows
        ]


def _ledger_row(r: asyncpg.Record) -> LedgerRow:
    return LedgerRow(
        endpoint_id=r["endpoint_id"],
        queue=r["queue"],
        nudges=r["nudges"],
        last_nudged_at=r["last_nudged_at"],
    )


def charge_outcome(rows: list[asyncpg.Record], now: datetime) -> ChargeOutcome:
    """The ChargeOutcome of a tick's result rows: charges in rank order, drains sorted."""
    charged = tuple(
        Nudge(
            endpoint_id=r["endpoint_id"],
            queue=r["queue"],
            todo=TodoRef(id=r["todo_id"], created_at=r["created_at"], title=r["title"]),
            number=r["nudges"],
            charged_at=r["last_nudged_at"],
        )
        for r in rows
        if r["kind"] == "charge"
    )
    drained = tuple(sorted((r["endpoint_id"], r["queue"]) for r in rows if r["kind"] == "drain"))
    return ChargeOutcome(now=now, charged=charged, drained=drained, swept_at=now)


def charge_due_parameters(now: datetime, policy: PacingPolicy) -> tuple[object, ...]:
    """$1..$6 of every tick statement: every number from the policy, none written twice.

    Durations go as whole microseconds: an interval with a days field would be
    added as calendar days in the session time zone.
    """
    return (
        now,
        _microseconds(policy.threshold),
        [_microseconds(step) for step in policy.backoff],
        policy.cap,
        policy.tick_limit,
        QUARANTINE_QUEUE,
    )


def _microseconds(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


def _conforms(ledger: PostgresLedger) -> LedgerPort:
    """mypy checks here that PostgresLedger satisfies the core's LedgerPort."""
    return ledger
