"""One hook that hangs never delays another: each hook has its own lane and worker bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import attrs
import pytest

from adapters.http import CREATED, HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import Nudge, TodoRef
from stall_testing import Receiver
from tests.support import T0

from .conftest import FAST, PATIENCE, SECRET

TODO = TodoRef(id="t1", created_at=T0, title="Deploy lane-l")
#: Long enough that no hanging attempt times out while a test runs.
PATIENT = attrs.evolve(FAST, timeout=timedelta(seconds=60))


@pytest.fixture(name="hanging")
async def _hanging() -> AsyncIterator[Receiver]:
    """A second loopback server whose every request hangs until the test releases it."""
    async with Receiver() as hanging:
        hanging.route("hang", hanging.hang())
        yield hanging


async def test_a_healthy_hook_is_delivered_while_a_hanging_hook_holds_its_attempts(
    board: MemoryBoard, receiver: Receiver, hanging: Receiver
) -> None:
    """With 100 messages stuck on a hanging hook, a healthy hook's nudge is delivered meanwhile."""
    board.add_endpoint("slow")
    board.add_hook("h-hang", endpoint_id="slow", url=hanging.url("hang", SECRET), secret=SECRET)
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async with HookDispatcher(hooks=MemoryHooks(board), policy=PATIENT, workers=4) as dispatcher:
        for _ in range(100):
            await dispatcher.notify(endpoint_id="slow", queue="q", todo=TODO, reason=CREATED)
        await hanging.wait_for(4, "hang")
        receipt = await dispatcher.wake(
            Nudge(endpoint_id="e1", queue="lane-l", todo=TODO, number=1, charged_at=T0)
        )
        delivered = await asyncio.wait_for(receipt, PATIENCE)
        during = (len(hanging.at("hang")), dispatcher.outstanding)
        hanging.release()
        await dispatcher.settle()

    assert True is delivered
    # Only the hanging hook's own 4 workers were ever in flight; its 100 were all still unfinished.
    assert (4, 100) == during
    assert (101, 100) == (dispatcher.stats.delivered, len(hanging.at("hang")))


async def test_many_hanging_hooks_do_not_add_up_to_a_shared_pool(
    board: MemoryBoard, receiver: Receiver, hanging: Receiver
) -> None:
    """Ten hooks hanging at once, each at its bound, still leave the healthy hook undelayed."""
    board.add_endpoint("slow")
    for i in range(10):
        board.add_hook(
            f"h-hang-{i}", endpoint_id="slow", url=hanging.url("hang", SECRET), secret=SECRET
        )
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async with HookDispatcher(hooks=MemoryHooks(board), policy=PATIENT, workers=4) as dispatcher:
        for _ in range(20):
            await dispatcher.notify(endpoint_id="slow", queue="q", todo=TODO, reason=CREATED)
        # 10 hooks x 4 workers each: ten times what a shared pool of 4 could hold.
        await hanging.wait_for(40, "hang")
        receipt = await dispatcher.wake(
            Nudge(endpoint_id="e1", queue="lane-l", todo=TODO, number=1, charged_at=T0)
        )
        delivered = await asyncio.wait_for(receipt, PATIENCE)
        during = (len(hanging.at("hang")), dispatcher.outstanding)
        hanging.release()
        await dispatcher.settle()

    assert (True, 40, 200) == (delivered, *during)
    assert 201 == dispatcher.stats.delivered


async def test_one_hooks_deliveries_keep_their_order_within_its_lane(
    board: MemoryBoard, receiver: Receiver
) -> None:
    """With one worker per hook, a hook receives its messages in the order they were queued."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async with HookDispatcher(hooks=MemoryHooks(board), policy=FAST, workers=1) as dispatcher:
        for i in range(20):
            todo = TodoRef(id=f"t{i}", created_at=T0)
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=todo, reason=CREATED)
        await dispatcher.settle()

    todo_ids = [
        r.body.split(b'"todo_id":"')[1].split(b'"')[0].decode() for r in receiver.at("hook")
    ]
    assert [f"t{i}" for i in range(20)] == todo_ids
