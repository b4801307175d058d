"""Names of any length: installing never makes a host write fail, and a long-named pair is nudged.

A btree entry stops near 2.7 kB, so our pending and claimed indexes split on
the length of a pair's names (rule ``short_names``): longer ones are indexed
by md5 of the pair's names, and our own tables key every pair by md5 too. A
pair's todos are all on one side of the split, since it depends on the
pair's names alone. Each check runs with every tick a full pass, and with
every tick after the ledger's first a delta (the long side is read by both).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger, check, host_schema_sql, migrate
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import POLICY, sweep
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

#: Random hex does not compress, so this queue name cannot fit a btree entry whole.
LONG_QUEUE = "lane-" + secrets.token_hex(1600)
#: The index design of an earlier build: one pending index keying the names whole.
OLD_PENDING_INDEX = """
CREATE INDEX old_pending ON todos (endpoint_id text_pattern_ops, queue text_pattern_ops,
                                   created_at, id COLLATE "C")
    INCLUDE (delivery_id) WHERE state = 'pending'
"""
#: The full-pass interval of each kind of run: every tick a full pass, or none after the first.
FULL_PASS_INTERVALS = {"full": timedelta(microseconds=1), "delta": timedelta(days=1)}

#: The ledger's first tick, before the todos are stalled (always a full pass), then the
#: ticks that nudge: the todos just crossed the threshold; the first backoff step ended.
FIRST_TICK = T0 + POLICY.threshold / 2
NUDGE_1 = T0 + POLICY.threshold + timedelta(seconds=1)
NUDGE_2 = NUDGE_1 + POLICY.backoff[0]


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


@pytest.fixture(name="kind", params=sorted(FULL_PASS_INTERVALS))
def _kind(request: pytest.FixtureRequest) -> str:
    """What the ticks after the ledger's first are: full passes, or deltas."""
    kind: str = request.param
    return kind


@pytest.fixture(name="driver")
def _driver(pg_pool: asyncpg.Pool, kind: str) -> PostgresDriver:
    """The reference host, its ledger's ticks after the first all of ``kind``."""
    return PostgresDriver(pg_pool, full_pass_interval=FULL_PASS_INTERVALS[kind])


async def long_named_todos(driver: PostgresDriver, count: int = 1) -> list[str]:
    """``count`` verified todos created at T0 on (ep-1, LONG_QUEUE), with a hook covering it."""
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-ep-1", endpoint_id="ep-1")
    await driver.add_delivery("dlv-1", endpoint_id="ep-1", verified=True, received_at=T0)
    ids = [f"t-{i}" for i in range(1, count + 1)]
    for todo in ids:
        await driver.create_todo(
            todo, endpoint_id="ep-1", queue=LONG_QUEUE, created_at=T0, delivery_id="dlv-1"
        )
    return ids


def kinds_expected(kind: str, ticks: int) -> list[str]:
    """The kinds of ``ticks`` ticks of a fresh ledger: its first is always a full pass."""
    return ["full", *[kind] * (ticks - 1)]


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
            await conn.execute(OLD_PENDING_INDEX)  # the name is long enough to matter

        report = await migrate(conn)

        assert "missing: index stall_nudge_pending_long on todos" in report.repaired
        assert () == (await check(conn)).problems
        assert True is await conn.fetchval(
            "SELECT indisvalid FROM pg_index"
            " WHERE indexrelid = 'stall_nudge_pending_long'::regclass"
        )
        assert 1 == await conn.fetchval(
            "SELECT count(*) FROM todos WHERE state = 'pending'"
            " AND md5(endpoint_id::text) = md5('ep-1') AND md5(queue) = md5($1)",
            LONG_QUEUE,
        )
    finally:
        await conn.close()


@pytest.mark.parametrize("kind", ["full"], indirect=True)
async def test_host_writes_of_long_named_todos_work_after_migrating(
    driver: PostgresDriver,
) -> None:
    """After migrating, the host creates, claims, requeues and completes a long-named todo."""
    [todo] = await long_named_todos(driver)

    await driver.claim(todo, owner="consumer", at=T0 + minutes(1))
    await driver.requeue(todo)
    await driver.claim(todo, owner="consumer", at=T0 + minutes(2))
    await driver.complete(todo)

    assert "done" == (await driver.todos())[todo].state
    # The claimed todo is found by the long side's key (md5 of the pair's names).
    assert 1 == await driver.pool.fetchval(
        "SELECT count(*) FROM todos WHERE claimed_at IS NOT NULL"
        " AND md5(endpoint_id::text) = md5('ep-1') AND md5(queue) = md5($1)",
        LONG_QUEUE,
    )


async def test_a_long_named_pair_is_nudged_backs_off_and_drains(
    driver: PostgresDriver, kind: str
) -> None:
    """A pair with a long queue name is nudged, charged again after its backoff, and drained."""
    [todo] = await long_named_todos(driver)
    wake = RecordingWake()

    reports = [await sweep(driver, at, wake) for at in (FIRST_TICK, NUDGE_1, NUDGE_2)]
    await driver.claim(todo, owner="consumer", at=NUDGE_2 + minutes(1))
    await driver.complete(todo)
    reports.append(await sweep(driver, NUDGE_2 + minutes(2), wake))

    assert kinds_expected(kind, 4) == [r.kind for r in reports]
    assert [(LONG_QUEUE, todo, 1), (LONG_QUEUE, todo, 2)] == [
        (n.queue, n.todo.id, n.number) for n in wake.sent
    ]
    assert (("ep-1", LONG_QUEUE),) == reports[-1].drained
    assert {} == await driver.ledger_rows()


async def claim_another(driver: PostgresDriver, at: datetime) -> None:
    """A claim stamped after the last nudge, of a todo it did not name."""
    await driver.claim("t-2", owner="consumer", at=at)


async def delete_the_named(driver: PostgresDriver, at: datetime) -> None:
    """The todo the last nudge named departs: its row is deleted, no claim stamped."""
    await driver.delete_todo("t-1")


@pytest.mark.parametrize(
    ("progress", "renamed"),
    [(claim_another, "t-1"), (delete_the_named, "t-2")],
    ids=["claim", "departure"],
)
async def test_a_long_named_pairs_progress_counts(
    driver: PostgresDriver,
    kind: str,
    progress: Callable[[PostgresDriver, datetime], Awaitable[None]],
    renamed: str,
) -> None:
    """A claim after the nudge, or the named todo departing, resets a long pair to nudge 1."""
    await long_named_todos(driver, count=3)
    wake = RecordingWake()

    reports = [await sweep(driver, at, wake) for at in (FIRST_TICK, NUDGE_1, NUDGE_2)]
    await progress(driver, NUDGE_2 + minutes(1))
    reports.append(await sweep(driver, NUDGE_2 + minutes(2), wake))

    assert kinds_expected(kind, 4) == [r.kind for r in reports]
    assert [(1, "t-1"), (2, "t-1"), (1, renamed)] == [(n.number, n.todo.id) for n in wake.sent]
    _, [status] = await PostgresLedger(driver.pool, clock=driver.clock).status(policy=POLICY)
    assert (NUDGE_2 + minutes(2) - T0, 2) == (status.oldest_age, status.pending_gated)
