"""Hostile endpoint ids, queue names and titles, end to end on Postgres and a loopback hook."""

from __future__ import annotations

import json
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import PacingPolicy, Sweeper, printable
from stall_nudge.cli.status import CELL, render_table, status_json
from stall_testing import HostError, PostgresHost, Receiver
from tests.http.conftest import SECRET
from tests.support import T0, FakeClock, examples

from .conftest import wipe

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()
FAST = DeliveryPolicy(retry_delays=(), timeout=timedelta(seconds=5))
#: Characters Postgres text can hold: anything but NUL (and lone surrogates, not UTF-8).
STORABLE = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
SPECIAL = [
    ":",
    "a:b",
    "::",
    " lead and trail ",
    "\t\n\r",
    "ü🙂 日本",
    "\u202e\u200b",
    "quarantine ",
    "q:" + "ü🙂 x" * 124,  # 994 bytes with a colon: two of them are 6 bytes under names_fit
]
NAMES = st.one_of(st.sampled_from(SPECIAL), st.text(STORABLE, min_size=1, max_size=60))


async def _stalled_pair(
    host: PostgresHost, endpoint: str, queue: str, title: str, url: str
) -> None:
    await host.add_endpoint(endpoint)
    await host.add_delivery("d1", endpoint_id=endpoint, verified=True, received_at=T0)
    await host.add_hook("h1", endpoint_id=endpoint, url=url, secret=SECRET)
    await host.create_todo(
        "t1",
        endpoint_id=endpoint,
        queue=queue,
        created_at=T0 - timedelta(minutes=10),
        delivery_id="d1",
        title=title,
    )


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(endpoint=NAMES, queue=NAMES.filter(lambda q: q != "quarantine"), title=NAMES)
async def test_hostile_names_flow_through_unchanged(
    pg_pool: asyncpg.Pool, receiver: Receiver, endpoint: str, queue: str, title: str
) -> None:
    """Colons, unicode, whitespace, names near the size limit: ledger, body and status as sent."""
    await wipe(pg_pool)
    receiver.messages.clear()
    host = PostgresHost(pg_pool)
    ledger = PostgresLedger(pg_pool, clock=FakeClock(T0))
    await _stalled_pair(host, endpoint, queue, title, receiver.url("hook", SECRET))

    async with HookDispatcher(hooks=PostgresHooks(pg_pool), policy=FAST) as dispatcher:
        sweeper = Sweeper(ledger=ledger, wake=dispatcher, policy=POLICY)
        report = await sweeper.tick()
        await dispatcher.settle()
        await sweeper.settle()
    now, statuses = await ledger.status(policy=POLICY)

    [nudge] = report.charged
    assert (endpoint, queue, title) == (nudge.endpoint_id, nudge.queue, nudge.todo.title)
    assert [(endpoint, queue)] == list(await ledger.ledger_rows())
    [request] = receiver.at("hook")
    body = Webhook(SECRET).verify(request.body, request.headers)
    assert (endpoint, queue, "t1", title) == (
        body["meta"]["endpoint_id"],
        body["meta"]["queue"],
        body["meta"]["todo_id"],
        body["todo"]["title"],
    )
    [status] = statuses
    assert T0 == now
    assert (endpoint, queue) == (status.endpoint_id, status.queue)
    [as_json] = json.loads(status_json(statuses, now, POLICY))["pairs"]
    assert (endpoint, queue) == (as_json["endpoint_id"], as_json["queue"])
    # The table shows control characters escaped (a sender must not drive the terminal),
    # and long names cut.
    assert printable(endpoint, CELL) in "\n".join(render_table(statuses, now, POLICY))
    assert "t1" == await host.claim_next(endpoint, queue, owner="c", at=T0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("title", "before\x00after"),
        ("queue", "lane\x00l"),
        ("todo_id", "t\x00"),
    ],
)
async def test_nul_text_is_a_clear_error_for_that_row_only(
    pg_pool: asyncpg.Pool, field: str, value: str
) -> None:
    """A NUL Postgres cannot store is refused with a HostError naming it; its neighbours land."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    fields = {"todo_id": "t-bad", "queue": "lane-l", "title": "fine", field: value}

    await host.create_todo("t-before", endpoint_id="e1", queue="lane-l", created_at=T0)
    with pytest.raises(HostError, match="NUL"):
        await host.create_todo(
            fields["todo_id"],
            endpoint_id="e1",
            queue=fields["queue"],
            created_at=T0,
            title=fields["title"],
        )
    await host.create_todo("t-after", endpoint_id="e1", queue="lane-l", created_at=T0)

    assert ["t-after", "t-before"] == sorted(await host.todos())


async def test_nul_in_hook_or_endpoint_is_a_clear_error(pg_pool: asyncpg.Pool) -> None:
    """Endpoint ids, hook URLs and secrets with a NUL are refused by name, nothing written."""
    host = PostgresHost(pg_pool)
    with pytest.raises(HostError, match="NUL"):
        await host.add_endpoint("e\x001")
    await host.add_endpoint("e1")
    with pytest.raises(HostError, match="NUL"):
        await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1/\x00", secret=SECRET)
    with pytest.raises(HostError, match="NUL") as caught:
        await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1/", secret=SECRET + "\x00")

    assert SECRET not in str(caught.value)
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM notify_hooks")


async def test_a_lone_surrogate_in_a_secret_or_url_is_refused_by_field_unquoted(
    pg_pool: asyncpg.Pool,
) -> None:
    """A secret or URL that is not encodable is refused naming the field, never quoting it."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    with pytest.raises(HostError, match=r"^secret holds text that cannot be encoded") as secret:
        await host.add_hook(
            "h1", endpoint_id="e1", url="http://127.0.0.1/", secret=SECRET + "\ud800"
        )
    with pytest.raises(HostError, match=r"^url holds text that cannot be encoded") as url:
        await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1/\udfff", secret=SECRET)

    assert (False, False) == (SECRET in str(secret.value), "127.0.0.1" in str(url.value))
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM notify_hooks")


async def test_pair_too_long_for_notify_is_still_created(pg_pool: asyncpg.Pool) -> None:
    """A pair whose todo_ready payload passes NOTIFY's 8000-byte limit still gets its todo."""
    host = PostgresHost(pg_pool)
    endpoint, queue = "e" * 5000, "q" * 5000
    await host.add_endpoint(endpoint)

    await host.create_todo("t1", endpoint_id=endpoint, queue=queue, created_at=T0)

    assert "t1" == await host.claim_next(endpoint, queue, owner="c", at=T0)


async def test_an_incompressible_huge_queue_name_is_stored(pg_pool: asyncpg.Pool) -> None:
    """A queue name too large for a btree entry is stored: our indexes never refuse a host write."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    huge = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(4000))  # ~12 KB, no repeats

    await host.create_todo("t-huge", endpoint_id="e1", queue=huge, created_at=T0)
    await host.create_todo("t-ok", endpoint_id="e1", queue="lane-l", created_at=T0)

    assert ["t-huge", "t-ok"] == sorted(await host.todos())
    assert "t-huge" == await host.claim_next("e1", huge, owner="c", at=T0)
