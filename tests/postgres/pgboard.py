"""Helpers for the Postgres-only checks: raw table snapshots and a todo_ready listener."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from adapters.postgres import HOST_TABLES

#: The channel the host's creation path notifies on, payload "<endpoint_id>:<queue>".
CHANNEL = "todo_ready"


async def host_rows(conn: asyncpg.Connection | asyncpg.Pool) -> dict[str, list[dict[str, object]]]:
    """Every row of every host table, every column (``SELECT *``), as plain dicts."""
    return {
        table: [dict(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY id")]
        for table in HOST_TABLES
    }


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
        await pool.execute("SELECT pg_notify($1, $2)", CHANNEL, marker)
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
    await conn.add_listener(CHANNEL, listener.on_notify)
    try:
        yield listener
    finally:
        await conn.remove_listener(CHANNEL, listener.on_notify)
        await conn.close()
