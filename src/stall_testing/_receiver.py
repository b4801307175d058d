"""A notify hook for tests: it records each request, checks its signature and answers as told.

Each request is verified as a Standard Webhooks consumer would: the v1
signature ``adapters.http`` signs with, under the secret its hook was given
(``url(path, secret)``), and a timestamp within five minutes of the
receiver's clock (the wall clock unless a test's dispatcher runs on another,
such as a ``FakeClock``). One that fails is kept as refused and answered 401
without running its step, so a test that expected a delivery cannot pass.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from aiohttp import web

from adapters.http import parse_secret, sign

__all__ = ["PATIENCE", "TOLERANCE", "Received", "Receiver", "Step"]

#: How long ``wait_for`` waits, in seconds: far past any delivery, so only a hang reaches it.
PATIENCE = 60.0
#: How far a request's timestamp may be from the receiver's clock (Standard Webhooks' window).
TOLERANCE = timedelta(minutes=5)


def _wall_clock() -> datetime:
    return datetime.now(UTC)


@attrs.frozen(kw_only=True)
class Received:
    """One request: its path (no leading slash), headers (names lower-cased) and body."""

    path: str
    headers: dict[str, str]
    body: bytes
    #: It failed verification for the hook at ``path`` (signature or timestamp): answered 401.
    refused: bool

    def json(self) -> Any:
        return json.loads(self.body)


#: How a path answers one request: a status, or a coroutine that makes the response.
Step = int | Callable[[Received, web.Request], Awaitable[web.StreamResponse]]


class Receiver:
    """Notify hooks on 127.0.0.1 that verify and record every request.

    For a host's tests as for ours::

        async with Receiver() as receiver:
            url = receiver.url("hook", secret)  # the hook's URL; register it with ``secret``
            ...  # wake the pair
            [message] = await receiver.wait_for(1, "hook")
            assert "stalled" == message.json()["meta"]["reason"]

    A path answers 204 unless told otherwise: ``route`` sets its answer,
    ``script`` its next few, ``hang`` holds one until ``release``.
    ``messages`` holds every request in arrival order, refused ones too;
    ``at(path)`` the verified ones on a path. Give ``clock`` when the sender
    stamps another clock's time (a ``FakeClock``).
    """

    def __init__(self, *, clock: Callable[[], datetime] = _wall_clock) -> None:
        self.messages: list[Received] = []
        self.port = 0
        self._clock = clock
        self._secrets: dict[str, str] = {}
        self._routes: dict[str, Step] = {}
        self._scripts: dict[str, list[Step]] = {}
        self._released = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Release held requests, answer those in hand, then close (at most once)."""
        self.release()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def url(self, path: str, secret: str) -> str:
        """The URL of the hook at ``path``, whose requests must be signed with ``secret``."""
        if self._secrets.setdefault(path, secret) != secret:
            raise ValueError(f"the hook at {path!r} already has another secret")
        return f"http://127.0.0.1:{self.port}/{path}"

    def route(self, path: str, step: Step) -> None:
        """Answer each request on ``path`` that no script covers with ``step``."""
        self._routes[path] = step

    def script(self, path: str, *steps: Step) -> None:
        """Answer the next requests on ``path`` with ``steps``, one each, in order."""
        self._scripts.setdefault(path, []).extend(steps)

    def hang(self, status: int = 204) -> Step:
        """A step that answers ``status`` only once ``release()`` is called."""

        async def held(received: Received, request: web.Request) -> web.StreamResponse:
            await self._released.wait()
            return web.Response(status=status)

        return held

    def release(self) -> None:
        """Let every held request be answered, and answer later ones at once."""
        self._released.set()

    def at(self, path: str) -> list[Received]:
        """The verified requests on ``path``, in arrival order."""
        return [m for m in self.messages if m.path == path and not m.refused]

    @property
    def refused(self) -> list[Received]:
        return [m for m in self.messages if m.refused]

    async def wait_for(self, count: int, path: str) -> list[Received]:
        """Wait until ``path`` has ``count`` verified requests, and return them.

        A refused request ends the wait with an AssertionError: it was never delivered.
        """
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.at(path)) >= count or self.refused),
                PATIENCE,
            )
        if self.refused:
            raise AssertionError(f"a request on {self.refused[0].path!r} did not verify")
        return self.at(path)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        headers = {name.lower(): value for name, value in request.headers.items()}
        body = await request.read()
        received = Received(
            path=path, headers=headers, body=body, refused=not self._verifies(path, headers, body)
        )
        self.messages.append(received)
        async with self._arrived:
            self._arrived.notify_all()
        if received.refused:
            return web.Response(status=401)
        script = self._scripts.get(path)
        step = script.pop(0) if script else self._routes.get(path, 204)
        if isinstance(step, int):
            return web.Response(status=step)
        return await step(received, request)

    def _verifies(self, path: str, headers: dict[str, str], body: bytes) -> bool:
        """The timestamp is recent and one listed signature is v1 under the hook's key."""
        secret = self._secrets.get(path)
        if secret is None:
            return False
        try:
            key = parse_secret(secret)
            timestamp = int(headers["webhook-timestamp"])
            expected = sign(key, headers["webhook-id"], timestamp, body).encode()
        except (KeyError, ValueError):  # no header, not a number, a malformed secret or id
            return False
        if abs(timestamp - self._clock().timestamp()) > TOLERANCE.total_seconds():
            return False
        offered = headers.get("webhook-signature", "").split()
        return any(hmac.compare_digest(expected, s.encode("utf-8", "replace")) for s in offered)
