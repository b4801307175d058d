"""The Python examples of README.md and docs/architecture.md run as printed, on real PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

import stall_nudge
from adapters.http import HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import TodoRef
from stall_testing import PostgresHost, Receiver
from tests.embed.test_reaper import SECRET, old_todo
from tests.ops.conftest import reasons

pytestmark = pytest.mark.postgres

README = Path(__file__).parents[2] / "README.md"
WAKE_CONTRACT = Path(__file__).parents[2] / "docs" / "architecture.md"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)


def example(needle: str, page: Path = README, **names: Any) -> dict[str, Any]:
    """The namespace of ``page``'s first Python block holding ``needle``, run afresh.

    ``names`` are what the block leaves to the reader (a secret, a claim call).
    """
    source = next(b for b in python_blocks(page) if needle in b)
    namespace: dict[str, Any] = dict(names)
    exec(compile(source, str(page), "exec"), namespace)
    return namespace


def embedding_example() -> Callable[[str, asyncio.Event], Coroutine[Any, Any, None]]:
    """The README's first Python block that calls open_reaper."""
    reaper: Callable[[str, asyncio.Event], Coroutine[Any, Any, None]] = example("open_reaper")[
        "reaper"
    ]
    return reaper


async def test_the_readme_example_nudges_a_stalled_queue_and_stops(
    pg_dsn: str, pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """The example delivers the stalled pair's first nudge, then returns once stop is set."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await old_todo(host, "l-0")
    stop = asyncio.Event()
    task = asyncio.create_task(embedding_example()(pg_dsn, stop))
    await receiver.wait_for(1, "hook")
    stop.set()
    await asyncio.wait_for(task, 60)

    assert 1 == await pg_pool.fetchval("SELECT nudges FROM stall_nudge.queue_stall_nudges")


async def test_the_readme_creation_wake_reaches_the_hook_through_the_reaper(
    pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """The README's reported-case creation wake is a verified todo.ready with reason created."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    todo_created = example("reaper.notify")["todo_created"]
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        await todo_created(reaper, datetime.now(UTC))
        await reaper.settle()

    assert [("l-0", "created")] == reasons(receiver)


def test_every_wake_contract_python_example_is_run_here() -> None:
    """The wake contract has exactly the two Python examples the tests below run."""
    blocks = python_blocks(WAKE_CONTRACT)

    assert [1, 1] == [sum(needle in b for b in blocks) for needle in ("on_ready", "sweep_once")]
    assert 2 == len(blocks)


async def test_the_wake_contract_sweep_nudges_and_books(
    pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """The hand-wired sweep charges the stalled pair, delivers its nudge and books the success."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await old_todo(host, "l-0")
    await pg_pool.execute("UPDATE notify_hooks SET consecutive_failures = 3")

    report = await example("sweep_once", WAKE_CONTRACT)["sweep_once"](pg_pool)

    assert [("ep-1", "lane-l", 1)] == [(n.endpoint_id, n.queue, n.number) for n in report.charged]
    assert 1 == len(receiver.at("hook"))
    assert (1, 0) == (
        await pg_pool.fetchval("SELECT nudges FROM stall_nudge.queue_stall_nudges"),
        await pg_pool.fetchval("SELECT consecutive_failures FROM notify_hooks"),
    )


async def test_the_wake_contract_consumer_verifies_and_claims() -> None:
    """The consumer claims what a signed wake names and answers 401 to a forged one."""
    claimed: list[tuple[str, str, str]] = []

    async def claim(endpoint_id: str, queue: str, todo_id: str) -> None:
        claimed.append((endpoint_id, queue, todo_id))

    on_ready = example("on_ready", WAKE_CONTRACT, SECRET=SECRET, claim=claim)["on_ready"]
    app = web.Application()
    app.router.add_post("/hook", on_ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    board = MemoryBoard(clock=lambda: datetime.now(UTC))
    board.add_endpoint("ep-1")
    board.add_hook("hook-1", endpoint_id="ep-1", url=url, secret=SECRET)
    todo = TodoRef(id="l-0", created_at=datetime.now(UTC), title="Deploy lane-l")
    try:
        async with HookDispatcher(hooks=MemoryHooks(board)) as dispatcher:
            await dispatcher.notify(endpoint_id="ep-1", queue="lane-l", todo=todo, reason="future")
            await dispatcher.settle()
            delivered = dispatcher.stats.delivered
        async with aiohttp.ClientSession() as session:
            forged = {"webhook-id": "msg_x", "webhook-timestamp": "0", "webhook-signature": "v1,x"}
            async with session.post(url, data=b"{}", headers=forged) as response:
                status = response.status
    finally:
        await runner.cleanup()

    assert (1, [("ep-1", "lane-l", "l-0")], 401) == (delivered, claimed, status)
