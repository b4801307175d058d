"""The ops port: ``/metrics``, ``/healthz``, ``/readyz`` and the status page ``/``, read-only.

What ``stall-nudge sweep --metrics HOST:PORT`` serves beside its loop. The
port shows queue names: serve it on a private interface. ``/metrics`` needs
the ``metrics`` extra (``prometheus_client``).

Theory of operation
-------------------
aiohttp's low-level server with our own four routes (``GET`` and ``HEAD``),
so every answer, aiohttp's own included, passes through this module:

- Every response carries ``SECURITY_HEADERS``: the status page's content
  security policy (its one style; no script, no frame around it) and
  ``nosniff``. That includes the 400 aiohttp answers for a request it
  cannot parse, which it builds outside any handler: ``_Connection``
  adds them there.
- A request aiohttp cannot parse (a request line or a header over 8 KB, a
  malformed line) is a client's mistake, not ours: it is answered 400 with
  a fixed text (aiohttp's would quote the request) and logged as one line
  at debug, never with a traceback. Only a bug of ours keeps aiohttp's
  traceback.
- An HTTP/0.9 request (a bare ``GET /`` line) gets a 400 and the
  connection is closed: that protocol has no headers to carry the policy.
- Texts that may quote names (a ledger error, a readiness reason) are
  escaped and cut.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from aiohttp import HttpVersion10, web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from stall_core import LedgerError, printable_text

from ._reaper import Reaper
from .metrics import ReaperCollector
from .status_page import CONTENT_SECURITY_POLICY, render_page

__all__ = ["SECURITY_HEADERS", "serve_ops_port"]

log = logging.getLogger("stall_nudge.ops_port")

#: Sent with every response of the port.
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_METHODS = ("GET", "HEAD")

_Page = Callable[[web.BaseRequest], Awaitable[web.Response]]


class _Connection(web.RequestHandler):
    """aiohttp's handler of one connection, whose own error answers get our headers too."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, HttpProcessingError):
            # The client sent what HTTP cannot parse: one quiet line, a fixed answer.
            log.debug(
                "refused a request from %s that cannot be parsed: %s",
                request.remote,
                type(exc).__name__,
            )
            response: web.StreamResponse = web.Response(
                status=status, text=f"{status} {HTTPStatus(status).phrase}\n"
            )
            response.force_close()
        else:  # a bug of ours: aiohttp logs it with its traceback
            response = super().handle_error(request, status, exc, message)
        response.headers.update(SECURITY_HEADERS)
        return response


class _Server(web.Server):
    """aiohttp's low-level server, one ``_Connection`` per connection."""

    def __init__(
        self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], **connection: Any
    ) -> None:
        super().__init__(handler, **connection)
        self._connection = connection

    def __call__(self) -> web.RequestHandler:
        return _Connection(self, loop=asyncio.get_running_loop(), **self._connection)


class _Handlers:
    """The four pages over one reaper; status reads go one at a time."""

    def __init__(self, reaper: Reaper, refresh_s: int) -> None:
        self._reaper = reaper
        self._refresh_s = refresh_s
        self._registry = CollectorRegistry()
        self._registry.register(ReaperCollector(reaper))
        self._status_read = asyncio.Lock()
        self._pages: dict[str, _Page] = {
            "/": self.page,
            "/metrics": self.metrics,
            "/healthz": self.healthz,
            "/readyz": self.readyz,
        }

    async def answer(self, request: web.BaseRequest) -> web.StreamResponse:
        """Route ``request``; every answer carries ``SECURITY_HEADERS``."""
        page = self._pages.get(request.path)
        if request.version < HttpVersion10:
            response = web.Response(status=400, text="HTTP/1.0 or later, please\n")
            response.force_close()
        elif page is None:
            response = web.Response(status=404, text="not found\n")
        elif request.method not in _METHODS:
            response = web.Response(status=405, text="method not allowed\n")
            response.headers["Allow"] = ", ".join(_METHODS)
        else:
            response = await page(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    async def metrics(self, _: web.BaseRequest) -> web.Response:
        return web.Response(
            body=generate_latest(self._registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(self, _: web.BaseRequest) -> web.Response:
        if self._reaper.health().running:
            return web.Response(text="ok: the sweep loop runs\n")
        return web.Response(status=503, text="the sweep loop is not running\n")

    async def readyz(self, _: web.BaseRequest) -> web.Response:
        health = self._reaper.health()
        reason = printable_text(health.reason)
        return web.Response(status=200 if health.ready else 503, text=reason + "\n")

    async def page(self, _: web.BaseRequest) -> web.Response:
        # One status read at a time: a page left open in many tabs costs one query each.
        async with self._status_read:
            try:
                now, pairs = await self._reaper.status()
            except LedgerError as exc:
                return web.Response(status=503, text=printable_text(str(exc)) + "\n")
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
    runner = web.ServerRunner(_Server(handlers.answer, access_log=None), shutdown_timeout=0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}"
    finally:
        await runner.cleanup()
