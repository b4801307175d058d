"""What a stop says it left behind, counted from what really happened (a real reaper, Postgres)."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

import stall_nudge
from stall_testing import PostgresHost, Receiver
from tests.postgres.proxy import BlackHoleProxy

from .conftest import SECRET

pytestmark = pytest.mark.postgres

#: Nudges one tick charges: the tick limit.
PAIRS = 4


@pytest.fixture(name="held_hook")
def _held_hook(receiver: Receiver) -> Receiver:
    """The loopback notify hook, recording each delivery and never answering it."""
    receiver.route("hook", receiver.hang())
    return receiver


async def stalled_pairs(host: PostgresHost, url: str) -> None:
    """``PAIRS`` queues of ep-1, each with a todo 30 minutes old, and one hook covering all."""
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=url, secret=SECRET)
    for i in range(PAIRS):
        created = datetime.now(UTC) - timedelta(minutes=30)
        await host.create_todo(f"t-{i}", endpoint_id="ep-1", queue=f"lane-{i}", created_at=created)


def capture(caplog: pytest.LogCaptureFixture, level: int) -> None:
    """Capture the library's records from ``level``, whatever an in-process CLI run left."""
    for name in ("stall_core", "adapters", "stall_nudge"):
        caplog.set_level(level, logger=name)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the library's captured records at warning or above."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("stall_", "adapters"))
    ]


async def test_a_stop_with_nothing_in_flight_logs_no_warning(
    pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop stopped after an idle tick, then a block left on an exception: not one warning."""
    capture(caplog, logging.DEBUG)
    async with stall_nudge.open_reaper(pg_pool, stop_timeout=5) as reaper:
        stop = asyncio.Event()
        await reaper.run(interval=0.05, stop=stop, on_report=lambda _: stop.set())
    with pytest.raises(LookupError):  # noqa: PT012 - the failure must come inside the block
        async with stall_nudge.open_reaper(pg_pool, stop_timeout=5) as reaper:
            await reaper.tick()
            raise LookupError("the embedder's own failure")

    assert [] == warnings(caplog)


async def test_refunds_cut_off_at_the_stop_bound_are_counted_as_keeping_their_charge(
    pg_dsn: str,
    pg_pool: asyncpg.Pool,
    held_hook: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Four nudges in flight, then PostgreSQL goes silent: the deliveries are given up, the four
    refunds cannot finish, and the stop line says four nudges keep their charge, as the
    ledger shows."""
    await stalled_pairs(PostgresHost(pg_pool), held_hook.url("hook", SECRET))
    capture(caplog, logging.INFO)

    async with BlackHoleProxy(pg_dsn) as proxy:
        async with stall_nudge.open_reaper(proxy.dsn, timeout=3600, stop_timeout=1) as reaper:
            report = await reaper.tick()
            await held_hook.wait_for(PAIRS, "hook")
            proxy.freeze()  # every refund now waits on a silent server
        refunded = reaper.refunded
    rows = await pg_pool.fetch(
        "SELECT queue, nudges FROM stall_nudge.queue_stall_nudges ORDER BY queue"
    )

    assert PAIRS == len(report.charged)
    assert [(f"lane-{i}", 1) for i in range(PAIRS)] == [tuple(r) for r in rows]
    assert 0 == refunded
    closing, cut_off = warnings(caplog)
    assert re.fullmatch(
        rf"closing with {PAIRS} deliveries unfinished after \d+ms: abandoned", closing
    )
    assert (
        f"refunds cut off at the stop bound: {PAIRS} nudge(s) keep their charge "
        "(one backoff step late, never work lost)"
    ) == cut_off
