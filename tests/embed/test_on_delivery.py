"""``open_reaper(on_delivery=...)``: each delivery's outcome, the way ``on_report`` gets a tick."""

from __future__ import annotations

import asyncpg
import pytest

import stall_nudge
from stall_core import DeliveryOutcome
from stall_testing import Receiver
from tests.cli.conftest import fill_board

pytestmark = pytest.mark.postgres


async def test_each_delivery_outcome_reaches_on_delivery_and_the_history(
    pg_dsn: str, pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """A delivered nudge and one whose hook answers 400 each reach on_delivery once, as booked."""
    await fill_board(pg_pool, receiver)
    got: list[DeliveryOutcome] = []

    async with stall_nudge.open_reaper(pg_dsn, on_delivery=got.append) as reaper:
        await reaper.tick()
        await reaper.settle()
        receiver.route("hook", 400)  # final: no retry
        await reaper.reset("ep-1", "lane-l", by="test", reason="again")
        await reaper.tick()
        await reaper.settle()
        history = await reaper.history(endpoint_id="ep-1", queue="lane-l")

    assert [("delivered", None, False), ("gave-up", True, True)] == [
        (o.outcome, o.detail is not None or None, o.refunded) for o in got
    ]
    booked = sorted((e.nudge, e.outcome) for e in history if e.event == "charged")
    assert [(1, "delivered"), (1, "gave-up")] == booked
