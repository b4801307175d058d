"""A real aiohttp receiver on loopback, a memory board with one endpoint, a movable clock."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import ClassVar

import attrs
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.memory import BoardError, MemoryBoard, MemoryHooks
from tests.support import FakeClock

#: Retries in milliseconds so tests only wait for what real retries need.
FAST = DeliveryPolicy(
    retry_delays=(timedelta(milliseconds=10), timedelta(milliseconds=20)),
    timeout=timedelta(milliseconds=300),
    retry_after_cap=timedelta(milliseconds=50),
)
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
#: Bound on every wait for the receiver, so a broken test fails instead of hanging.
PATIENCE = 5.0


@attrs.frozen(kw_only=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


#: A hook's behaviour for one request: a status, or a coroutine producing the response.
Step = int | Callable[[Received, web.Request], Awaitable[web.StreamResponse]]


class Receiver:
    """A loopback notify-hook receiver that records every request and follows a script."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.released = asyncio.Event()
        self._scripts: dict[str, list[Step]] = {}
        self._routes: dict[str, Step] = {}
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        self.released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def script(self, path: str, *steps: Step) -> None:
        """Answer the next requests on ``path`` with ``steps`` in order, then with 204."""
        self._scripts.setdefault(path, []).extend(steps)

    def route(self, path: str, step: Step) -> None:
        """Answer every unscripted request on ``path`` with ``step``."""
        self._routes[path] = step

    def at(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(self, count: int, path: str) -> list[Received]:
        """Wait until ``path`` has seen ``count`` requests; return them."""
        async with self._arrived:
            await asyncio.wait_for(
                self._arrived.wait_for(lambda: len(self.at(path)) >= count), PATIENCE
            )
        return self.at(path)

    async def hang(self, received: Received, request: web.Request) -> web.StreamResponse:
        """A step that answers only once ``released`` is set: a hook that never replies in time."""
        await self.released.wait()
        return web.Response(status=204)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = Received(
            path=request.match_info["path"],
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.read(),
        )
        self.requests.append(received)
        async with self._arrived:
            self._arrived.notify_all()
        script = self._scripts.get(received.path)
        step = script.pop(0) if script else self._routes.get(received.path, 204)
        if isinstance(step, int):
            return web.Response(status=step)
        return await step(received, request)


@pytest.fixture(name="receiver")
async def _receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    await receiver.start()
    yield receiver
    await receiver.stop()


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    """The board's clock (the ledger's time), at T0; tests move it by hand."""
    return FakeClock()


@pytest.fixture(name="board")
def _board(clock: FakeClock) -> MemoryBoard:
    board = MemoryBoard(clock=clock)
    board.add_endpoint("e1")
    return board


@pytest.fixture(name="dispatcher")
async def _dispatcher(board: MemoryBoard) -> AsyncIterator[HookDispatcher]:
    async with HookDispatcher(hooks=MemoryHooks(board), policy=FAST) as dispatcher:
        yield dispatcher


@pytest.fixture(name="board_hooks")
def _board_hooks(board: MemoryBoard) -> MemoryHooks:
    return MemoryHooks(board)


class OlderConsumer:
    """A one-shot consumer written before "stalled" existed: it knows created and requeued only.

    Each wake starts it once: it verifies the signature, reads meta.todo_id
    and claims that todo (or the pair's next one if someone beat it), then
    exits. It never branches on the reason: an unknown one is a plain wake.
    """

    KNOWN_REASONS: ClassVar[dict[str, str]] = {"created": "new work", "requeued": "work returned"}

    def __init__(self, board: MemoryBoard, clock: Callable[[], datetime]) -> None:
        self.board = board
        self.clock = clock
        self.woken_by: list[str] = []
        self.claimed: list[str] = []

    async def __call__(self, received: Received, request: web.Request) -> web.StreamResponse:
        body = Webhook(SECRET).verify(received.body, received.headers)
        meta = body["meta"]
        self.woken_by.append(self.KNOWN_REASONS.get(meta["reason"], "a wake"))
        try:
            todo = self.board.claim(meta["todo_id"], owner="older-consumer", at=self.clock())
        except BoardError:
            claimed = self.board.claim_next(
                meta["endpoint_id"], meta["queue"], owner="older-consumer", at=self.clock()
            )
            if claimed is None:
                return web.Response(status=204)
            todo = claimed
        self.claimed.append(todo.id)
        return web.Response(status=204)
