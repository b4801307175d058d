"""Hostile-input helpers: a clean Postgres board between hypothesis examples."""

from __future__ import annotations

import asyncpg


async def wipe(pool: asyncpg.Pool) -> None:
    """Empty every table, so one hypothesis example cannot see another's rows."""
    await pool.execute(
        "TRUNCATE stall_nudge.queue_stall_nudges, todos, notify_hooks, deliveries, endpoints"
        " CASCADE"
    )
