"""The Postgres nudge ledger: one tick lock, then one statement judges, charges and deletes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import asyncpg
import attrs

from adapters.postgres.sql import queries
from stall_core import (
    CLAIMS_LOOKBACK,
    FULL_PASS_INTERVAL,
    QUARANTINE_QUEUE,
    REACHED_NOBODY,
    RECENT_OUTCOMES,
    Charge,
    ChargeOutcome,
    Claim,
    Clock,
    DeliveryOutcome,
    HistoryEntry,
    LedgerError,
    LedgerRow,
    NoSuchPair,
    Nudge,
    NudgeNowResult,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    Silence,
    TodoRef,
    Unreadable,
    aware,
    claims_window,
    format_duration,
    format_seconds,
    full_pass_due,
    nudge_now,
    nudge_now_detail,
    pair_status,
    positive_seconds,
    silenced_until,
    swept_recently,
)

from ._errors import DATABASE_ERRORS, as_ledger_error
from ._pool import NOT_MIGRATED, hand_back
from ._types import PooledConnection

if TYPE_CHECKING:
    from stall_core import HistoryPort, LedgerPort, OperatorPort

__all__ = [
    "DELTA_BOUND",
    "HISTORY_RETENTION",
    "LOOKBACK",
    "PRUNE_BATCH",
    "TICK_LOCK_KEY",
    "FleetRecord",
    "PostgresLedger",
    "charge_due_parameters",
    "charge_outcome",
    "ledger_statements",
]

_log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class FleetRecord:
    """The fleet's record of its sweeps (database time), as ``status`` shows it."""

    swept_at: datetime | None
    #: The sweeping instances' interval; None until a looping instance swept.
    interval: timedelta | None
    #: What the last tick judged ("delta" or "full") and how many pairs.
    last_kind: str | None
    last_judged: int | None
    full_pass_at: datetime | None
    #: How long the last full pass took, and how many pairs it judged.
    full_pass_took: timedelta | None
    full_pass_pairs: int | None


def fleet_record(r: asyncpg.Record) -> FleetRecord:
    """The FleetRecord of a ``sweep_record`` row."""
    return FleetRecord(
        swept_at=r["swept_at"],
        interval=None if r["interval_ms"] is None else timedelta(milliseconds=r["interval_ms"]),
        last_kind=r["last_kind"],
        last_judged=r["last_judged"],
        full_pass_at=r["full_pass_at"],
        full_pass_took=None
        if r["full_pass_ms"] is None
        else timedelta(milliseconds=r["full_pass_ms"]),
        full_pass_pairs=r["full_pass_pairs"],
    )


_SQL = {**queries("adapters.postgres", "ledger.sql"), **queries("adapters.postgres", "tick.sql")}


def ledger_statements() -> Mapping[str, str]:
    """Every statement the ledger sends, by name, as sent."""
    return _SQL


#: The advisory lock key of the fleet's tick: b"stallnud" read as a big-endian bigint.
TICK_LOCK_KEY = int.from_bytes(b"stallnud", "big")
#: A delta reads at most this many changes (or as many as the last full pass judged pairs,
#: if more); past that a full pass costs less (after an outage, say).
DELTA_BOUND = 1000
#: How far before the last judging tick a delta reads the host's timestamps again (the
#: claims window's lookback, stall_core.CLAIMS_LOOKBACK): a claim or an arrival committed
#: up to this long after it was stamped is still seen. What it costs: each tick reads this
#: much of the board's claims and arrivals again (one index entry and one probe each).
LOOKBACK = CLAIMS_LOOKBACK
#: How long the history keeps a charge or an action, and an ended silence.
HISTORY_RETENTION = timedelta(days=7)
#: The most history rows (and, apart, ended silences) one tick deletes: pruning is bounded
#: work a tick, and a week's backlog after an outage goes in a few hundred ticks.
PRUNE_BATCH = 100


class PostgresLedger:
    """LedgerPort over switchboard's tables and our ``queue_stall_nudges``.

    Safe with any number of instances on one database. Each tick takes the
    fleet's transaction-level tick lock (an instance that misses it skips),
    reads the time after it, and judges in one statement whose snapshot
    therefore sees every earlier sweep's commit. The statement still
    compare-and-sets each row it writes on the row as locked, for older
    builds that sweep without the lock during a deploy.

    A usual tick, a delta (``tick_changed``, then ``tick_judge``), judges only
    the pairs whose decision can have changed since the last judging tick, found from the host's own
    timestamps since a watermark (that tick's ``now`` less ``lookback``, so a
    transaction still open then is seen), the rows whose backoff ended, the
    pairs the tick limit held back, and the rows nudged since the last full
    pass whose named todo departed. What no timestamp shows (a delete, a
    change of endpoint, hook or verification, a row written with an old
    stamp) waits for the full pass (``tick_full``), which judges every pair:
    at this ledger's first tick, every ``full_pass_interval``, whenever the
    watermark cannot be trusted (a clock gone back), and when a bounded
    count finds more changes than a full pass judges pairs (an outage).

    The database's clock is the time authority: the threshold, the backoff
    and progress are all measured on it, so a sidecar's own clock never
    matters. ``clock`` replaces it for tests and the demo, which move time
    by hand. Every call is bounded by ``timeout`` seconds, on the client (a
    black-holed server) and on the server (statement and lock timeouts).
    Every transaction resolves names in pg_catalog and our schema alone,
    and reads the host's tables through migrate's views of them (``guest``).

    ``lock_key`` is the seam for tests of what holds without the fleet's
    lock: an instance given another key sweeps beside the fleet, as an
    older build without the lock would during a deploy, and only the
    compare-and-set of each write keeps a wake from being charged twice.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        clock: Clock | None = None,
        timeout: float = 30.0,
        full_pass_interval: timedelta = FULL_PASS_INTERVAL,
        lookback: timedelta = LOOKBACK,
        lock_key: int = TICK_LOCK_KEY,
        history_retention: timedelta = HISTORY_RETENTION,
    ) -> None:
        positive_seconds("timeout", timeout)
        if not full_pass_interval > timedelta(0):
            raise ValueError(f"full_pass_interval must be positive, got {full_pass_interval!r}")
        if not isinstance(lookback, timedelta) or lookback < timedelta(0):
            raise ValueError(f"lookback must be a timedelta of 0 or more, got {lookback!r}")
        self._pool = pool
        self._clock = clock
        self._timeout = timeout
        self._full_pass_interval = full_pass_interval
        self._lookback = lookback
        self._lock_key = lock_key
        if not isinstance(history_retention, timedelta) or not history_retention > timedelta(0):
            raise ValueError(f"history_retention must be positive, got {history_retention!r}")
        self._history_retention = history_retention
        #: Whether this instance has judged yet: its first tick is a full pass.
        self._started = False

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def lookback(self) -> timedelta:
        return self._lookback

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        async with self._connection("charging due pairs", transaction=True) as conn:
            lock = await conn.fetchrow(
                _SQL["tick_lock"], self._lock_key, str(int(self._timeout * 1000))
            )
            assert lock is not None  # a SELECT with no FROM returns its one row
            got: bool = lock["got"]
            if got:
                lock = await conn.fetchrow(_SQL["tick_record"])
                assert lock is not None  # one row, as tick_lock's
            now = lock["now"] if self._clock is None else aware("clock()", self._clock())
            if not got or swept_recently(lock["swept_at"], now, every):
                return ChargeOutcome(now=now, skipped=True, swept_at=lock["swept_at"])
            if lock["host_schema"] is None:
                raise LedgerError(NOT_MIGRATED)
            outcome = await self._tick(conn, lock, now, policy, every)
        self._started = True
        return outcome

    async def _tick(
        self,
        conn: PooledConnection,
        lock: asyncpg.Record,
        now: datetime,
        policy: PacingPolicy,
        every: timedelta | None,
        also: PairKey | None = None,
    ) -> ChargeOutcome:
        """One tick with the tick lock held: judge, charge, book the charges, prune, record.

        ``also`` is a pair a delta judges whatever its finder found (an
        operator's nudge now, which prunes nothing: its process's retention
        need not be the fleet's).
        """
        parameters = charge_due_parameters(now, policy)
        loop = asyncio.get_running_loop()
        started = loop.time()
        since = claims_window(lock["judged_to"], now, self._lookback)
        last_read = (lock["claims_read_ids"] or [], lock["claims_read_at"] or [])
        changed = None
        ended = lock["silence_ends"]
        if ended is None or ended > now:
            changed = await self._changed(conn, lock, now, parameters, since, last_read)
        rows = []
        if changed is None:
            kind = "full"
            rows = await conn.fetch(_SQL["judge"], *parameters, None, None, since, *last_read)
            read = _claims(rows)
        else:
            kind = "delta"
            pairs, read = changed
            if also is not None and also not in set(zip(*pairs, strict=True)):
                pairs = ([*pairs[0], also[0]], [*pairs[1], also[1]])
            if pairs[0]:
                rows = await conn.fetch(_SQL["judge"], *parameters, *pairs, since, *last_read)
                # Claims committed since find_changed count only in the pairs judged
                # here; elsewhere they stay new for the next tick.
                judged = set(zip(*pairs, strict=True))
                read |= _claims(r for r in rows if (r["endpoint_id"], r["queue"]) in judged)
        took_ms = (loop.time() - started) * 1000
        outcome = charge_outcome(rows, now, kind)
        if outcome.charged:
            c = outcome.charged
            await conn.execute(
                _SQL["history_charges"],
                [n.endpoint_id for n in c],
                [n.queue for n in c],
                [n.number for n in c],
                [n.todo.id for n in c],
                now,
            )
        if also is None:  # an operator's nudge keeps whatever retention the fleet runs with
            await conn.execute(_SQL["prune"], now - self._history_retention, PRUNE_BATCH)
        interval_ms = None if every is None else every / timedelta(milliseconds=1)
        read_ids, read_at = zip(*read, strict=True) if read else ((), ())
        await conn.execute(
            _SQL["record_tick"],
            now,
            interval_ms,
            kind,
            outcome.judged,
            took_ms,
            list(read_ids),
            list(read_at),
        )
        took = format_duration(timedelta(milliseconds=took_ms))
        _log.debug("tick: %s pass judged %d pair(s) in %s", kind, outcome.judged, took)
        return outcome

    async def _changed(
        self,
        conn: PooledConnection,
        record: asyncpg.Record,
        now: datetime,
        parameters: tuple[object, ...],
        since: datetime,
        last_read: tuple[list[str], list[datetime]],
    ) -> tuple[tuple[list[str], list[str]], set[Claim]] | None:
        """The pairs whose decision can have changed (endpoint ids, queues) and the claims read.

        None: a full pass. It finds and judges every pair in one statement
        (``judge`` given no pairs), so every pair is found in the snapshot
        that judges it. ``since`` is the claims window, ``last_read`` the
        claims the last tick read (ids, stamps).
        """
        judged_to: datetime | None = record["judged_to"]
        full_pass_at: datetime | None = record["full_pass_at"]
        if (
            not self._started
            or judged_to is None
            or full_pass_at is None
            or now < judged_to
            or full_pass_due(full_pass_at, now, self._full_pass_interval)
        ):
            return None
        bound = max(record["full_pass_pairs"] or 0, DELTA_BOUND)
        found = await conn.fetchrow(
            _SQL["find_changed"],
            *parameters,
            since,
            full_pass_at - self._lookback,
            bound,
            *last_read,
        )
        assert found is not None  # an aggregate's one row
        if found["overflow"]:
            _log.info(
                "%d change(s) or more since the last tick, more than a full pass judges "
                "pairs: this tick is a full pass",
                bound,
            )
            return None
        read = set(zip(found["read_ids"], found["read_at"], strict=True))
        return (found["endpoint_ids"], found["queues"]), read

    async def refund(self, nudge: Nudge) -> bool:
        what = f"refunding {nudge.endpoint_id}/{nudge.queue}"
        async with self._connection(what, transaction=True) as conn:
            await _guest(conn)
            # Wait for the tick lock: a sweep in progress finishes first, and the next
            # one's snapshot sees the refund whole (its compare-and-set then holds).
            await conn.execute(_SQL["hold_tick"], self._lock_key)
            refunded = await conn.fetchval(
                _SQL["refund"],
                nudge.endpoint_id,
                nudge.queue,
                nudge.number,
                nudge.charged_at,
                nudge.todo.id,
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
                await conn.execute(_SQL["hold_tick"], self._lock_key)
            yield

    @asynccontextmanager
    async def _connection(
        self, what: str, *, transaction: bool = False
    ) -> AsyncIterator[PooledConnection]:
        """A pooled connection in a transaction for at most ``timeout`` s, acquiring included.

        Past the deadline the connection is cut off, not rolled back (a
        black-holed server would never answer the ROLLBACK), and
        ``LedgerError`` says the tick timed out. Database errors are
        ``LedgerError`` naming ``what`` failed. Without ``transaction`` the
        block runs in a read-only one.
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
                    tx = conn.transaction(readonly=not transaction)
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
            took = format_seconds(self._timeout)
            raise LedgerError(f"{what} failed: timed out after {took}") from None
        finally:
            if conn is not None:
                await hand_back(self._pool, conn, idle=idle, within=self._timeout)

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        """Every ledger row, keyed by pair."""
        async with self._connection("reading the ledger") as conn:
            await _guest(conn)
            rows = await conn.fetch(_SQL["ledger_rows"])
        return {(r["endpoint_id"], r["queue"]): _ledger_row(r) for r in rows}

    async def fleet(self) -> FleetRecord:
        """The fleet's sweep record, as status shows it."""
        async with self._connection("reading the fleet's sweep record") as conn:
            record = await conn.fetchrow(_SQL["fleet_record"])
        assert record is not None  # one row, even before the first sweep
        return fleet_record(record)

    async def status(self, *, policy: PacingPolicy) -> tuple[datetime, list[PairStatus]]:
        """Every pair with pending work or a ledger row, judged by the sweep's own decision.

        Returns the instant judged at, on the ledger's clock, with the pairs,
        each with its silence and its last charges' outcomes from the history.
        """
        async with self._connection("reading the queue status") as conn:
            await _guest(conn)
            now = (
                await conn.fetchval(_SQL["now"])
                if self._clock is None
                else aware("clock()", self._clock())
            )
            record = await conn.fetchrow(_SQL["fleet_record"])
            assert record is not None  # one row, even before the first sweep
            rows, silences = await self._pairs(conn, now, record)
            recent: dict[PairKey, list[HistoryEntry]] = {}
            for r in await conn.fetch(_SQL["recent_outcomes"], RECENT_OUTCOMES):
                recent.setdefault((r["endpoint_id"], r["queue"]), []).append(_entry(r))
        return now, [
            pair_status(
                _pair_of(r, silences, now),
                None if r["nudges"] is None else _ledger_row(r),
                sendable=r["sendable"],
                held_by_gate=r["held_by_gate"],
                now=now,
                policy=policy,
                hook_failures=r["hook_failures"],
                hooks_disabled=r["hooks_disabled"],
                unreadable=None
                if r["unreadable_todo"] is None
                else Unreadable(
                    todo_id=r["unreadable_todo"],
                    column=r["unreadable_column"],
                    value=r["unreadable_value"],
                ),
                endpoint_name=r["endpoint_name"],
                last_failure_at=r["last_failure_at"],
                silences=silences,
                last_outcomes=recent.get((r["endpoint_id"], r["queue"]), ()),
            )
            for r in rows
        ]

    # -- what a person on call does (stall_core.OperatorPort) -----------------

    async def silence(
        self, endpoint_id: str, queue: str | None, *, lasting: timedelta, by: str, reason: str
    ) -> Silence:
        if not lasting > timedelta(0):
            raise ValueError(f"a silence must last a positive time, got {lasting!r}")
        async with self._operating(f"silencing {_pair(endpoint_id, queue)}") as (conn, now):
            await _exists(conn, endpoint_id, queue)
            ends = _ends(now, lasting)
            row = await conn.fetchrow(_SQL["silence"], endpoint_id, queue, now, ends, by, reason)
            assert row is not None  # an upsert returns its row
            await _action(conn, now, endpoint_id, queue, "silenced", by, reason, ends)
        return _silence(row)

    async def unsilence(
        self, endpoint_id: str, queue: str | None, *, by: str, reason: str
    ) -> Silence | None:
        async with self._operating(f"unsilencing {_pair(endpoint_id, queue)}") as (conn, now):
            await _exists(conn, endpoint_id, queue)
            row = await conn.fetchrow(_SQL["unsilence"], endpoint_id, queue, now)
            if row is not None:
                await _action(conn, now, endpoint_id, queue, "unsilenced", by, reason, None)
        return None if row is None else _silence(row)

    async def reset(
        self, endpoint_id: str, queue: str, *, by: str, reason: str
    ) -> LedgerRow | None:
        async with self._operating(f"resetting {_pair(endpoint_id, queue)}") as (conn, now):
            await _exists(conn, endpoint_id, queue)
            row = await conn.fetchrow(_SQL["reset_pair"], endpoint_id, queue, now)
            if row is not None:
                await conn.execute(_SQL["hold_pair"], endpoint_id, queue, now)
                await _action(conn, now, endpoint_id, queue, "reset", by, reason, None)
        return None if row is None else _ledger_row(row)

    async def nudge_now(
        self, endpoint_id: str, queue: str, *, policy: PacingPolicy, by: str, reason: str
    ) -> NudgeNowResult:
        what = f"nudging {_pair(endpoint_id, queue)}"
        async with self._connection(what, transaction=True) as conn:
            await conn.fetchrow(_SQL["operator_lock"], self._lock_key, self._timeout_ms)
            record = await conn.fetchrow(_SQL["tick_record"])
            assert record is not None  # one row, as tick_lock's
            now = record["now"] if self._clock is None else aware("clock()", self._clock())
            if record["host_schema"] is None:
                raise LedgerError(NOT_MIGRATED)
            await _exists(conn, endpoint_id, queue)
            pair, row = await self._pair_state(conn, endpoint_id, queue, now, record)
            decision = nudge_now(pair, row, now, policy)
            said = nudge_now_detail(decision, reason)
            await _action(conn, now, endpoint_id, queue, "nudged", by, said, None)
            # Only a candidate ticks: a refused nudge delivers nothing from here.
            outcome = ChargeOutcome(now=now, skipped=True)
            if isinstance(decision, Charge):
                await conn.execute(_SQL["reset_pair"], endpoint_id, queue, now)
                also = (endpoint_id, queue)
                outcome = await self._tick(conn, record, now, policy, None, also)
        self._started = True
        charged = next((n for n in outcome.charged if n.key == (endpoint_id, queue)), None)
        return NudgeNowResult(outcome=outcome, decision=decision, charged=charged, row=row)

    async def silences(self) -> tuple[datetime, tuple[Silence, ...]]:
        async with self._connection("reading the silences") as conn:
            await _guest(conn)
            now = await self._now(conn)
            rows = await conn.fetch(_SQL["silences"], now)
        return now, tuple(_silence(r) for r in rows)

    async def history(
        self,
        *,
        endpoint_id: str | None = None,
        queue: str | None = None,
        since: timedelta | None = None,
        limit: int = 1000,
    ) -> tuple[HistoryEntry, ...]:
        async with self._connection("reading the history") as conn:
            await _guest(conn)
            now = await self._now(conn)
            start = now - since if since is not None else _EPOCH
            rows = await conn.fetch(_SQL["history"], start, endpoint_id, queue, limit)
        return tuple(_entry(r) for r in rows)

    async def record_outcome(self, outcome: DeliveryOutcome) -> None:
        nudge = outcome.nudge
        async with self._connection(
            f"booking the outcome of {nudge.endpoint_id}/{nudge.queue}", transaction=True
        ) as conn:
            await _guest(conn)
            await conn.execute(
                _SQL["record_outcome"],
                nudge.endpoint_id,
                nudge.queue,
                nudge.number,
                nudge.charged_at,
                outcome.outcome,
                outcome.detail,
                await self._now(conn),
            )

    @property
    def _timeout_ms(self) -> str:
        return str(int(self._timeout * 1000))

    async def _now(self, conn: PooledConnection) -> datetime:
        """The ledger's clock: the database's, or the injected one."""
        if self._clock is not None:
            return aware("clock()", self._clock())
        now: datetime = await conn.fetchval(_SQL["now"])
        return now

    @asynccontextmanager
    async def _operating(self, what: str) -> AsyncIterator[tuple[PooledConnection, datetime]]:
        """A guest's transaction holding the tick lock: no tick straddles an operator's write."""
        async with self._connection(what, transaction=True) as conn:
            await _guest(conn)
            await conn.execute(_SQL["hold_tick"], self._lock_key)
            yield conn, await self._now(conn)

    async def _pair_state(
        self,
        conn: PooledConnection,
        endpoint_id: str,
        queue: str,
        now: datetime,
        record: asyncpg.Record,
    ) -> tuple[PairState, LedgerRow | None]:
        """One pair as ``status`` reads it (the same statement), in this transaction."""
        rows, silences = await self._pairs(conn, now, record)
        r = next((r for r in rows if (r["endpoint_id"], r["queue"]) == (endpoint_id, queue)), None)
        if r is None:
            pair = PairState(
                endpoint_id=endpoint_id,
                queue=queue,
                oldest=None,
                endpoint_active=False,
                has_receiver=False,
            )
            return pair, None
        return _pair_of(r, silences, now), None if r["nudges"] is None else _ledger_row(r)

    async def _pairs(
        self, conn: PooledConnection, now: datetime, record: asyncpg.Record
    ) -> tuple[list[asyncpg.Record], list[Silence]]:
        """Every pair's status row, and the silences in force at ``now``."""
        rows = await conn.fetch(
            _SQL["pair_status"],
            QUARANTINE_QUEUE,
            claims_window(record["judged_to"], now, self._lookback),
            record["claims_read_ids"] or [],
            record["claims_read_at"] or [],
            list(REACHED_NOBODY),
        )
        return rows, [_silence(r) for r in await conn.fetch(_SQL["silences"], now)]


def _pair_of(r: asyncpg.Record, silences: Sequence[Silence], now: datetime) -> PairState:
    """A pair's state from its ``pair_status`` row and the silences in force."""
    return PairState(
        endpoint_id=r["endpoint_id"],
        queue=r["queue"],
        oldest=None
        if r["todo_id"] is None
        else TodoRef(id=r["todo_id"], created_at=r["created_at"], title=r["title"]),
        endpoint_active=r["endpoint_active"],
        has_receiver=r["has_receiver"],
        latest_claim=r["latest_claim"],
        named_departed=bool(r["named_departed"]),
        silenced_until=silenced_until(silences, r["endpoint_id"], r["queue"], now),
    )


#: Before any history: the start of a listing with no ``since``.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ends(now: datetime, lasting: timedelta) -> datetime:
    """When a silence of ``lasting`` from ``now`` ends; refused past the calendar's end."""
    try:
        return now + lasting
    except OverflowError:
        raise ValueError(f"a silence of {format_duration(lasting)} ends past year 9999") from None


def _pair(endpoint_id: str, queue: str | None) -> str:
    return endpoint_id if queue is None else f"{endpoint_id}/{queue}"


async def _exists(conn: PooledConnection, endpoint_id: str, queue: str | None) -> None:
    """Raise ``NoSuchPair`` unless the endpoint exists and the queue has a todo or a ledger row."""
    try:
        found = await conn.fetchrow(_SQL["pair_exists"], endpoint_id, queue)
    except (asyncpg.DataError, asyncpg.InvalidTextRepresentationError):
        found = None  # not even a value of the host's id type
    if found is None or not found["endpoint"]:
        raise NoSuchPair(f"no endpoint {endpoint_id!r}")
    if not found["queue"]:
        raise NoSuchPair(f"endpoint {endpoint_id!r} has no queue {queue!r}: no todo, no ledger row")


async def _action(
    conn: PooledConnection,
    now: datetime,
    endpoint_id: str,
    queue: str | None,
    action: str,
    by: str,
    reason: str,
    until: datetime | None,
) -> None:
    await conn.execute(_SQL["record_action"], now, endpoint_id, queue, action, by, reason, until)


def _entry(r: asyncpg.Record) -> HistoryEntry:
    fields = dict(r)
    return HistoryEntry(by=fields.pop("actor"), **fields)


def _silence(r: asyncpg.Record) -> Silence:
    return Silence(
        endpoint_id=r["endpoint_id"],
        queue=r["queue"],
        starts_at=r["starts_at"],
        ends_at=r["ends_at"],
        by=r["created_by"],
        reason=r["reason"],
    )


async def _guest(conn: PooledConnection) -> None:
    """Make this transaction a guest's (``guest`` in ledger.sql); refuse a database not migrated."""
    if await conn.fetchval(_SQL["guest"], column=1) is None:
        raise LedgerError(NOT_MIGRATED)


def _ledger_row(r: asyncpg.Record) -> LedgerRow:
    return LedgerRow(
        endpoint_id=r["endpoint_id"],
        queue=r["queue"],
        nudges=r["nudges"],
        last_nudged_at=r["last_nudged_at"],
        named_todo=r["named_todo"],
        progressed_at=r["progressed_at"],
    )


def _claims(rows: Iterable[asyncpg.Record]) -> set[Claim]:
    """The claims (todo id, stamp) among a judge's result rows."""
    return {(r["todo_id"], r["created_at"]) for r in rows if r["kind"] == "read"}


def charge_outcome(rows: list[asyncpg.Record], now: datetime, kind: str) -> ChargeOutcome:
    """The ChargeOutcome of a tick's result rows: charges in rank order, clears sorted."""
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
    cleared = tuple(sorted((r["endpoint_id"], r["queue"]) for r in rows if r["kind"] == "clear"))
    judged = sum(r["nudges"] for r in rows if r["kind"] == "judged")
    return ChargeOutcome(
        now=now, charged=charged, cleared=cleared, swept_at=now, kind=kind, judged=judged
    )


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


def _conforms(ledger: PostgresLedger) -> tuple[LedgerPort, OperatorPort, HistoryPort]:
    """mypy checks here that PostgresLedger satisfies the core's ports."""
    return ledger, ledger, ledger
