"""Names of any length: installing never makes a host write fail, and no pair is skipped silently.

A btree entry stops near 2.7 kB, so our indexes keyed by a pair's names hold
only pairs whose names fit in 2,000 bytes (``stall_core.names_fit``). A pair
with longer names is never swept; status lists it as ``names-too-long``, a
pair that needs a person. Each sweep check runs with every tick a full pass,
and with every tick after the ledger's first a delta.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger, check, host_schema_sql, migrate
from stall_core import Verdict
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import POLICY, sweep
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

#: Random hex does not compress, so this queue name cannot fit a btree entry whole.
LONG_QUEUE = "lane-" + secrets.token_hex(1600)
#: A pending index keying the names whole, with no length predicate.
WHOLE_NAMES_INDEX = "CREATE INDEX whole_names ON todos (endpoint_id, queue) WHERE state = 'pending'"
#: The full-pass interval of each kind of run: every tick a full pass, or none after the first.
FULL_PASS_INTERVALS = {"full": timedelta(microseconds=1), "delta": timedelta(days=1)}


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


async def test_migrate_succeeds_on_a_table_holding_a_long_name(host_only_dsn: str) -> None:
    """migrate indexes a table already holding a long-named todo; one of whole names could not."""
    conn = await asyncpg.connect(host_only_dsn)
    try:
        await conn.execute(
            "INSERT INTO endpoints VALUES ('ep-1', 'active');"
            f" INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
            f" VALUES ('t-1', 'ep-1', '{LONG_QUEUE}', 'pending', now())"
        )
        with pytest.raises(asyncpg.ProgramLimitExceededError, match="index row size"):
            await conn.execute(WHOLE_NAMES_INDEX)  # the name is long enough to matter

        report = await migrate(conn)

        assert "missing: index stall_nudge_pending on todos" in report.repaired
        assert () == (await check(conn)).problems
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


async def test_a_long_named_pair_is_never_swept_and_status_says_so(
    driver: PostgresDriver, kind: str
) -> None:
    """A stalled pair with a long queue name is not charged; status lists it as needing a person."""
    await long_named_todos(driver, count=2)
    await driver.create_todo("t-short", endpoint_id="ep-1", queue="lane-l", created_at=T0)
    wake = RecordingWake()
    stalled = T0 + POLICY.threshold + timedelta(seconds=1)

    reports = [await sweep(driver, at, wake) for at in (T0 + minutes(1), stalled)]

    assert ["full", "full" if kind == "full" else "delta"] == [r.kind for r in reports]
    assert [("lane-l", "t-short", 1)] == [(n.queue, n.todo.id, n.number) for n in wake.sent]
    assert [("ep-1", "lane-l")] == list(await driver.ledger_rows())
    _, pairs = await PostgresLedger(driver.pool, clock=driver.clock).status(policy=POLICY)
    verdicts = {p.queue: (p.verdict, p.sendable) for p in pairs}
    assert {LONG_QUEUE: (Verdict.NAMES_TOO_LONG, 2), "lane-l": (Verdict.BACKING_OFF, 1)} == verdicts
