"""stall_nudge.open_reaper against real PostgreSQL, through a proxy that can black-hole it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

import stall_nudge
from stall_core import TickFailure, TickReport
from stall_testing import PostgresHost
from tests.postgres.proxy import BlackHoleProxy

from .conftest import Hook

pytestmark = pytest.mark.postgres

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: Small bounds so a black-holed call gives up quickly; the arithmetic is the reaper's own.
TIMEOUT_S = 0.5
SHUTDOWN_S = 0.5


async def old_todo(host: PostgresHost, todo_id: str, minutes: int = 30) -> None:
    """A todo on ep-1/lane-l created ``minutes`` ago (no delivery: it passes the gate)."""
    created = datetime.now(UTC) - timedelta(minutes=minutes)
    await host.create_todo(todo_id, endpoint_id="ep-1", queue="lane-l", created_at=created)


@pytest.fixture(name="host")
async def _host(pg_pool: asyncpg.Pool, hook_url: str) -> PostgresHost:
    """A board whose pair ep-1/lane-l has been stalled for 30 minutes, with one hook."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=hook_url, secret=SECRET)
    await old_todo(host, "l-0", 30)
    await old_todo(host, "l-1", 20)
    return host


async def snapshot(pool: asyncpg.Pool) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every todo and every ledger row, as plain tuples in key order."""
    todos = await pool.fetch("SELECT * FROM todos ORDER BY id")
    rows = await pool.fetch("SELECT * FROM queue_stall_nudges ORDER BY endpoint_id, queue")
    return [tuple(r.values()) for r in todos], [tuple(r.values()) for r in rows]


def others(before: set[asyncio.Task[object]]) -> set[str]:
    """Names of tasks started since ``before``, leaving out the proxy's own and this one."""
    return {
        t.get_name()
        for t in asyncio.all_tasks() - before
        if t is not asyncio.current_task()
        and getattr(t.get_coro(), "__qualname__", "").split(".")[0] != "BlackHoleProxy"
    }


async def test_stop_returns_within_the_stated_bound_when_the_database_goes_silent(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """With PostgreSQL black-holed, stop ends the reaper within stop_bound; nothing is lost."""
    firsts: list[TickReport] = []
    failures: list[TickFailure] = []
    bounds: list[float] = []
    ready, go, failed, stop = (asyncio.Event() for _ in range(4))
    before = set(asyncio.all_tasks())

    def on_error(failure: TickFailure) -> None:
        failures.append(failure)
        failed.set()

    async def embedder(dsn: str) -> None:
        async with stall_nudge.open_reaper(
            dsn, timeout=TIMEOUT_S, shutdown_deadline=SHUTDOWN_S
        ) as reaper:
            firsts.append(await reaper.tick())
            await reaper.drain()
            bounds.append(reaper.stop_bound)
            ready.set()
            await go.wait()
            await reaper.run(interval=0.01, stop=stop, on_error=on_error)

    async with BlackHoleProxy(pg_dsn) as proxy:
        task = asyncio.create_task(embedder(proxy.dsn))
        await ready.wait()
        saved = await snapshot(pg_pool)
        proxy.freeze()
        go.set()
        await failed.wait()  # a tick timed out; the next one may be hanging right now
        async with asyncio.timeout(bounds[0]):
            stop.set()
            await task
        leftover = others(before)
    after = await snapshot(pg_pool)

    assert [1] == [n.number for n in firsts[0].charged]
    assert "timed out after 0.5 s" in failures[0].error
    assert saved == after
    assert set() == leftover


async def test_cancelling_the_reaper_returns_promptly_and_leaves_nothing_running(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Cancelling an embedder mid-tick on a black-holed database returns within one timeout."""
    ticked, go = asyncio.Event(), asyncio.Event()
    before = set(asyncio.all_tasks())

    async def embedder(dsn: str) -> None:
        async with stall_nudge.open_reaper(dsn, timeout=3600, shutdown_deadline=3600) as reaper:
            await reaper.tick()
            ticked.set()
            await go.wait()
            await reaper.run(interval=0.01, stop=asyncio.Event())

    async with BlackHoleProxy(pg_dsn) as proxy:
        task = asyncio.create_task(embedder(proxy.dsn))
        await ticked.wait()
        saved = await snapshot(pg_pool)
        proxy.freeze()
        go.set()  # the next tick opens its transaction on the silent server and waits
        await asyncio.sleep(0.05)
        task.cancel()
        # Nothing in a cancellation waits on the database: far below the configured timeout.
        # (asyncio.wait does not raise the task's CancelledError, so only the bound can fail.)
        async with asyncio.timeout(TIMEOUT_S):
            await asyncio.wait({task})
        leftover = others(before)
    after = await snapshot(pg_pool)

    assert True is task.cancelled()
    assert saved == after
    assert set() == leftover


async def test_startup_refuses_a_database_without_the_ledger_table(pg_dsn: str) -> None:
    """open_reaper checks the tables first and names the command to run."""
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("DROP TABLE queue_stall_nudges")
    await conn.close()

    with pytest.raises(stall_nudge.StartupError) as caught:
        async with stall_nudge.open_reaper(pg_dsn):
            pass

    assert "stall-nudge's own tables missing: queue_stall_nudges (run stall-nudge migrate)" == str(
        caught.value
    )


async def test_an_embedders_own_pool_is_used_and_left_open(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Given the host's pool, the reaper ticks on it and leaves it open afterwards."""
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        report = await reaper.tick()
        await reaper.drain()

    assert [("ep-1", "lane-l", 1)] == [(n.endpoint_id, n.queue, n.number) for n in report.charged]
    assert 1 == await pg_pool.fetchval("SELECT nudges FROM queue_stall_nudges")
    assert 1 == reaper.stats.delivered


async def test_refuse_private_keeps_a_loopback_hook_from_being_dialled(
    pg_pool: asyncpg.Pool, host: PostgresHost, hook: Hook
) -> None:
    """With refuse_private, a hook on loopback is refused, never dialled, and its nudge refunded."""
    async with stall_nudge.open_reaper(pg_pool, refuse_private=True) as reaper:
        report = await reaper.tick()
        await reaper.drain()

    assert 1 == len(report.charged)
    assert (False, 1, 0, 1) == (
        hook.received.is_set(),
        reaper.stats.refused,
        reaper.stats.delivered,
        reaper.refunded,
    )
    hook_row = await pg_pool.fetchrow("SELECT consecutive_failures FROM notify_hooks")
    assert 1 == hook_row["consecutive_failures"]
    # The refunded first nudge leaves the count at 0: nothing spent toward the cap.
    assert 0 == await pg_pool.fetchval("SELECT nudges FROM queue_stall_nudges")
