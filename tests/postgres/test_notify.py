"""Mixed versions during a deploy: the sweep sends nothing on the older build's channel.

An instance built before SPEC-0038 runs a LISTEN loop on ``todo_ready``. A
nudge is delivered once, through the hook, by the instance that charged it:
nothing of the sweep may notify on that channel, or the older build would
wake a consumer a second time. (The creation payload the host sends there,
and how a LISTEN loop parses it, are tests/hostile/test_todo_ready.py's.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from stall_testing import TODO_READY_CHANNEL, RecordingWake
from stall_testing.contract import stalled_queue, sweep
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres


class Listener:
    """The LISTEN loop of an older build: what arrives on ``todo_ready``, in order."""

    def __init__(self) -> None:
        self._inbox: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._inbox.put_nowait(payload)

    async def fence(self, pool: asyncpg.Pool, marker: str = "fence:fence") -> list[str]:
        """Notify ``marker`` from ``pool``, wait for it, and return what arrived before it.

        PostgreSQL delivers notifications in commit order, so whatever the
        statements committed before the fence notified has arrived by then.
        """
        await pool.execute("SELECT pg_notify($1, $2)", TODO_READY_CHANNEL, marker)
        arrived = []
        async with asyncio.timeout(10):
            while (payload := await self._inbox.get()) != marker:
                arrived.append(payload)
        return arrived


@asynccontextmanager
async def listening(dsn: str) -> AsyncIterator[Listener]:
    """LISTEN on ``todo_ready`` on a connection of its own, as another process would."""
    conn = await asyncpg.connect(dsn)
    listener = Listener()
    await conn.add_listener(TODO_READY_CHANNEL, listener.on_notify)
    try:
        yield listener
    finally:
        await conn.remove_listener(TODO_READY_CHANNEL, listener.on_notify)
        await conn.close()


async def test_mixed_versions_during_a_deploy_nudges_notify_nothing(site: pg.Site) -> None:
    """Charges to the cap, refunds, a charge after progress, a clear: an old loop hears none."""
    async with site.driver() as driver:
        ids = await stalled_queue(driver, todos=2)
        [drained] = await stalled_queue(driver, endpoint="ep-2")
        await stalled_queue(driver, endpoint="ep-3", queue="quarantine")
        wake = RecordingWake()

        async with listening(site.dsn) as older_instance:
            refused = await sweep(driver, T0 + minutes(3), RecordingWake(refuse=True))
            for minute in (3, 8, 28, 88, 448, 2000):
                await sweep(driver, T0 + minutes(minute), wake)
            await driver.claim(drained, owner="consumer", at=T0 + minutes(2001))
            await driver.claim(ids[0], owner="consumer", at=T0 + minutes(2001))
            last = await sweep(driver, T0 + minutes(2002), RecordingWake())
            heard = await older_instance.fence(driver.pool)

    assert [] == heard
    assert [("ep-1", 1), ("ep-2", 1)] == [(n.endpoint_id, n.number) for n in refused.charged]
    woken = sorted((n.endpoint_id, n.number) for n in wake.sent)
    assert [(e, number) for e in ("ep-1", "ep-2") for number in range(1, 6)] == woken
    # ep-1's claim is progress (nudge 1 again), ep-2's drains its queue.
    assert ([("ep-1", 1)], (("ep-2", "lane-l"),)) == (
        [(n.endpoint_id, n.number) for n in last.charged],
        last.cleared,
    )
