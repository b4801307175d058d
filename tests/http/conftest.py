"""A memory board with one endpoint, a movable clock, fast delivery, and a consumer."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import ClassVar

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.memory import BoardError, MemoryBoard, MemoryHooks
from stall_testing import Received
from tests.support import FakeClock

#: Retries in milliseconds so tests only wait for what real retries need.
FAST = DeliveryPolicy(
    retry_delays=(timedelta(milliseconds=10), timedelta(milliseconds=20)),
    timeout=timedelta(milliseconds=300),
    retry_after_cap=timedelta(milliseconds=50),
)
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
#: Bound on every wait for a receipt, so a broken test fails instead of hanging.
PATIENCE = 5.0


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
