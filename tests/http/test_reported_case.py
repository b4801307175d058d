"""The reported case end to end: real Postgres, real HTTP, a one-shot consumer, a moved clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from adapters.http import CREATED, HookDispatcher
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import PacingPolicy, Sweeper, TodoRef
from stall_testing import HostError, PostgresHost, Received, Receiver
from tests.support import T0, FakeClock

from .conftest import FAST, SECRET

pytestmark = pytest.mark.postgres

FIRST_BACKOFF = PacingPolicy().backoff[0]


class OneShotConsumer:
    """Started once per wake (ADR-0029): verify, claim meta.todo_id, finish it, exit."""

    def __init__(self, host: PostgresHost, clock: FakeClock) -> None:
        self.host = host
        self.clock = clock
        self.runs: list[tuple[str, str, datetime]] = []  # (reason, todo claimed, at)

    async def __call__(self, received: Received, request: web.Request) -> web.StreamResponse:
        meta = Webhook(SECRET).verify(received.body, received.headers)["meta"]
        todo_id: str | None = meta["todo_id"]
        try:
            await self.host.claim(meta["todo_id"], owner="one-shot", at=self.clock())
        except HostError:
            todo_id = await self.host.claim_next(
                meta["endpoint_id"], meta["queue"], owner="one-shot", at=self.clock()
            )
        if todo_id is not None:
            await self.host.complete(todo_id)
            self.runs.append((meta["reason"], todo_id, self.clock()))
        return web.Response(status=204)


async def test_the_reported_case(pg_pool: asyncpg.Pool, receiver: Receiver) -> None:
    """The reported case: woken within the first backoff after each claim until lane-l is empty."""
    clock = FakeClock()
    host = PostgresHost(pg_pool)
    consumer = OneShotConsumer(host, clock)
    receiver.route("consumer", consumer)
    await host.add_endpoint("e1")
    await host.add_hook("h1", endpoint_id="e1", url=receiver.url("consumer", SECRET), secret=SECRET)
    await host.add_delivery("d1", endpoint_id="e1", verified=True, received_at=T0)
    for i, todo_id in enumerate(("t1", "t2", "t3")):
        await host.create_todo(
            todo_id,
            endpoint_id="e1",
            queue="lane-l",
            delivery_id="d1",
            created_at=T0 + timedelta(seconds=i),
            title=f"lane-l work {i + 1}",
        )

    async with HookDispatcher(hooks=PostgresHooks(pg_pool), policy=FAST) as dispatcher:
        # The moved clock stands in for the database's: it is the ledger's time.
        ledger = PostgresLedger(pg_pool, clock=clock)
        sweeper = Sweeper(ledger=ledger, wake=dispatcher)
        # The one inbound webhook's creation wake: the consumer claims one todo and exits.
        await dispatcher.notify(
            endpoint_id="e1",
            queue="lane-l",
            todo=TodoRef(id="t1", created_at=T0, title="lane-l work 1"),
            reason=CREATED,
        )
        await dispatcher.settle()
        # No further inbound webhook: only the reaper tick runs, once a minute, for seven hours.
        for _ in range(7 * 60):
            clock.advance(timedelta(minutes=1))
            await sweeper.tick()
            await dispatcher.settle()
            await sweeper.settle()

    assert 0 == sweeper.refunded
    assert [("created", "t1"), ("stalled", "t2"), ("stalled", "t3")] == [
        (reason, todo) for reason, todo, _ in consumer.runs
    ]
    for (_, _, previous), (_, _, woken) in zip(consumer.runs, consumer.runs[1:], strict=False):
        assert woken - previous <= FIRST_BACKOFF
    assert 3 == len(receiver.at("consumer"))
    assert {"done"} == {row["state"] for row in (await host.todos()).values()}
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.queue_stall_nudges")
