"""migrate(): numbered migrations applied once, a footprint kept or changed, a check, an uninstall.

Each test starts from a brand-new database; the earlier build's schema
(version 3) is replayed from tests/postgres/data/schema_v3.sql.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres import (
    LEDGER_TABLE,
    SCHEMA_VERSION,
    MigrationError,
    MissingHostTables,
    check,
    host_schema_sql,
    installed,
    migrate,
    migration_sql,
    uninstall,
    uninstall_sql,
)
from tests import pg
from tests.postgres.pgboard import HOST_TABLES, host_rows
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

SCHEMA_V3 = (Path(__file__).parent / "data" / "schema_v3.sql").read_text()
#: Every trigger of the incremental footprint, on its table.
TRIGGERS = {
    ("stall_nudge_claim", "todos"),
    ("stall_nudge_claimed_insert", "todos"),
    ("stall_nudge_created", "todos"),
    ("stall_nudge_moved", "todos"),
    ("stall_nudge_state", "todos"),
    ("stall_nudge_deleted", "todos"),
    ("stall_nudge_truncated", "todos"),
    ("stall_nudge_endpoint_state", "endpoints"),
    ("stall_nudge_truncated", "endpoints"),
    ("stall_nudge_hook", "notify_hooks"),
    ("stall_nudge_truncated", "notify_hooks"),
    ("stall_nudge_verified", "deliveries"),
    ("stall_nudge_truncated", "deliveries"),
    ("stall_nudge_ledger_delete", "queue_stall_nudges"),
    ("stall_nudge_truncated", "queue_stall_nudges"),
}
#: A host that claims "the next todo of a queue" keeps an index like this one.
HOST_CLAIM_INDEX = (
    "CREATE INDEX host_claim_next ON todos (endpoint_id, queue, created_at) WHERE state = 'pending'"
)


@pytest.fixture(name="conn")
async def _conn(pg_server: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a brand-new database with no tables at all (cloned from template0)."""
    name = pg.unique_name("stall_empty")
    await pg.create_database(pg_server, name, template="template0")
    conn = await asyncpg.connect(pg.with_database(pg_server, name))
    yield conn
    await conn.close()
    await pg.drop_database(pg_server, name)


async def triggers(conn: asyncpg.Connection) -> set[tuple[str, str]]:
    """Every trigger of ours (by name) on any table: (trigger, table)."""
    rows = await conn.fetch(
        "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE NOT t.tgisinternal AND t.tgname LIKE 'stall\\_nudge\\_%'"
    )
    return {(r["tgname"], r["relname"]) for r in rows}


async def ours(conn: asyncpg.Connection) -> set[str]:
    """Every relation, function and schema of ours by name, whatever migrate recorded."""
    rows = await conn.fetch(
        "SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'stall_nudge' OR c.relname LIKE 'stall\\_nudge%'"
        "    OR c.relname = 'queue_stall_nudges'"
        " UNION ALL SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'stall_nudge' OR p.proname LIKE 'stall\\_nudge%'"
        " UNION ALL SELECT nspname FROM pg_namespace WHERE nspname = 'stall_nudge'"
    )
    return {r["name"] for r in rows} | {name for name, _ in await triggers(conn)}


async def test_a_new_install_is_lean_and_lists_everything_it_creates(
    conn: asyncpg.Connection,
) -> None:
    """A first migrate is lean: no trigger on a host table; each object it made is listed once."""
    said: list[str] = []

    report = await migrate(conn, host_schema=True, say=said.append)

    assert (SCHEMA_VERSION, "lean") == (report.version, report.footprint)
    assert set() == await triggers(conn)
    for created in (
        "table queue_stall_nudges",
        "schema stall_nudge",
        "index stall_nudge_pending on todos",
        "index stall_nudge_claimed on todos",
        "index stall_nudge_hooks on notify_hooks",
    ):
        assert created in report.created
        assert f"created {created}" in said
    assert [] == [c for c in report.created if c.startswith(("trigger", "function"))]
    assert () == (await check(conn)).problems
    assert [SCHEMA_VERSION] == [
        r["version"] for r in await conn.fetch("SELECT version FROM stall_nudge.migrations")
    ]


async def test_a_migration_is_applied_once(conn: asyncpg.Connection) -> None:
    """A second migrate changes nothing and records nothing again."""
    await migrate(conn, host_schema=True)
    before = await conn.fetch("SELECT * FROM stall_nudge.migrations")

    again = await migrate(conn)

    assert ((), ()) == (again.created, again.removed)
    assert before == await conn.fetch("SELECT * FROM stall_nudge.migrations")


async def test_the_footprint_is_a_reversible_setting_a_plain_migrate_keeps(
    conn: asyncpg.Connection,
) -> None:
    """--footprint incremental installs triggers, a plain migrate keeps them, lean drops them."""
    await migrate(conn, host_schema=True)

    incremental = await migrate(conn, footprint="incremental")
    kept = await migrate(conn)
    after_kept = await triggers(conn)
    lean = await migrate(conn, footprint="lean")

    assert "incremental" == incremental.footprint
    assert {f"trigger {name} on {table}" for name, table in TRIGGERS} <= set(incremental.created)
    assert "function stall_nudge.log_claim" in incremental.created
    assert ("incremental", ()) == (kept.footprint, kept.created)
    assert TRIGGERS == after_kept
    assert ("lean", set()) == (lean.footprint, await triggers(conn))
    assert "function stall_nudge.log_claim" in lean.removed
    state = await installed(conn)
    assert state is not None
    assert "lean" == state.footprint


async def test_going_lean_folds_the_claim_log_into_the_ledger(conn: asyncpg.Connection) -> None:
    """A logged claim no charge consumed becomes a pair with no ledger row: its next nudge is 1."""
    await migrate(conn, host_schema=True, footprint="incremental")
    await conn.execute(
        "INSERT INTO queue_stall_nudges VALUES ('ep', 'claimed', 4, $1), ('ep', 'quiet', 4, $1)", T0
    )
    await conn.execute("INSERT INTO stall_nudge.claims VALUES ('ep', 'claimed', $1)", T0)

    await migrate(conn, footprint="lean")

    assert [("ep", "quiet")] == [
        tuple(r) for r in await conn.fetch("SELECT endpoint_id, queue FROM queue_stall_nudges")
    ]
    assert 0 == await conn.fetchval("SELECT count(*) FROM stall_nudge.claims")


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_an_earlier_build_upgrades_keeping_its_footprint_and_every_claim(
    conn: asyncpg.Connection, version: int
) -> None:
    """Schema versions 1 to 3: the ledger and every logged claim stay, the rest of theirs goes."""
    await conn.execute(host_schema_sql())
    await conn.execute(SCHEMA_V3)
    await conn.execute("UPDATE stall_nudge_schema SET version = $1", version)
    await conn.execute("INSERT INTO endpoints VALUES ('ep', 'active')")
    await conn.execute("INSERT INTO queue_stall_nudges VALUES ('ep', 'lane', 2, $1)", T0)
    await conn.execute("INSERT INTO stall_nudge_claims VALUES ('ep', 'lane', $1)", T0 + minutes(1))

    report = await migrate(conn)

    assert "incremental" == report.footprint
    assert TRIGGERS == await triggers(conn)
    assert [("ep", "lane", T0 + minutes(1))] == [
        tuple(r) for r in await conn.fetch("SELECT * FROM stall_nudge.claims")
    ]
    assert [("ep", "lane", 2)] == [
        tuple(r)
        for r in await conn.fetch("SELECT endpoint_id, queue, nudges FROM queue_stall_nudges")
    ]
    for gone in ("table stall_nudge_claims", "function stall_nudge_log_claim"):
        assert gone in report.removed
    assert "index stall_nudge_todos_pending_short on todos" in report.removed
    assert (await ours(conn)).isdisjoint({"stall_nudge_claims", "stall_nudge_schema"})
    assert () == (await check(conn)).problems


async def test_an_older_builds_migrate_during_a_deploy_is_caught_and_repaired(
    conn: asyncpg.Connection,
) -> None:
    """An earlier build's objects brought back are extra to --check; migrate removes them."""
    await migrate(conn, host_schema=True)
    await conn.execute(SCHEMA_V3)  # an older build's migrate, run after ours

    problems = (await check(conn)).problems
    repaired = await migrate(conn)

    assert "extra: index stall_nudge_todos_pending_short on todos (an earlier build's)" in problems
    assert "extra: trigger stall_nudge_log_claim on todos (an earlier build's)" in problems
    assert "extra: table stall_nudge_claims (an earlier build's)" in problems
    assert "trigger stall_nudge_log_claim on todos" in repaired.removed
    assert () == (await check(conn)).problems
    # A long queue name no longer meets an index that cannot hold it.
    await conn.execute(
        "INSERT INTO endpoints VALUES ('ep', 'active');"
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
        f" VALUES ('t', 'ep', '{'q' * 3000}', 'pending', now())"
    )


async def test_check_names_what_is_missing_different_or_extra(conn: asyncpg.Connection) -> None:
    """Each object gone, changed or not ours is one problem; migrate repairs them."""
    await migrate(conn, host_schema=True, footprint="incremental")
    await conn.execute(
        "DROP TRIGGER stall_nudge_claim ON todos;"
        "DROP INDEX stall_nudge_hooks;"
        "CREATE INDEX stall_nudge_hooks ON notify_hooks (endpoint_id, id);"
        "DROP TABLE stall_nudge.changes;"
        "CREATE INDEX stall_nudge_mine ON todos (title)"
    )

    problems = (await check(conn)).problems

    assert "missing: trigger stall_nudge_claim on todos" in problems
    assert "missing: table stall_nudge.changes" in problems
    assert (
        "different: index stall_nudge_hooks on notify_hooks is not as migrate made it" in problems
    )
    assert "extra: index stall_nudge_mine on todos (not made by migrate)" in problems
    await conn.execute("DROP INDEX stall_nudge_mine; DROP INDEX stall_nudge_hooks")
    await migrate(conn)
    assert () == (await check(conn)).problems


async def test_a_host_index_that_fits_is_used_and_left_alone(conn: asyncpg.Connection) -> None:
    """With the host's own pending index, ours is not built, and uninstall does not touch theirs."""
    await conn.execute(host_schema_sql())
    await conn.execute(HOST_CLAIM_INDEX)

    report = await migrate(conn)
    removed = await uninstall(conn)

    assert (("stall_nudge_pending", "host_claim_next"),) == report.used
    assert "index stall_nudge_pending on todos" not in report.created
    assert "table queue_stall_nudges" in removed
    assert "host_claim_next" in {
        r["relname"] for r in await conn.fetch("SELECT relname FROM pg_class")
    }


async def test_a_host_index_of_another_shape_does_not_fit(conn: asyncpg.Connection) -> None:
    """An index without the pending predicate, or on an expression, leaves ours to be built."""
    await conn.execute(host_schema_sql())
    await conn.execute(
        "CREATE INDEX all_todos ON todos (endpoint_id, queue, created_at);"
        "CREATE INDEX lowered ON todos (endpoint_id, lower(queue), created_at)"
        " WHERE state = 'pending'"
    )

    report = await migrate(conn)

    assert () == report.used
    assert "index stall_nudge_pending on todos" in report.created


async def test_an_index_left_invalid_is_rebuilt(conn: asyncpg.Connection) -> None:
    """An INVALID index of ours (a failed concurrent build) is dropped and built again."""
    await conn.execute(host_schema_sql())
    await conn.execute(
        "INSERT INTO endpoints VALUES ('ep', 'active');"
        "INSERT INTO notify_hooks (id, endpoint_id, url, secret, enabled)"
        " VALUES ('h1', 'ep', 'http://127.0.0.1:9/', 's', true),"
        "        ('h2', 'ep', 'http://127.0.0.1:9/', 's', true)"
    )
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY stall_nudge_hooks ON notify_hooks (endpoint_id)"
        )
    said: list[str] = []

    await migrate(conn, say=said.append)

    assert any("stall_nudge_hooks is invalid" in line for line in said)
    valid = await conn.fetchval(
        "SELECT indisvalid AND NOT indisunique FROM pg_index"
        " WHERE indexrelid = 'stall_nudge_hooks'::regclass"
    )
    assert valid is True


async def test_a_long_index_build_reports_its_progress(
    conn: asyncpg.Connection, pg_server: str
) -> None:
    """While a concurrent build waits (here for an open transaction), migrate says how far it is."""
    await conn.execute(host_schema_sql())
    dsn = pg.with_database(pg_server, await conn.fetchval("SELECT current_database()"))
    monitor, blocker = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    said: list[str] = []
    progressed = asyncio.Event()

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("index ") and ": waiting" in line:
            progressed.set()

    try:
        blocking = blocker.transaction()
        await blocking.start()
        # A writer of todos: a concurrent build of an index on todos waits for it.
        await blocker.execute("LOCK TABLE todos IN ROW EXCLUSIVE MODE")
        migration = asyncio.ensure_future(
            migrate(conn, monitor=monitor, say=say, progress_every=0.05)
        )
        async with asyncio.timeout(60):
            await progressed.wait()
        await blocking.rollback()
        await migration
    finally:
        await monitor.close()
        await blocker.close()

    assert [] != [line for line in said if line.startswith("index stall_nudge_pending on todos:")]


async def test_uninstall_removes_every_trace_and_leaves_the_hosts_rows(
    conn: asyncpg.Connection,
) -> None:
    """After --uninstall nothing of ours is left, and the host's rows are as they were."""
    await migrate(conn, host_schema=True, footprint="incremental")
    await conn.execute("INSERT INTO endpoints VALUES ('ep', 'active')")
    await conn.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
        " VALUES ('t', 'ep', 'q', 'pending', $1)",
        T0,
    )
    before = await host_rows(conn)
    printed = await uninstall_sql(conn)

    await uninstall(conn)

    assert set() == await ours(conn)
    assert before == await host_rows(conn)
    assert "DROP SCHEMA IF EXISTS stall_nudge CASCADE;" in printed
    assert "DROP INDEX CONCURRENTLY IF EXISTS stall_nudge_pending;" in printed


async def test_a_table_of_ours_dropped_by_hand_is_restored(conn: asyncpg.Connection) -> None:
    """migrate applies the recorded migrations again to restore a missing table of ours."""
    await migrate(conn, host_schema=True)
    await conn.execute(f"DROP TABLE {LEDGER_TABLE}; DROP TABLE stall_nudge.sweeps")

    report = await migrate(conn)

    assert {"table queue_stall_nudges", "table stall_nudge.sweeps"} <= set(report.created)
    assert () == (await check(conn)).problems


async def test_the_printed_sql_migrates_as_migrate_does(
    conn: asyncpg.Connection, pg_server: str
) -> None:
    """Running --print-sql's output by hand leaves what migrate leaves, and --check is clean."""
    await conn.execute(host_schema_sql())
    printed = await migration_sql(conn, footprint="incremental")
    indexes, rest = printed.split("\n-- 2. ")
    transaction, drops = rest.split("\n-- 3. ")
    # One statement at a time outside any transaction, then the transaction as one script.
    for statement in [*indexes.split(";\n"), f"-- {transaction}", *f"-- {drops}".split(";\n")]:
        if any(line and not line.startswith("--") for line in statement.splitlines()):
            await conn.execute(statement)
    report = await migrate(conn)

    assert "incremental" == report.footprint
    assert TRIGGERS == await triggers(conn)
    assert [] == [c for c in report.created if not c.startswith("table stall_nudge.objects")], (
        report.created
    )


async def test_without_host_tables_migrate_names_them_and_creates_nothing(
    conn: asyncpg.Connection,
) -> None:
    """With no host schema, migrate raises MissingHostTables naming all four, leaving nothing."""
    with pytest.raises(MissingHostTables) as raised:
        await migrate(conn)

    assert f"host tables missing: {', '.join(HOST_TABLES)}" in str(raised.value)
    assert "--host-schema" in str(raised.value)
    assert set() == await ours(conn)


async def test_concurrent_migrations_neither_race_nor_fail(pg_server: str) -> None:
    """Two processes migrating one database at once both succeed; each object is made once."""
    name = pg.unique_name("stall_empty")
    await pg.create_database(pg_server, name, template="template0")
    dsn = pg.with_database(pg_server, name)
    conns = [await asyncpg.connect(dsn) for _ in range(2)]
    try:
        await conns[0].execute(host_schema_sql())
        reports = await asyncio.gather(*(migrate(c) for c in conns))

        created = [name for report in reports for name in report.created]
        assert sorted(set(created)) == sorted(created)
        assert "table queue_stall_nudges" in created
    finally:
        for c in conns:
            await c.close()
        await pg.drop_database(pg_server, name)


async def test_a_bad_footprint_is_named(conn: asyncpg.Connection) -> None:
    """A footprint that is neither lean nor incremental is refused before anything is done."""
    with pytest.raises(ValueError, match="footprint must be one of lean, incremental: 'fast'"):
        await migrate(conn, host_schema=True, footprint="fast")

    assert set() == await ours(conn)


async def test_a_host_table_missing_a_column_fails_and_records_nothing(
    conn: asyncpg.Connection,
) -> None:
    """A todos table without claimed_at fails on that column; no migration is recorded."""
    await conn.execute(host_schema_sql())
    await conn.execute("ALTER TABLE todos DROP COLUMN claimed_at CASCADE")

    with pytest.raises((asyncpg.UndefinedColumnError, MigrationError), match="claimed_at"):
        await migrate(conn)

    assert await installed(conn) is None
