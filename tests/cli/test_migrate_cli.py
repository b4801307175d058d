"""`stall-nudge migrate --check` and `--print-sql`, run as a subprocess against real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests import pg

from .test_cli import cli

pytestmark = pytest.mark.postgres


@pytest.fixture(name="blank_dsn")
async def _blank_dsn(pg_server: str) -> AsyncIterator[str]:
    """A database with no tables at all."""
    name = pg.unique_name("stall_cli_migrate")
    await pg.create_database(pg_server, name)
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


async def test_check_exits_3_while_behind_and_0_once_migrated(blank_dsn: str) -> None:
    """--check says why a schema is behind and exits 3; once migrated it exits 0."""
    before = await cli("migrate", "--dsn", blank_dsn, "--check")
    created = await cli("migrate", "--dsn", blank_dsn, "--host-schema", "--host-id-type", "bigint")
    after = await cli("migrate", "--dsn", blank_dsn, "--check")

    assert (3, "behind: host tables missing: endpoints, deliveries, todos, notify_hooks\n") == (
        before.status,
        before.out,
    )
    assert 0 == created.status
    assert (0, "schema version 3: up to date\n") == (after.status, after.out)


async def test_print_sql_prints_one_transaction_and_changes_nothing(blank_dsn: str) -> None:
    """--print-sql prints the steps in BEGIN/COMMIT (CONCURRENTLY on request), creating nothing."""
    await cli("migrate", "--dsn", blank_dsn, "--host-schema")
    await pg_drop_our_tables(blank_dsn)
    printed = await cli("migrate", "--dsn", blank_dsn, "--print-sql")
    concurrent = await cli("migrate", "--dsn", blank_dsn, "--print-sql", "--concurrently")
    check = await cli("migrate", "--dsn", blank_dsn, "--check")

    assert 0 == printed.status
    assert printed.out.startswith("-- stall-nudge schema version 3")
    assert "BEGIN;\n" in printed.out
    assert printed.out.endswith("COMMIT;\n")
    assert "CONCURRENTLY" not in printed.out
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_todos_pending_short" in (
        concurrent.out
    )
    assert 3 == check.status


async def test_concurrently_alone_is_a_usage_mistake(blank_dsn: str) -> None:
    """--concurrently without --print-sql exits 2 with one line, running nothing."""
    result = await cli("migrate", "--dsn", blank_dsn, "--concurrently")

    assert (2, "stall-nudge: error: --concurrently goes with --print-sql\n") == (
        result.status,
        result.err,
    )


async def pg_drop_our_tables(dsn: str) -> None:
    """Leave only the host tables: our schema, dropped."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "DROP TABLE queue_stall_nudges, stall_nudge_claims, stall_nudge_changes,"
            " stall_nudge_held, stall_nudge_sweeps, stall_nudge_schema"
        )
    finally:
        await conn.close()
