"""migrate(): idempotent, all-or-nothing, versioned, printable, and clear about what is missing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import (
    CLAIMS_TABLE,
    LEDGER_TABLE,
    SCHEMA_VERSION,
    MigrationError,
    MissingHostTables,
    host_schema_sql,
    migrate,
    migration_sql,
    schema_behind,
)
from tests import pg

from .pgboard import HOST_TABLES

pytestmark = pytest.mark.postgres

OWN_INDEXES = (
    "stall_nudge_ledger_pair",
    "stall_nudge_ledger_due",
    "stall_nudge_claims_key",
    "stall_nudge_changes_due",
    "stall_nudge_held_pair",
    "stall_nudge_held_due",
    "stall_nudge_todos_pending_short",
    "stall_nudge_todos_pending_long",
    "stall_nudge_deliveries_unverified",
    "stall_nudge_hooks_endpoint",
)
#: What the tick reads besides the ledger and the claim log, and the schema's version.
TICK_TABLES = ("stall_nudge_changes", "stall_nudge_held", "stall_nudge_sweeps")
#: Everything a first migration of an empty database creates, in the order it reports.
EVERYTHING = (
    *HOST_TABLES,
    LEDGER_TABLE,
    CLAIMS_TABLE,
    *TICK_TABLES,
    "stall_nudge_schema",
    *OWN_INDEXES,
)


@pytest.fixture(name="empty_dsn")
async def _empty_dsn(pg_server: str) -> AsyncIterator[str]:
    """A brand-new database with no tables at all (cloned from template0)."""
    name = pg.unique_name("stall_empty")
    await pg.create_database(pg_server, name, template="template0")
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


async def relations(conn: asyncpg.Connection) -> set[str]:
    """The names of the tables and indexes in the public schema."""
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
    )
    return {r["relname"] for r in rows}


async def test_a_migrated_database_needs_nothing(pg_dsn: str) -> None:
    """On an already migrated clone, migrate creates nothing, with or without host schema."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert () == (await migrate(conn)).created
        assert () == (await migrate(conn, host_schema=True)).created
    finally:
        await conn.close()


async def test_migrate_twice_creates_everything_once(empty_dsn: str) -> None:
    """The first run creates host tables, ledger and indexes; the second run creates nothing."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        first = await migrate(conn, host_schema=True)
        after_first = await relations(conn)
        second = await migrate(conn, host_schema=True)
        third = await migrate(conn)

        assert EVERYTHING == first.created
        assert ((), ()) == (second.created, third.created)
        assert after_first == await relations(conn)
    finally:
        await conn.close()


async def test_without_host_tables_migrate_names_them_and_creates_nothing(empty_dsn: str) -> None:
    """With no host schema, migrate raises MissingHostTables naming all four, leaving no table."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        with pytest.raises(MissingHostTables) as raised:
            await migrate(conn)

        assert "host tables missing: endpoints, deliveries, todos, notify_hooks" in str(
            raised.value
        )
        assert "--host-schema" in str(raised.value)
        assert set() == await relations(conn)
    finally:
        await conn.close()


async def test_some_host_tables_missing_are_named(empty_dsn: str) -> None:
    """With only some host tables present, the error names exactly the absent ones."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        await conn.execute("CREATE TABLE endpoints (id text PRIMARY KEY, state text NOT NULL)")
        await conn.execute("CREATE TABLE todos (id text PRIMARY KEY)")

        with pytest.raises(MissingHostTables, match="missing: deliveries, notify_hooks \\("):
            await migrate(conn)

        assert LEDGER_TABLE not in await relations(conn)
    finally:
        await conn.close()


async def test_concurrent_migrations_neither_race_nor_fail(empty_dsn: str) -> None:
    """Two processes migrating one empty database at once both succeed; each object is made once."""
    conns = [await asyncpg.connect(empty_dsn) for _ in range(2)]
    try:
        reports = await asyncio.gather(*(migrate(c, host_schema=True) for c in conns))

        created = sorted(name for report in reports for name in report.created)
        assert sorted(EVERYTHING) == created
    finally:
        for conn in conns:
            await conn.close()


async def test_a_host_table_missing_a_column_fails_whole(empty_dsn: str) -> None:
    """A todos table without claimed_at fails on that column and leaves no ledger table behind."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        await migrate(conn, host_schema=True)
        await conn.execute(
            f"DROP TABLE {LEDGER_TABLE}; ALTER TABLE todos DROP COLUMN claimed_at CASCADE"
        )

        with pytest.raises(asyncpg.UndefinedColumnError, match="claimed_at"):
            await migrate(conn)

        assert LEDGER_TABLE not in await relations(conn)
    finally:
        await conn.close()


#: The schema the build before this one left (names keyed whole, a primary key on the
#: ledger, the legacy claimed-todos index), with no version recorded.
EARLIER_BUILD = """
CREATE TABLE queue_stall_nudges (endpoint_id text NOT NULL, queue text NOT NULL,
    nudges int NOT NULL CHECK (nudges >= 1), last_nudged_at timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, queue));
CREATE TABLE stall_nudge_claims (endpoint_id text NOT NULL, queue text NOT NULL,
    claimed_at timestamptz NOT NULL);
CREATE INDEX stall_nudge_claims_pair ON stall_nudge_claims (endpoint_id, queue, claimed_at);
CREATE TABLE stall_nudge_held (endpoint_id text NOT NULL, queue text NOT NULL,
    todo_id text NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (endpoint_id, queue));
CREATE INDEX stall_nudge_held_order
    ON stall_nudge_held (created_at, endpoint_id COLLATE "C", queue COLLATE "C");
CREATE INDEX stall_nudge_todos_pending
    ON todos (endpoint_id text_pattern_ops, queue text_pattern_ops, created_at, id COLLATE "C")
    INCLUDE (delivery_id) WHERE state = 'pending';
CREATE INDEX stall_nudge_todos_claimed
    ON todos (endpoint_id, queue, claimed_at) WHERE claimed_at IS NOT NULL;
INSERT INTO queue_stall_nudges VALUES ('ep-1', 'lane-l', 3, '2026-10-15 12:00Z');
CREATE FUNCTION stall_nudge_log_change() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER stall_nudge_log_moved AFTER UPDATE OF state ON todos
    FOR EACH ROW EXECUTE FUNCTION stall_nudge_log_change();
"""
RETIRED = (
    "stall_nudge_claims_pair",
    "stall_nudge_held_order",
    "stall_nudge_todos_pending",
    "stall_nudge_todos_claimed",
    "queue_stall_nudges_pkey",
    "stall_nudge_held_pkey",
)


async def test_migrate_records_the_schema_version(pg_dsn: str) -> None:
    """A migrated database records this build's schema version, and schema_behind finds nothing."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert SCHEMA_VERSION == await conn.fetchval("SELECT version FROM stall_nudge_schema")
        assert [] == await schema_behind(conn)
    finally:
        await conn.close()


async def test_an_earlier_build_schema_is_behind_and_upgrades_in_place(empty_dsn: str) -> None:
    """An earlier build's schema is behind; migrate retires its indexes, keeping its ledger rows."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        await conn.execute(host_schema_sql())
        await conn.execute(EARLIER_BUILD)
        behind = await schema_behind(conn)

        await migrate(conn)

        assert f"schema version unrecorded, this build needs {SCHEMA_VERSION}" in behind
        assert any(r.startswith("indexes missing: stall_nudge_ledger_pair") for r in behind)
        assert [] == await schema_behind(conn)
        assert set() == set(RETIRED) & await relations(conn)
        assert 0 == await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'stall_nudge_log_moved'"
        )
        assert [("ep-1", "lane-l", 3)] == [
            tuple(r)
            for r in await conn.fetch("SELECT endpoint_id, queue, nudges FROM queue_stall_nudges")
        ]
    finally:
        await conn.close()


@pytest.mark.parametrize("version", [1, 2])
async def test_an_earlier_schema_upgrades_its_ledger_delete_function(
    pg_dsn: str, version: int
) -> None:
    """Version 1 logged a hand-deleted row as '-infinity', 2 at its oldest pending todo
    gate or not; migrating replaces the function with one that stamps its oldest work."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            f"UPDATE stall_nudge_schema SET version = {version};"
            " CREATE OR REPLACE FUNCTION stall_nudge_log_ledger_delete() RETURNS trigger"
            " LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"
        )
        behind = await schema_behind(conn)

        await migrate(conn)

        assert [f"schema version {version}, this build needs {SCHEMA_VERSION}"] == behind
        assert [] == await schema_behind(conn)
        body = await conn.fetchval(
            "SELECT prosrc FROM pg_proc WHERE proname = 'stall_nudge_log_ledger_delete'"
        )
        assert "look_after IS NOT NULL" in body
        assert "gate_d.verified" in body
    finally:
        await conn.close()


async def test_a_newer_or_broken_schema_is_named(pg_dsn: str) -> None:
    """A newer recorded version, a dropped trigger and an invalid index are each one reason."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "UPDATE stall_nudge_schema SET version = version + 1;"
            " DROP TRIGGER stall_nudge_log_created ON todos;"
            " UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = 'stall_nudge_todos_pending_long'::regclass"
        )

        behind = await schema_behind(conn)
        with pytest.raises(
            MigrationError,
            match="invalid by a failed CREATE INDEX CONCURRENTLY: stall_nudge_todos_pending_long",
        ):
            await migrate(conn)

        assert [
            f"schema version {SCHEMA_VERSION + 1} is newer than this build's {SCHEMA_VERSION}: "
            "upgrade stall-nudge",
            "indexes invalid (a failed CONCURRENTLY build): stall_nudge_todos_pending_long; "
            "DROP INDEX them and migrate again",
            "triggers missing: stall_nudge_log_created",
        ] == behind
    finally:
        await conn.close()


@pytest.mark.parametrize("concurrently", [False, True], ids=["one-transaction", "concurrently"])
async def test_the_printed_sql_migrates_as_migrate_does(
    empty_dsn: str, pg_dsn: str, concurrently: bool
) -> None:
    """Run by hand, the printed SQL leaves what migrate leaves, and migrate then does nothing."""
    conn = await asyncpg.connect(empty_dsn)
    migrated = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(host_schema_sql())
        printed = await migration_sql(conn, concurrently=concurrently)
        ahead, _, transaction = printed.rpartition("BEGIN;\n")
        for statement in (s for s in ahead.split(";\n") if "CONCURRENTLY" in s):
            await conn.execute(statement)  # each on its own, outside any transaction
        await conn.execute("BEGIN;\n" + transaction)

        assert ("CREATE INDEX CONCURRENTLY" in printed) is concurrently
        assert () == (await migrate(conn)).created
        assert await relations(migrated) == await relations(conn)
        assert [] == await schema_behind(conn)
    finally:
        await conn.close()
        await migrated.close()


async def test_print_sql_builds_only_a_large_tables_indexes_concurrently(empty_dsn: str) -> None:
    """A todos table the planner puts at 150,000 rows gets CONCURRENTLY; small tables do not."""
    conn = await asyncpg.connect(empty_dsn)
    try:
        await conn.execute(host_schema_sql())
        await conn.execute("UPDATE pg_class SET reltuples = 150000 WHERE oid = 'todos'::regclass")

        printed = await migration_sql(conn)

        concurrent = {
            line.split()[-1]
            for line in printed.splitlines()
            if line.startswith("CREATE INDEX CONCURRENTLY IF NOT EXISTS")
        }
        assert {"stall_nudge_todos_pending_short", "stall_nudge_todos_pending_long"} == concurrent
        assert "DROP INDEX CONCURRENTLY IF EXISTS stall_nudge_todos_claimed;" in printed
    finally:
        await conn.close()
