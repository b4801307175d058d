"""The ops port: ``/metrics``, ``/healthz``, ``/readyz`` and the status page ``/``, read-only.

What ``stall-nudge sweep --metrics HOST:PORT`` serves beside its loop. The
port shows queue names: serve it on a private interface. ``/metrics`` needs
the ``metrics`` extra (``prometheus_client``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from stall_core import LedgerError

from ._reaper import Reaper
from .metrics import ReaperCollector
from .status_page import render_page

__all__ = ["serve_ops_port"]


class _Handlers:
    """The four pages over one reaper; status reads go one at a time."""

    def __init__(self, reaper: Reaper, refresh_s: int) -> None:
        self._reaper = reaper
        self._refresh_s = refresh_s
        self._registry = CollectorRegistry()
        self._registry.register(ReaperCollector(reaper))
        self._status_read = asyncio.Lock()

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self._registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(self, _: web.Request) -> web.Response:
        if self._reaper.health().running:
            return web.Response(text="ok: the sweep loop runs\n")
        return web.Response(status=503, text="the sweep loop is not running\n")

    async def readyz(self, _: web.Request) -> web.Response:
        health = self._reaper.health()
        return web.Response(status=200 if health.ready else 503, text=health.reason + "\n")

    async def page(self, _: web.Request) -> web.Response:
        # One status read at a time: a page left open in many tabs costs one query each.
        async with self._status_read:
            try:
                now, pairs = await self._reaper.status()
            except LedgerError as exc:
                return web.Response(status=503, text=f"{exc}\n")
        body = render_page(
            now,
            pairs,
            policy=self._reaper.policy,
            refresh_s=self._refresh_s,
            health=self._reaper.health(),
        )
        return web.Response(text=body, content_type="text/html")


@asynccontextmanager
async def serve_ops_port(
    reaper: Reaper, *, host: str, port: int, refresh: float = 15.0
) -> AsyncIterator[str]:
    """Serve the ops port on ``host:port`` (0: any free port); yields its base URL.

    ``refresh`` is how often the status page reloads itself, in seconds
    (whole, at least 1). Raises ``OSError`` when the address cannot be bound.
    """
    handlers = _Handlers(reaper, max(1, math.ceil(refresh)))
    app = web.Application()
    for path, handler in (
        ("/", handlers.page),
        ("/metrics", handlers.metrics),
        ("/healthz", handlers.healthz),
        ("/readyz", handlers.readyz),
    ):
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}"
    finally:
        await runner.cleanup()
