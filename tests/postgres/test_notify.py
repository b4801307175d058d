"""Mixed versions during a deploy: the todo_ready payload an older build parses.

An instance built before SPEC-0038 runs a LISTEN loop on ``todo_ready`` and
parses each payload as ``endpoint_id, queue = payload.split(":", 1)``. The
nudge path must send nothing on that channel (a nudge is delivered once,
through the hook, by the instance that charged it), and the creation path
keeps the payload exactly ``<endpoint_id>:<queue>``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy, Sweeper
from stall_testing import PostgresDriver, PostgresHost, RecordingWake
from stall_testing.contract import stalled_queue
from tests.support import T0, FakeClock, minutes

from .pgboard import listening

pytestmark = pytest.mark.postgres

QUEUES = ("lane-l", "a:b", "ns:lane:7", "::", "trailing:", "ünïcødé-队列-🚀", "quarantine")
ENDPOINTS = ("ep-1", "ep_2.eu-west", "Ёндпойнт")


def old_parse(payload: str) -> tuple[str, str]:
    """The LISTEN loop of a build before SPEC-0038, verbatim."""
    endpoint_id, queue = payload.split(":", 1)
    return endpoint_id, queue


@pytest.fixture(name="instances")
async def _instances(pg_dsn: str) -> AsyncIterator[list[asyncpg.Pool]]:
    """Two independent pools: a newer instance and another, on one database."""
    pools = [await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2) for _ in range(2)]
    yield pools
    for pool in pools:
        await pool.close()


async def board(pool: asyncpg.Pool, queues: tuple[str, ...]) -> None:
    """Every endpoint active with a covering hook and one verified todo per queue, made at T0."""
    driver = PostgresDriver(pool)
    for endpoint in ENDPOINTS:
        await stalled_queue(driver, endpoint=endpoint, queue=queues[0])
        for queue in queues[1:]:
            await driver.create_todo(
                f"todo-{endpoint}-{queue}",
                endpoint_id=endpoint,
                queue=queue,
                created_at=T0,
                delivery_id=f"dlv-{endpoint}-{queues[0]}",
            )


async def test_mixed_versions_during_a_deploy_nudges_notify_nothing(
    instances: list[asyncpg.Pool], pg_dsn: str
) -> None:
    """Mixed versions during a deploy: an old LISTEN loop hears no nudge; each nudge wakes once."""
    await board(instances[0], QUEUES)
    wakes = [RecordingWake(), RecordingWake()]
    clock = FakeClock(T0)
    sweepers = [
        Sweeper(ledger=PostgresLedger(pool, clock=clock), wake=wake, policy=PacingPolicy())
        for pool, wake in zip(instances, wakes, strict=True)
    ]

    async with listening(pg_dsn) as older_instance:
        while clock.now < T0 + minutes(10 * 60):
            clock.advance(minutes(5))
            await asyncio.gather(*(s.tick() for s in sweepers))
        heard = await older_instance.fence(instances[1])

    assert [] == heard
    woken = sorted((n.endpoint_id, n.queue, n.number) for w in wakes for n in w.sent)
    stalled = sorted((e, q) for e in ENDPOINTS for q in QUEUES if q != "quarantine")
    assert [(e, q, number) for e, q in stalled for number in range(1, 6)] == woken
    rows = await PostgresLedger(instances[0]).ledger_rows()
    assert dict.fromkeys(stalled, 5) == {key: row.nudges for key, row in rows.items()}


async def test_mixed_versions_during_a_deploy_old_parser_reads_every_payload(
    pg_pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Mixed versions during a deploy: the old parser reads every creation payload, colons too."""
    async with listening(pg_dsn) as older_instance:
        await board(pg_pool, QUEUES)
        heard = await older_instance.fence(pg_pool)

    created = [(e, q) for e in ENDPOINTS for q in QUEUES]
    assert [f"{e}:{q}" for e, q in created] == heard
    assert created == [old_parse(payload) for payload in heard]


async def test_an_endpoint_id_with_a_colon_is_misread_by_the_old_parser(
    pg_pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The payload is unchanged, so the old parser misreads an endpoint id containing ':'."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("tenant:7")

    async with listening(pg_dsn) as older_instance:
        await host.create_todo("t", endpoint_id="tenant:7", queue="lane", created_at=T0)
        heard = await older_instance.fence(pg_pool)

    # The payload format (SPEC-0038 keeps it) cannot say where the endpoint id ends:
    # endpoint ids must not contain ':' while a LISTEN loop splits on the first one.
    assert ["tenant:7:lane"] == heard
    assert ("tenant", "7:lane") == old_parse(heard[0])
