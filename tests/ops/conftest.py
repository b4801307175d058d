"""Shared by the operator-surface tests: a board, a verifying receiver, a reaper's log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from stall_testing import PostgresHost

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def ago(minutes: float) -> datetime:
    """The instant ``minutes`` before now, on this process's clock."""
    return datetime.now(UTC) - timedelta(minutes=minutes)


class Receiver:
    """A loopback notify hook that verifies each delivery with standardwebhooks.

    A verified delivery is answered ``status`` (204 unless changed) and
    recorded in ``accepted``; one that fails verification is answered 400 and
    its reason recorded in ``rejected``. Clearing ``answering`` holds every
    request until it is set again.
    """

    def __init__(self) -> None:
        self.accepted: list[dict[str, object]] = []
        self.rejected: list[str] = []
        self.status = 204
        self.answering = asyncio.Event()
        self.answering.set()
        self.arrived = asyncio.Event()
        self.url = ""
        self.changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def wait(self, count: int = 1) -> None:
        """Until ``count`` deliveries were accepted or rejected (a hang guard only)."""
        async with asyncio.timeout(60):
            while len(self.accepted) + len(self.rejected) < count:
                self.changed.clear()
                await self.changed.wait()

    def reasons(self) -> list[tuple[object, object]]:
        """(todo id, reason) of each accepted delivery, in arrival order."""
        metas = [body["meta"] for body in self.accepted]
        return [(m["todo_id"], m["reason"]) for m in metas]  # type: ignore[index]

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.arrived.set()
        await self.answering.wait()
        try:
            payload = Webhook(SECRET).verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            self.rejected.append(str(exc))
            self.changed.set()
            return web.Response(status=400)
        self.accepted.append(payload)
        self.changed.set()
        return web.Response(status=self.status)


@pytest.fixture(name="receiver")
async def _receiver() -> AsyncIterator[Receiver]:
    """A verifying loopback notify hook, answering 204."""
    receiver = Receiver()
    await receiver.start()
    yield receiver
    await receiver.stop()


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
    await host.add_hook(f"hook-{endpoint}", endpoint_id=endpoint, url=receiver.url, secret=SECRET)
    await host.create_todo(todo, endpoint_id=endpoint, queue=queue, created_at=ago(minutes))
