"""migrate: one plan that --print-sql prints, migrate runs and check reports, against this build.

Each test starts from a brand-new database. An earlier build's database
(schema version 4, with its triggers on the host's tables and its claim log)
is replayed from tests/postgres/data/schema_v4.sql.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres import (
    SCHEMA_VERSION,
    MigrationError,
    MissingHostTables,
    PostgresLedger,
    check,
    host_indexes,
    host_schema_sql,
    installed,
    migrate,
    plan,
    uninstall,
    uninstall_plan,
)
from stall_core import PacingPolicy
from stall_testing import FakeClock, PostgresDriver
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

SCHEMA_V4 = (Path(__file__).parent / "data" / "schema_v4.sql").read_text()
#: A host that claims "the next todo of a queue" keeps an index like this one.
HOST_CLAIM_INDEX = (
    "CREATE INDEX host_claim_next ON todos (endpoint_id, queue, created_at) WHERE state = 'pending'"
)


@pytest.fixture(name="dsn")
async def _dsn(pg_server: str) -> AsyncIterator[str]:
    """A brand-new database with no tables at all (cloned from template0)."""
    name = pg.unique_name("stall_empty")
    await pg.create_database(pg_server, name, template="template0")
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="conn")
async def _conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(dsn)
    yield conn
    await conn.close()


async def triggers(conn: asyncpg.Connection) -> set[str]:
    """Every trigger of ours by name, on any table."""
    rows = await conn.fetch(
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'stall\\_nudge\\_%'"
    )
    return {r["tgname"] for r in rows}


async def test_a_fresh_database_migrates_and_then_has_nothing_to_do(
    conn: asyncpg.Connection,
) -> None:
    """After migrate, the plan is empty, check finds nothing and --print-sql prints nothing."""
    said: list[str] = []

    report = await migrate(conn, host_schema=True, say=said.append)
    after = await plan(conn)

    assert SCHEMA_VERSION == report.version
    assert f"applied {SCHEMA_VERSION:04d}_baseline" in said
    assert ((), "") == (after.steps, after.sql())
    assert () == (await check(conn)).problems
    assert () == (await migrate(conn)).repaired
    state = await installed(conn)
    assert state is not None
    assert (SCHEMA_VERSION, "public") == (state.version, state.host_schema)


async def test_the_plan_on_a_fresh_database_drops_nothing(conn: asyncpg.Connection) -> None:
    """--print-sql on a database never migrated creates what is missing and drops nothing."""
    await conn.execute(host_schema_sql())

    printed = (await plan(conn)).sql()

    assert [] == [line for line in printed.splitlines() if line.startswith("DROP")]
    assert printed.count("CREATE INDEX CONCURRENTLY") == len(host_indexes())
    assert '"public".todos' in printed


async def test_the_printed_sql_applied_by_hand_leaves_a_database_check_accepts(
    conn: asyncpg.Connection, dsn: str, tmp_path: Path
) -> None:
    """psql -f on --print-sql's output migrates the database exactly as migrate would."""
    await conn.execute(host_schema_sql())

    applied = await pg.psql_file(dsn, (await plan(conn)).sql(), tmp_path)

    assert (0, b"") == applied

    assert () == (await check(conn)).problems
    assert () == (await plan(conn)).steps


#: A damage done by hand to a migrated database, and the problem line check must print.
DAMAGES: dict[str, tuple[str, str]] = {
    "missing index": (
        "DROP INDEX stall_nudge_arrivals",
        "missing: index stall_nudge_arrivals on todos",
    ),
    "invalid index": (
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'stall_nudge_claimed'::regclass",
        "invalid: index stall_nudge_claimed on todos (an interrupted build)",
    ),
    "different index": (
        "DROP INDEX stall_nudge_hooks;"
        " CREATE INDEX stall_nudge_hooks ON notify_hooks (endpoint_id)",
        "different: index stall_nudge_hooks on notify_hooks",
    ),
    "extra table": ("CREATE TABLE stall_nudge.notes (x int)", "extra: table notes"),
    "extra view": ("CREATE VIEW stall_nudge.glance AS SELECT 1 AS x", "extra: view glance"),
    "extra sequence": ("CREATE SEQUENCE stall_nudge.counter", "extra: sequence counter"),
    "extra view in the host's schema": (
        "CREATE VIEW stall_nudge_glance AS SELECT 1 AS x",
        "extra: view stall_nudge_glance",
    ),
    "extra function": (
        "CREATE FUNCTION stall_nudge.helper() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "extra: function helper()",
    ),
    "extra trigger": (
        "CREATE FUNCTION stall_nudge.noop() RETURNS trigger LANGUAGE plpgsql"
        " AS 'BEGIN RETURN NULL; END';"
        " CREATE TRIGGER stall_nudge_old AFTER INSERT ON todos"
        " FOR EACH ROW EXECUTE FUNCTION stall_nudge.noop()",
        "extra: trigger stall_nudge_old on todos (no build of ours keeps one)",
    ),
    "different table": (
        "ALTER TABLE stall_nudge.held ADD COLUMN note text",
        "different: table held",
    ),
    "different ledger constraint": (
        "ALTER TABLE queue_stall_nudges DROP CONSTRAINT stall_nudge_nudges_not_negative",
        "missing: constraint stall_nudge_nudges_not_negative on queue_stall_nudges",
    ),
    "missing table": ("DROP TABLE stall_nudge.sweeps", "missing: stall_nudge.sweeps"),
    "missing settings": ("DROP TABLE stall_nudge.settings", "missing: stall_nudge.settings"),
    "missing record": (
        "DELETE FROM stall_nudge.settings",
        "missing: the record of the host's schema (public)",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
async def test_check_names_each_problem_and_migrate_repairs_it(
    conn: asyncpg.Connection, damage: str
) -> None:
    """A damaged install is one problem line at check; migrate repairs it; check is then clean."""
    await migrate(conn, host_schema=True)
    sql, problem = DAMAGES[damage]
    await conn.execute(sql)

    found = await check(conn)
    printed = (await plan(conn)).sql()
    await migrate(conn)

    assert problem in found.problems
    assert "stall-nudge migrate repairs these" == found.problems[-1]
    assert f"-- {problem}" in printed
    assert () == (await check(conn)).problems


async def test_a_host_index_that_fits_is_used_and_ours_goes(conn: asyncpg.Connection) -> None:
    """The host's own pending index serves: ours is dropped concurrently, and check is clean."""
    await migrate(conn, host_schema=True)
    await conn.execute(HOST_CLAIM_INDEX)

    report = await migrate(conn)

    assert ("stall_nudge_pending", "host_claim_next") in report.used
    assert "stall_nudge_pending" not in await pg.ours(conn)
    assert () == (await check(conn)).problems


async def test_migrate_refuses_a_database_without_the_host_tables(conn: asyncpg.Connection) -> None:
    """No host tables: a one-line error naming them, and nothing of ours is made."""
    with pytest.raises(MissingHostTables, match="host tables missing"):
        await migrate(conn)

    assert set() == await pg.ours(conn)


async def test_migrate_refuses_a_schema_newer_than_this_build(conn: asyncpg.Connection) -> None:
    """A database a newer build migrated is left alone, with the reason in one line."""
    await migrate(conn, host_schema=True)
    await conn.execute("INSERT INTO stall_nudge.migrations VALUES ($1, 'future', now())", 99)

    with pytest.raises(MigrationError, match="newer than this build"):
        await migrate(conn)


async def test_check_warns_when_others_may_create_in_the_host_schema(
    conn: asyncpg.Connection,
) -> None:
    """A host schema where PUBLIC may create objects is advice, not a problem."""
    await migrate(conn, host_schema=True)
    await conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")

    report = await check(conn)

    assert () == report.problems
    assert any("PUBLIC" in line and "host's schema public" in line for line in report.advice)


async def earlier_build(conn: asyncpg.Connection) -> None:
    """A database an earlier build (version 4, incremental) migrated, as it left it."""
    await conn.execute(SCHEMA_V4)
    await conn.execute("SELECT set_config('search_path', 'public', false)")


async def test_an_earlier_build_is_upgraded_and_its_claim_log_folded(
    conn: asyncpg.Connection,
) -> None:
    """A logged claim no charge consumed is progress kept; every trigger, function and log goes."""
    await earlier_build(conn)
    await conn.execute("INSERT INTO endpoints VALUES ('ep', 'active')")
    await conn.execute(
        "INSERT INTO queue_stall_nudges VALUES ('ep', 'claimed', 5, $1), ('ep', 'quiet', 5, $1)",
        T0,
    )
    # Its transaction read the time before the last charge did: logged, not yet consumed.
    await conn.execute(
        "INSERT INTO stall_nudge.claims VALUES ('ep', 'claimed', $1)", T0 - minutes(1)
    )

    report = await migrate(conn)

    rows = {
        r["queue"]: tuple(r)
        for r in await conn.fetch(
            "SELECT queue, nudges, last_nudged_at, progressed_at IS NOT NULL"
            " FROM queue_stall_nudges"
        )
    }
    assert {"claimed": ("claimed", 0, T0, True), "quiet": ("quiet", 5, T0, False)} == rows
    assert any(r.startswith("extra: trigger stall_nudge_claim on todos") for r in report.repaired)
    assert set() == await triggers(conn)
    retired = {"claims", "changes", "objects", "log_claim", "log_change"}
    assert retired.isdisjoint(await pg.ours(conn))
    assert () == (await check(conn)).problems


async def test_a_trigger_drop_lets_host_writes_by_while_it_waits(
    conn: asyncpg.Connection, dsn: str
) -> None:
    """While a host transaction holds its table, migrate retries; the host's other writes go on."""
    await earlier_build(conn)
    await conn.execute("INSERT INTO endpoints VALUES ('ep', 'active')")
    holder = await asyncpg.connect(dsn)
    writer = await asyncpg.connect(dsn)
    busy: list[str] = []
    try:
        await holder.execute("BEGIN")
        await holder.execute(
            "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
            " VALUES ('held', 'ep', 'q', 'pending', now())"
        )
        migrating = asyncio.create_task(migrate(conn, say=busy.append))

        async def let_go() -> None:
            while not any("busy" in line for line in busy):  # noqa: ASYNC110 (a log line)
                await asyncio.sleep(0.01)

        # The event: migrate found the table held and let go of its lock request.
        await asyncio.wait_for(let_go(), timeout=120)
        # A write that comes while migrate waits for the lock does not queue behind it.
        await asyncio.wait_for(
            writer.execute(
                "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
                " VALUES ('meanwhile', 'ep', 'q', 'pending', now())"
            ),
            timeout=60,
        )
        assert not migrating.done()
        await holder.execute("COMMIT")
        await asyncio.wait_for(migrating, timeout=120)
    finally:
        await holder.close()
        await writer.close()

    assert set() == await triggers(conn)
    assert () == (await check(conn)).problems


async def test_uninstall_removes_every_trace_and_prints_what_it_runs(
    conn: asyncpg.Connection,
) -> None:
    """--uninstall drops every object of ours; its --print-sql says exactly that; host rows stay."""
    await migrate(conn, host_schema=True)
    await conn.execute("INSERT INTO endpoints VALUES ('ep', 'active')")

    printed = (await uninstall_plan(conn)).sql()
    removed = await uninstall(conn)

    assert set() == await pg.ours(conn)
    assert removed
    assert "DROP SCHEMA IF EXISTS stall_nudge CASCADE;" in printed
    assert 1 == await conn.fetchval("SELECT count(*) FROM endpoints")
    assert "" == (await uninstall_plan(conn)).sql()


async def test_a_migrated_ledger_sweeps(dsn: str, conn: asyncpg.Connection) -> None:
    """Right after migrate, a tick on the reference host charges its first nudge."""
    await migrate(conn, host_schema=True)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        driver = PostgresDriver(pool, FakeClock(T0))
        await stalled_queue(driver)
        driver.clock.set(T0 + timedelta(minutes=10))
        outcome = await PostgresLedger(pool, clock=driver.clock).charge_due(policy=PacingPolicy())
    finally:
        await pool.close()

    assert [1] == [n.number for n in outcome.charged]
