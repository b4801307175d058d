"""stall_nudge.open_reaper against real PostgreSQL, through a proxy that can black-hole it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

import stall_nudge
from stall_core import TickFailure, TickReport
from stall_testing import PostgresHost, Receiver
from tests.postgres.proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: A small stop bound, so a stop on a black-holed database ends quickly.
STOP_S = 0.5


async def old_todo(host: PostgresHost, todo_id: str, minutes: int = 30) -> None:
    """A todo on ep-1/lane-l created ``minutes`` ago (no delivery: it passes the gate)."""
    created = datetime.now(UTC) - timedelta(minutes=minutes)
    await host.create_todo(todo_id, endpoint_id="ep-1", queue="lane-l", created_at=created)


@pytest.fixture(name="host")
async def _host(pg_pool: asyncpg.Pool, receiver: Receiver) -> PostgresHost:
    """A board whose pair ep-1/lane-l has been stalled for 30 minutes, with one hook."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await old_todo(host, "l-0", 30)
    await old_todo(host, "l-1", 20)
    return host


async def snapshot(pool: asyncpg.Pool) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every todo and every ledger row, as plain tuples in key order."""
    todos = await pool.fetch("SELECT * FROM todos ORDER BY id")
    rows = await pool.fetch(
        "SELECT * FROM stall_nudge.queue_stall_nudges ORDER BY endpoint_id, queue"
    )
    return [tuple(r.values()) for r in todos], [tuple(r.values()) for r in rows]


#: The test's own servers, whose tasks are not the reaper's: the proxy, the hook.
_TEST_SERVERS = {"BlackHoleProxy", "RequestHandler"}


def others(before: set[asyncio.Task[object]]) -> set[str]:
    """Names of tasks started since ``before``, leaving out the test servers' and this one."""
    return {
        t.get_name()
        for t in asyncio.all_tasks() - before
        if t is not asyncio.current_task()
        and getattr(t.get_coro(), "__qualname__", "").split(".")[0] not in _TEST_SERVERS
    }


async def test_one_stop_timeout_bounds_the_whole_stop_when_the_database_goes_silent(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """With PostgreSQL black-holed and a delivery in flight, stop_timeout bounds the stop even
    though each database call may take an hour: the delivery is given up first, then the
    refund, and the nudge keeps its charge (latency, never work)."""
    firsts: list[TickReport] = []
    failures: list[TickFailure] = []
    ready, go, failed, stop = (asyncio.Event() for _ in range(4))
    stats: list[tuple[int, int]] = []
    before = set(asyncio.all_tasks())

    def on_error(failure: TickFailure) -> None:
        failures.append(failure)
        failed.set()

    async def embedder(dsn: str) -> None:
        async with stall_nudge.open_reaper(dsn, timeout=3600, stop_timeout=STOP_S) as reaper:
            firsts.append(await reaper.tick())
            ready.set()
            await go.wait()
            await reaper.run(interval=0.01, stop=stop, on_error=on_error)
        stats.append((reaper.stats.abandoned, reaper.refunded))

    async with BlackHoleProxy(pg_dsn) as proxy:
        receiver.route("hook", receiver.hang())  # the hook takes the delivery and never answers
        task = asyncio.create_task(embedder(proxy.dsn))
        await ready.wait()
        await receiver.wait_for(1, "hook")
        saved = await snapshot(pg_pool)
        proxy.freeze()
        go.set()  # the next tick waits on the silent server: only the stop bound ends it
        await asyncio.wait_for(proxy.withheld(b"BEGIN"), 60)  # the tick's BEGIN is held
        stop.set()
        # A hang guard, not a measurement: without the bound this waits for an hour.
        await asyncio.wait_for(task, 60)
        leftover = others(before)
    after = await snapshot(pg_pool)

    assert [1] == [n.number for n in firsts[0].charged]
    assert [] == failures
    assert [(1, 0)] == stats
    assert saved == after
    assert set() == leftover


async def test_cancelling_the_reaper_returns_promptly_and_leaves_nothing_running(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Cancelling an embedder mid-tick on a black-holed database returns within one timeout."""
    ticked, go = asyncio.Event(), asyncio.Event()
    before = set(asyncio.all_tasks())

    async def embedder(dsn: str) -> None:
        async with stall_nudge.open_reaper(dsn, timeout=3600, stop_timeout=3600) as reaper:
            await reaper.tick()
            await reaper.settle()  # the nudge's outcome is booked before the server goes silent
            ticked.set()
            await go.wait()
            await reaper.run(interval=0.01, stop=asyncio.Event())

    async with BlackHoleProxy(pg_dsn) as proxy:
        task = asyncio.create_task(embedder(proxy.dsn))
        await ticked.wait()
        saved = await snapshot(pg_pool)
        proxy.freeze()
        go.set()  # the next tick opens its transaction on the silent server and waits
        await asyncio.wait_for(proxy.withheld(b"BEGIN"), 60)  # the tick's BEGIN is held
        task.cancel()
        # Nothing in a cancellation waits on the database, whose calls may take an hour: a
        # hang guard, not a measurement. (asyncio.wait does not raise the task's
        # CancelledError, so only the guard can fail.)
        async with asyncio.timeout(60):
            await asyncio.wait({task})
        leftover = others(before)
    after = await snapshot(pg_pool)

    assert True is task.cancelled()
    assert saved == after
    assert set() == leftover


async def test_startup_refuses_a_database_without_the_ledger_table(pg_dsn: str) -> None:
    """open_reaper checks the tables first and names the command to run."""
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("DROP TABLE stall_nudge.queue_stall_nudges")
    await conn.close()

    with pytest.raises(stall_nudge.StartupError) as caught:
        async with stall_nudge.open_reaper(pg_dsn):
            pass

    assert (
        "stall-nudge's own tables missing: stall_nudge.queue_stall_nudges (run stall-nudge migrate)"
        == str(caught.value)
    )


async def test_an_embedders_own_pool_is_used_and_left_open(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Given the host's pool, the reaper ticks on it and leaves it open afterwards."""
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        report = await reaper.tick()
        await reaper.settle()

    assert [("ep-1", "lane-l", 1)] == [(n.endpoint_id, n.queue, n.number) for n in report.charged]
    assert 1 == await pg_pool.fetchval("SELECT nudges FROM stall_nudge.queue_stall_nudges")
    assert 1 == reaper.stats.delivered


async def test_refuse_private_keeps_a_loopback_hook_from_being_dialled(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """With refuse_private, a hook on loopback is refused, never dialled, and its nudge refunded."""
    async with stall_nudge.open_reaper(pg_pool, refuse_private=True) as reaper:
        report = await reaper.tick()
        await reaper.settle()

    assert 1 == len(report.charged)
    assert ([], 1, 0, 1) == (
        receiver.messages,
        reaper.stats.refused,
        reaper.stats.delivered,
        reaper.refunded,
    )
    hook_row = await pg_pool.fetchrow("SELECT consecutive_failures FROM notify_hooks")
    assert 1 == hook_row["consecutive_failures"]
    # The refunded first nudge leaves the count at 0: nothing spent toward the cap.
    assert 0 == await pg_pool.fetchval("SELECT nudges FROM stall_nudge.queue_stall_nudges")


async def test_an_injected_clock_decides_and_stamps_the_wire(pg_pool: asyncpg.Pool) -> None:
    """With ``clock``, the reaper judges on that clock, not the database's, and sends its time."""
    at = datetime(2040, 1, 1, tzinfo=UTC)  # years past the database's clock
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    # Stalled by the injected clock; in the database's future, so fresh by its clock.
    await host.create_todo(
        "l-0", endpoint_id="ep-1", queue="lane-l", created_at=at - timedelta(minutes=10)
    )

    async with Receiver(clock=lambda: at) as receiver:  # it checks timestamps on that clock
        url = receiver.url("hook", SECRET)
        await host.add_hook("hook-1", endpoint_id="ep-1", url=url, secret=SECRET)
        async with stall_nudge.open_reaper(pg_pool, clock=lambda: at) as reaper:
            report = await reaper.tick()
            await reaper.settle()

    [message] = receiver.at("hook")
    assert (at, [1]) == (report.now, [n.number for n in report.charged])
    assert at == datetime.fromisoformat(message.json()["meta"]["sent_at"])
    assert str(int(at.timestamp())) == message.headers["webhook-timestamp"]
