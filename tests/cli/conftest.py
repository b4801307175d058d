"""Shared by the CLI tests: run the command as a subprocess, a loopback notify hook, a board."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import attrs
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from stall_core import PacingPolicy
from stall_testing import PostgresHost

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


class Hook:
    """A loopback notify hook that verifies every delivery with standardwebhooks."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, object]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        payload = Webhook(SECRET).verify(body, dict(request.headers))
        self.bodies.append(payload)
        return web.Response(status=204)

    def stalled(self) -> list[tuple[object, object]]:
        metas = [b["meta"] for b in self.bodies]
        return [(m["todo_id"], m["queue"]) for m in metas if m["reason"] == "stalled"]  # type: ignore[index]


@pytest.fixture(name="hook")
async def _hook() -> AsyncIterator[Hook]:
    hook = Hook()
    await hook.start()
    yield hook
    await hook.stop()


@pytest.fixture(name="board")
async def _board(pg_pool: asyncpg.Pool, hook: Hook) -> PostgresHost:
    """A migrated database with two pairs: ep-1/lane-l stalled (l-0 its oldest), ep-1/fresh not yet.

    lane-l's todos wait on a verified delivery; ``hook`` is ep-1's notify hook.
    """
    host = PostgresHost(pg_pool)
    now: datetime = await pg_pool.fetchval("SELECT clock_timestamp()")
    threshold = PacingPolicy().threshold
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=hook.url, secret=SECRET)
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
