"""The ops port (/metrics, /healthz, /readyz, /) in process, and `sweep --metrics` usage mistakes.

The sidecar serving it until SIGTERM is the journey in tests/cli/test_cli.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

import stall_nudge
from stall_nudge.ops_port import serve_ops_port
from stall_testing import PostgresHost, Receiver
from tests.cli.conftest import cli

from .conftest import get, stalled_pair, until_status

pytestmark = pytest.mark.postgres


@pytest.fixture(name="reaper")
async def _reaper(pg_pool: asyncpg.Pool) -> AsyncIterator[stall_nudge.Reaper]:
    async with stall_nudge.open_reaper(pg_pool, stop_timeout=5) as reaper:
        yield reaper


async def test_the_port_answers_health_readiness_metrics_and_the_status_page(
    reaper: stall_nudge.Reaper, host: PostgresHost, receiver: Receiver
) -> None:
    """Before the loop: not live, not ready; while it ticks: 200 everywhere; stopped: not live."""
    await stalled_pair(host, receiver)
    stop = asyncio.Event()
    async with serve_ops_port(reaper, host="127.0.0.1", port=0) as url:
        before = [await get(url + path) for path in ("/healthz", "/readyz")]
        loop = asyncio.create_task(reaper.run(interval=0.05, stop=stop))
        await until_status(url + "/readyz", 200)
        live = await get(url + "/healthz")
        metrics = await get(url + "/metrics")
        page = await get(url + "/")
        missing = await get(url + "/nothing-here")
        stop.set()
        await loop
        stopped = await get(url + "/healthz")

    assert [503, 503] == [status for status, _, _ in before]
    assert "the sweep loop is not running\n" == before[0][2]
    assert "no tick has run yet\n" == before[1][2]
    assert (200, "text/plain") == live[:2]
    assert (200, "text/plain") == metrics[:2]
    assert 'switchboard_queue_stall_nudges_total{queue="lane-l"} 1.0' in metrics[2]
    assert (200, "text/html") == page[:2]
    assert "lane-l" in page[2]
    assert 404 == missing[0]
    assert 503 == stopped[0]


async def test_readyz_says_why_when_the_last_tick_failed(
    reaper: stall_nudge.Reaper, pg_pool: asyncpg.Pool
) -> None:
    """A tick the database refuses makes /readyz answer 503 with one line naming the failure."""
    await pg_pool.execute("DROP TABLE stall_nudge.queue_stall_nudges CASCADE")
    stop = asyncio.Event()
    async with serve_ops_port(reaper, host="127.0.0.1", port=0) as url:
        loop = asyncio.create_task(reaper.run(interval=0.05, stop=stop))
        _, _, reason = await until_status(url + "/readyz", 503)
        while "failed" not in reason:
            _, _, reason = await until_status(url + "/readyz", 503)
        stop.set()
        await loop

    assert 1 == len(reason.splitlines())
    assert re.fullmatch(r"tick \d+ failed: .*queue_stall_nudges.*\n", reason), reason


async def test_readiness_lapses_after_three_intervals_and_says_so_as_status_writes_it(
    reaper: stall_nudge.Reaper,
) -> None:
    """A success older than three intervals is not ready; within them, it is. The reason's age
    is whole seconds and its bound reads as format_duration writes it."""
    await reaper.tick()

    fresh = reaper.health(interval=3600)
    stale = reaper.health(interval=1e-6)

    assert (True, False) == (fresh.ready, stale.ready)
    assert re.fullmatch(r"tick 1 swept, (\d+m)?\d+s ago", fresh.reason), fresh.reason
    assert re.fullmatch(
        r"no successful tick within 3 intervals \(0ms\): tick 1 swept, (\d+m)?\d+s ago",
        stale.reason,
    ), stale.reason


@pytest.mark.parametrize(
    ("address", "needle"),
    [
        ("9464", "HOST:PORT"),
        (":9464", "HOST:PORT"),
        ("127.0.0.1:", "HOST:PORT"),
        ("127.0.0.1:99999", "port"),
        ("127.0.0.1:http", "port"),
        ("[::1:9464", "HOST:PORT"),
    ],
)
async def test_a_malformed_metrics_address_is_a_usage_error_naming_the_flag(
    address: str, needle: str
) -> None:
    """A bad --metrics value exits 2 with one line naming --metrics and what was wrong."""
    result = await cli("sweep", "--metrics", address, "--dsn", "postgresql://x@127.0.0.1/db")

    assert 2 == result.status
    assert "--metrics" in result.err
    assert needle in result.err
    assert "Traceback" not in result.err


async def test_metrics_with_once_is_a_usage_error() -> None:
    """--metrics serves while the loop runs; with --once it is refused as a usage mistake."""
    result = await cli(
        "sweep", "--once", "--metrics", "127.0.0.1:0", "--dsn", "postgresql://x@127.0.0.1/db"
    )

    assert (2, True) == (result.status, "--metrics" in result.err)
