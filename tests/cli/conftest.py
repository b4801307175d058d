"""Shared by the CLI tests: run the command as a subprocess, a board, its hook's stalled wakes."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime

import asyncpg
import attrs
import pytest

from stall_core import PacingPolicy
from stall_testing import PostgresHost, Receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@attrs.frozen
class Result:
    status: int
    out: str
    err: str


async def cli(*args: str, env: dict[str, str] | None = None, limit: float = 60) -> Result:
    """Run `stall-nudge ARGS` in a fresh interpreter and collect its output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stall_nudge.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def stalled(receiver: Receiver) -> list[tuple[object, object]]:
    """(todo id, queue) of each verified stalled wake to the hook at ``hook``, in arrival order."""
    metas = [message.json()["meta"] for message in receiver.at("hook")]
    return [(meta["todo_id"], meta["queue"]) for meta in metas if meta["reason"] == "stalled"]


@pytest.fixture(name="board")
async def _board(pg_pool: asyncpg.Pool, receiver: Receiver) -> PostgresHost:
    """A migrated database with two pairs: ep-1/lane-l stalled (l-0 its oldest), ep-1/fresh not yet.

    lane-l's todos wait on a verified delivery; ``receiver``'s ``hook`` is ep-1's notify hook.
    """
    host = PostgresHost(pg_pool)
    now: datetime = await pg_pool.fetchval("SELECT clock_timestamp()")
    threshold = PacingPolicy().threshold
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.add_delivery("d1", endpoint_id="ep-1", verified=True, received_at=now)
    for i, age in enumerate((3 * threshold, 2 * threshold)):
        await host.create_todo(
            f"l-{i}",
            endpoint_id="ep-1",
            queue="lane-l",
            created_at=now - age,
            delivery_id="d1",
            title=f"item {i}",
        )
    await host.create_todo("f-0", endpoint_id="ep-1", queue="fresh", created_at=now)
    return host
