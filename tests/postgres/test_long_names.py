"""Names of any length: installing never makes a host write fail, and a long-named pair is nudged.

A btree entry stops near 2.7 kB, so our pending and claimed indexes split on
the length of a pair's names (rule ``short_names``): longer ones are indexed
by md5 of the pair's names, and our own tables key every pair by md5 too. A
pair's todos are all on one side of the split, since it depends on the
pair's names alone.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import PostgresLedger, host_schema_sql, migrate
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import POLICY, sweep
from tests import pg
from tests.postgres.pgboard import full_pass_done
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

#: Random hex does not compress, so this queue name cannot fit a btree entry whole.
LONG_QUEUE = "lane-" + secrets.token_hex(1600)
#: The index design of the build before: one pending index keying the names whole.
OLD_PENDING_INDEX = """
CREATE INDEX old_pending ON todos (endpoint_id text_pattern_ops, queue text_pattern_ops,
                                   created_at, id COLLATE "C")
    INCLUDE (delivery_id) WHERE state = 'pending'
"""


@pytest.fixture(name="host_only_dsn")
async def _host_only_dsn(pg_server: str) -> AsyncIterator[str]:
    """A database with the reference host tables and none of ours."""
    name = pg.unique_name("stall_host_only")
    await pg.create_database(pg_server, name, template="template0")
    dsn = pg.with_database(pg_server, name)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(host_schema_sql())
    finally:
        await conn.close()
    yield dsn
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="driver", params=["lean", "incremental"])
def _driver(request: pytest.FixtureRequest) -> PostgresDriver:
    """The reference host on each footprint."""
    pool_fixture = "pg_pool" if request.param == "lean" else "pg_pool_incremental"
    return PostgresDriver(request.getfixturevalue(pool_fixture))


async def long_named_todo(driver: PostgresDriver) -> str:
    """A verified todo created at T0 on (ep-1, LONG_QUEUE), with a hook covering it."""
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-ep-1", endpoint_id="ep-1")
    await driver.add_delivery("dlv-1", endpoint_id="ep-1", verified=True, received_at=T0)
    await driver.create_todo(
        "t-1", endpoint_id="ep-1", queue=LONG_QUEUE, created_at=T0, delivery_id="dlv-1"
    )
    return "t-1"


async def mark_full_pass_done(driver: PostgresDriver) -> None:
    """Make the next incremental tick a usual one (it judges what changed), not a full pass."""
    await full_pass_done(driver.pool, T0 + minutes(9))


async def test_migrate_succeeds_on_a_table_holding_a_long_name(host_only_dsn: str) -> None:
    """migrate indexes a todos table already holding a long-named todo; the old index could not."""
    conn = await asyncpg.connect(host_only_dsn)
    try:
        await conn.execute(
            "INSERT INTO endpoints VALUES ('ep-1', 'active');"
            f" INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
            f" VALUES ('t-1', 'ep-1', '{LONG_QUEUE}', 'pending', now())"
        )
        with pytest.raises(asyncpg.ProgramLimitExceededError, match="index row size"):
            await conn.execute(OLD_PENDING_INDEX)  # the test's name is long enough to matter

        report = await migrate(conn)

        assert "index stall_nudge_pending_long on todos" in report.created
        assert 1 == await conn.fetchval(
            "SELECT count(*) FROM todos WHERE state = 'pending'"
            " AND md5(endpoint_id::text) = md5('ep-1') AND md5(queue) = md5($1)",
            LONG_QUEUE,
        )
    finally:
        await conn.close()


async def test_host_writes_of_long_named_todos_work_after_migrating(
    driver: PostgresDriver,
) -> None:
    """After migrating, the host creates, claims, requeues and completes a long-named todo."""
    todo = await long_named_todo(driver)

    await driver.claim(todo, owner="consumer", at=T0 + minutes(1))
    await driver.requeue(todo)
    await driver.claim(todo, owner="consumer", at=T0 + minutes(2))
    await driver.complete(todo)

    assert "done" == (await driver.todos())[todo].state
    # Both claims reached the claimed index's long side, which the progress probe reads.
    assert 1 == await driver.pool.fetchval(
        "SELECT count(*) FROM todos WHERE claimed_at IS NOT NULL"
        " AND md5(endpoint_id::text) = md5('ep-1') AND md5(queue) = md5($1)",
        LONG_QUEUE,
    )


@pytest.mark.parametrize("full_pass", [True, False], ids=["full-pass", "usual-tick"])
async def test_a_long_named_pair_is_nudged_backs_off_and_drains(
    driver: PostgresDriver, full_pass: bool
) -> None:
    """A pair with a long queue name is nudged, charged again after its backoff, and drained."""
    todo = await long_named_todo(driver)
    if not full_pass:
        await mark_full_pass_done(driver)
    wake = RecordingWake()

    await sweep(driver, T0 + minutes(10), wake)
    await sweep(driver, T0 + minutes(16), wake)
    await driver.claim(todo, owner="consumer", at=T0 + minutes(17))
    await driver.complete(todo)
    last = await sweep(driver, T0 + minutes(18), wake)

    assert [(LONG_QUEUE, todo, 1), (LONG_QUEUE, todo, 2)] == [
        (n.queue, n.todo.id, n.number) for n in wake.sent
    ]
    assert 1 == len(last.drained)
    assert {} == await driver.ledger_rows()


async def test_a_long_named_pairs_claim_is_progress(driver: PostgresDriver) -> None:
    """A claim in a long-named pair after its nudge resets it to nudge 1 at once."""
    todo = await long_named_todo(driver)
    await driver.create_todo(
        "t-2", endpoint_id="ep-1", queue=LONG_QUEUE, created_at=T0, delivery_id="dlv-1"
    )
    wake = RecordingWake()

    await sweep(driver, T0 + minutes(10), wake)
    await sweep(driver, T0 + minutes(16), wake)
    await driver.claim(todo, owner="consumer", at=T0 + minutes(17))
    await sweep(driver, T0 + minutes(18), wake)

    assert [1, 2, 1] == [n.number for n in wake.sent]
    _, [status] = await PostgresLedger(driver.pool, clock=driver.clock).status(policy=POLICY)
    assert (minutes(18), 1) == (status.oldest_age, status.pending_gated)
