"""The README's embedding example runs as printed, against real PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import stall_nudge
from stall_testing import PostgresHost
from tests.embed.conftest import Hook
from tests.embed.test_reaper import SECRET, old_todo
from tests.ops.conftest import Receiver

pytestmark = pytest.mark.postgres

README = Path(__file__).parents[2] / "README.md"


def example(needle: str) -> dict[str, Any]:
    """The namespace of the README's first Python block holding ``needle``, run afresh."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    source = next(b for b in blocks if needle in b)
    namespace: dict[str, Any] = {}
    exec(compile(source, str(README), "exec"), namespace)
    return namespace


def embedding_example() -> Callable[[str, asyncio.Event], Coroutine[Any, Any, None]]:
    """The README's first Python block that calls open_reaper."""
    reaper: Callable[[str, asyncio.Event], Coroutine[Any, Any, None]] = example("open_reaper")[
        "reaper"
    ]
    return reaper


async def test_the_readme_example_nudges_a_stalled_queue_and_stops(
    pg_dsn: str, pg_pool: asyncpg.Pool, hook: Hook
) -> None:
    """The example delivers the stalled pair's first nudge, then returns once stop is set."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=hook.url, secret=SECRET)
    await old_todo(host, "l-0")
    stop = asyncio.Event()
    task = asyncio.create_task(embedding_example()(pg_dsn, stop))
    await asyncio.wait_for(hook.received.wait(), 60)
    stop.set()
    await asyncio.wait_for(task, 60)

    assert 1 == await pg_pool.fetchval("SELECT nudges FROM queue_stall_nudges")


async def test_the_readme_creation_wake_reaches_the_hook_through_the_reaper(
    pg_pool: asyncpg.Pool,
) -> None:
    """The README's reported-case creation wake is a verified todo.ready with reason created."""
    receiver = Receiver()
    await receiver.start()
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=receiver.url, secret=SECRET)
    todo_created = example("reaper.notify")["todo_created"]
    try:
        async with stall_nudge.open_reaper(pg_pool) as reaper:
            await todo_created(reaper, datetime.now(UTC))
            await reaper.drain()
    finally:
        await receiver.stop()

    assert [("l-0", "created")] == receiver.reasons()
