"""Hostile-input fixtures: a loopback receiver (the http suite's) and a clean Postgres board."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.http.conftest import Receiver


@pytest.fixture(name="receiver")
async def _receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    await receiver.start()
    yield receiver
    await receiver.stop()


async def wipe(pool: asyncpg.Pool) -> None:
    """Empty every table, so one hypothesis example cannot see another's rows."""
    await pool.execute(
        "TRUNCATE queue_stall_nudges, todos, notify_hooks, deliveries, endpoints CASCADE"
    )
