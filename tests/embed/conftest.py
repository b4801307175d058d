"""Shared by the embedding tests: a loopback notify hook that says when it was called."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import attrs
import pytest
from aiohttp import web


@attrs.frozen
class Hook:
    url: str
    received: asyncio.Event
    #: Cleared, the hook takes each delivery and answers only once it is set again.
    hold: asyncio.Event
    #: Each delivery's headers and body, in the order received.
    deliveries: list[tuple[dict[str, str], bytes]]


@pytest.fixture(name="hook")
async def _hook() -> AsyncIterator[Hook]:
    """A loopback notify hook that keeps every delivery, answers 204 and sets ``received``."""
    received, hold = asyncio.Event(), asyncio.Event()
    hold.set()
    deliveries: list[tuple[dict[str, str], bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        deliveries.append((dict(request.headers), await request.read()))
        received.set()
        await hold.wait()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield Hook(f"http://127.0.0.1:{runner.addresses[0][1]}/hook", received, hold, deliveries)
    hold.set()
    await runner.cleanup()


@pytest.fixture(name="hook_url")
def _hook_url(hook: Hook) -> str:
    return hook.url
