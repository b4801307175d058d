"""Receivers answering with endless or trickling bodies: reads stay bounded, attempts end."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import attrs
from aiohttp import web

from adapters.http import CREATED, DeliveryPolicy, HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import TodoRef
from stall_testing import Received, Receiver
from tests.http.conftest import FAST, SECRET
from tests.support import T0, FakeClock

TODO = TodoRef(id="t1", created_at=T0)
BOUND = 4096


async def _send(board: MemoryBoard, policy: DeliveryPolicy) -> HookDispatcher:
    async with HookDispatcher(hooks=MemoryHooks(board), policy=policy) as dispatcher:
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
        await dispatcher.settle()
    return dispatcher


async def test_endless_error_body_is_bounded_on_every_retry(receiver: Receiver) -> None:
    """A 500 streaming forever is read to the bound, retried, and fails; the sender is cut off."""
    board = MemoryBoard(clock=FakeClock(T0))
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    written: list[int] = []

    async def endless(received: Received, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        sent = 0
        try:
            for _ in range(100_000):  # bounded: at most 6.4 GB, cut off long before
                await response.write(b"x" * 65536)
                sent += 65536
        except (ConnectionError, RuntimeError):
            pass
        written.append(sent)
        return response

    receiver.route("hook", endless)
    policy = attrs.evolve(FAST, max_response_bytes=BOUND, timeout=timedelta(seconds=30))

    dispatcher = await _send(board, policy)
    await asyncio.sleep(0)

    stats = dispatcher.stats
    assert (0, 1, 2) == (stats.delivered, stats.failed, stats.retries)
    assert 3 == len(receiver.at("hook"))
    assert all(sent < 64 * 2**20 for sent in written)


async def test_trickling_body_times_the_attempt_out(receiver: Receiver) -> None:
    """A 200 whose body trickles forever cannot hold an attempt past the timeout."""
    board = MemoryBoard(clock=FakeClock(T0))
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async def trickle(received: Received, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        try:
            for _ in range(600):  # bounded: one byte every 50 ms, for at most 30 s
                await response.write(b"x")
                await asyncio.sleep(0.05)
        except (ConnectionError, RuntimeError):
            pass
        return response

    receiver.route("hook", trickle)
    policy = attrs.evolve(FAST, max_response_bytes=1 << 20, timeout=timedelta(milliseconds=300))

    dispatcher = await _send(board, policy)

    # A 2xx whose body never ends is a timed-out attempt: retried under the same webhook-id.
    assert (0, 1) == (dispatcher.stats.delivered, dispatcher.stats.failed)
    assert 1 == len({r.headers["webhook-id"] for r in receiver.at("hook")})
    assert 3 == len(receiver.at("hook"))
