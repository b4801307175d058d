"""Shared by the CLI tests: run the command as a subprocess, and a loopback notify hook."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import attrs
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

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
