"""The run test_interrupted_run.py interrupts: it waits on the server until signalled.

Not collected on its own (no ``test_`` prefix); the interrupting test names it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg


async def test_waits_on_the_server(pg_server: str) -> None:
    conn = await asyncpg.connect(pg_server)
    try:
        assert 1 == await conn.fetchval("SELECT 1")
    finally:
        await conn.close()
    await asyncio.to_thread(Path(os.environ["STALL_INTERRUPT_MARKER"]).write_text, pg_server)
    await asyncio.sleep(600)  # only the signal ends this run
