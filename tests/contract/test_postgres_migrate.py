"""migrate(): idempotent, all-or-nothing, and clear about missing host tables."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import CLAIMS_TABLE, LEDGER_TABLE, MissingHostTables, migrate
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
