"""The database is the one clock, and every call is bounded (Postgres only).

A sidecar's own wall clock never decides: the contract's skewed-sweeper
scenario moves it in process, tests/ops/test_wire_clock.py and the races
(tests/stress) in real processes under libfaketime.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, Nudge, PacingPolicy, Sweeper, TodoRef
from stall_testing import PostgresHost, RecordingWake
from tests import pg
from tests.support import T0

from .proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
POLICY = PacingPolicy()


async def db_now(pool: asyncpg.Pool) -> datetime:
    now: datetime = await pool.fetchval("SELECT clock_timestamp()")
    return now


async def test_the_database_clock_decides(site: pg.Site) -> None:
    """With no clock given, the ledger charges at the database's time, read inside the tick."""
    async with site.host_pool() as pool, site.sweeper_pool() as sweeper:
        host = PostgresHost(pool)
        await host.add_endpoint("ep-1")
        await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
        now = await db_now(pool)
        await host.create_todo(
            "old", endpoint_id="ep-1", queue="q", created_at=now - timedelta(minutes=10)
        )
        await host.create_todo(
            "new", endpoint_id="ep-1", queue="r", created_at=now - timedelta(seconds=60)
        )

        before = await db_now(pool)
        report = await Sweeper(ledger=PostgresLedger(sweeper), wake=RecordingWake()).tick()
        after = await db_now(pool)

    assert ["q"] == [n.queue for n in report.charged]
    assert before < report.now < after
    assert report.now == report.charged[0].charged_at


@pytest.fixture(name="sweeper_dsn")
def _sweeper_dsn(site: pg.Site) -> str:
    """The sweeping role's DSN on a DBA's database, as the ledger connects in production."""
    return site.as_role(site.cast.sweeper)


async def backend_pid(pool: asyncpg.Pool) -> int:
    """The server process behind the pool's one connection."""
    pid: int = await pool.fetchval("SELECT pg_backend_pid()")
    return pid


async def test_a_black_holed_database_fails_the_tick_by_the_ledgers_own_timeout(
    sweeper_dsn: str,
) -> None:
    """A tick waiting on a silent database fails by the ledger's timeout and is cut off."""
    # Shown by events, not by timing: the tick's BEGIN is held by the frozen proxy (it
    # waits on the silence), the failure is the ledger's own deadline (a LedgerError
    # naming its 1 s, not the hang guard's TimeoutError), and the next tick runs on a
    # new server connection (the old one was cut off, not handed back).
    async with BlackHoleProxy(sweeper_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            ledger = PostgresLedger(pool, timeout=1.0)
            sweeper = Sweeper(ledger=ledger, wake=RecordingWake())
            assert False is (await sweeper.tick()).skipped
            before = await backend_pid(pool)
            proxy.freeze()
            # A hang guard only, far past the ledger's timeout: it raises TimeoutError,
            # never the LedgerError checked below.
            async with asyncio.timeout(60):
                tick = asyncio.create_task(sweeper.tick())
                await proxy.withheld(b"BEGIN")
                with pytest.raises(LedgerError) as failure:
                    await tick
                proxy.thaw()
                recovered = await sweeper.tick()
                after = await backend_pid(pool)
        finally:
            pool.terminate()
    assert "charging due pairs failed: timed out after 1s" == str(failure.value)
    assert False is recovered.skipped
    assert before != after


async def test_cancelling_a_tick_on_a_silent_database_returns_at_once(sweeper_dsn: str) -> None:
    """A tick cancelled while the database is silent cuts its connection off instead of waiting."""
    async with BlackHoleProxy(sweeper_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            # A bound far past the guard below: only the cut-off can end the wait.
            ledger = PostgresLedger(pool, timeout=3600)
            await ledger.ledger_rows()
            before = await backend_pid(pool)
            proxy.freeze()
            tick = asyncio.create_task(ledger.charge_due(policy=PacingPolicy()))
            # The tick's BEGIN reached the silent server: it is waiting on it now.
            await asyncio.wait_for(proxy.withheld(b"BEGIN"), 30)
            tick.cancel()
            # The wait only turns a hang into a failure (asyncpg's own wait is 60 s).
            await asyncio.wait({tick}, timeout=10)
            assert (True, True) == (tick.done(), tick.cancelled())
            proxy.thaw()
            # The cut-off connection is replaced: the ledger works again, on a new one.
            assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
            assert before != await backend_pid(pool)
        finally:
            pool.terminate()


async def test_a_connection_the_server_terminates_mid_call_is_a_ledger_error(
    site: pg.Site, sweeper_dsn: str
) -> None:
    """A backend killed mid-statement fails that call as a LedgerError; the next call works.

    asyncpg hands such a connection back to its pool by itself, so the ledger
    must not try to cut it off a second time.
    """
    pool = await asyncpg.create_pool(sweeper_dsn, min_size=1, max_size=1)
    admin = await asyncpg.create_pool(site.dsn, min_size=2, max_size=2)
    try:
        ledger = PostgresLedger(pool, timeout=30)
        pid = await pool.fetchval("SELECT pg_backend_pid()")
        # Every read the ledger makes is held up behind this lock until the kill.
        async with admin.acquire() as locker, locker.transaction():
            await locker.execute(
                "LOCK TABLE stall_nudge.queue_stall_nudges IN ACCESS EXCLUSIVE MODE"
            )
            read = asyncio.create_task(ledger.status(policy=PacingPolicy()))
            async with asyncio.timeout(10):
                blocked = False
                while not blocked:
                    blocked = await admin.fetchval(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                        pid,
                    )
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            with pytest.raises(LedgerError, match="reading the queue status failed"):
                await read
        assert [] == (await ledger.status(policy=PacingPolicy()))[1]
    finally:
        pool.terminate()
        await admin.close()


async def test_a_refund_is_bounded_too(sweeper_dsn: str) -> None:
    """A refund waiting on a black-holed database fails by the ledger's own timeout."""
    async with BlackHoleProxy(sweeper_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            ledger = PostgresLedger(pool, timeout=0.5)
            await ledger.ledger_rows()
            proxy.freeze()
            # A hang guard only: it raises TimeoutError, never the LedgerError checked below.
            async with asyncio.timeout(60):
                refund = asyncio.create_task(ledger.refund(_a_nudge()))
                await proxy.withheld(b"BEGIN")
                with pytest.raises(LedgerError, match=r"timed out after 500ms"):
                    await refund
        finally:
            pool.terminate()


def _a_nudge() -> Nudge:
    return Nudge(
        endpoint_id="ep-1",
        queue="q",
        todo=TodoRef(id="t", created_at=T0),
        number=1,
        charged_at=T0,
    )
