"""Shared by the operator-surface tests: a host, a stalled pair, what its hook was told, and
reading the ops port."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import aiohttp
import asyncpg
import pytest

from stall_testing import PostgresHost, Receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def ago(minutes: float) -> datetime:
    """The instant ``minutes`` before now, on this process's clock."""
    return datetime.now(UTC) - timedelta(minutes=minutes)


def reasons(receiver: Receiver) -> list[tuple[object, object]]:
    """(todo id, reason) of each verified delivery to the hook at ``hook``, in arrival order."""
    metas = [message.json()["meta"] for message in receiver.at("hook")]
    return [(meta["todo_id"], meta["reason"]) for meta in metas]


@pytest.fixture(name="host")
def _host(pg_pool: asyncpg.Pool) -> PostgresHost:
    return PostgresHost(pg_pool)


async def stalled_pair(
    host: PostgresHost,
    receiver: Receiver,
    *,
    endpoint: str = "ep-1",
    queue: str = "lane-l",
    todo: str = "l-0",
    minutes: float = 30,
) -> None:
    """An active endpoint with one hook to ``receiver`` and a todo ``minutes`` old on ``queue``."""
    await host.add_endpoint(endpoint)
    await host.add_hook(
        f"hook-{endpoint}", endpoint_id=endpoint, url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.create_todo(todo, endpoint_id=endpoint, queue=queue, created_at=ago(minutes))


async def get(url: str) -> tuple[int, str, str]:
    """GET ``url``: status, content type and body."""
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.content_type, await response.text()


async def until_status(url: str, status: int) -> tuple[int, str, str]:
    """GET ``url`` until it answers ``status`` (a hang guard bounds the wait)."""
    async with asyncio.timeout(60):
        while True:
            answer = await get(url)
            if answer[0] == status:
                return answer
            await asyncio.sleep(0.02)
