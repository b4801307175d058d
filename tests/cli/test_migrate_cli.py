"""`stall-nudge migrate` with --footprint, --check, --print-sql and --uninstall, as a subprocess."""

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


async def test_check_exits_3_until_migrated_and_when_an_object_is_missing(blank_dsn: str) -> None:
    """--check names every problem and exits 3; once migrated it exits 0, until a trigger goes."""
    before = await cli("migrate", "--dsn", blank_dsn, "--check")
    created = await cli(
        "migrate", "--dsn", blank_dsn, "--host-schema", "--footprint", "incremental"
    )
    after = await cli("migrate", "--dsn", blank_dsn, "--check")
    conn = await asyncpg.connect(blank_dsn)
    try:
        await conn.execute("DROP TRIGGER stall_nudge_claim ON todos")
    finally:
        await conn.close()
    broken = await cli("migrate", "--dsn", blank_dsn, "--check")

    assert (3, "problem: host tables missing: endpoints, deliveries, todos, notify_hooks\n") == (
        before.status,
        before.out,
    )
    assert 0 == created.status
    assert "created trigger stall_nudge_claim on todos\n" in created.out
    assert (0, "schema version 4, footprint incremental: as migrate made it\n") == (
        after.status,
        after.out,
    )
    assert 3 == broken.status
    assert "problem: missing: trigger stall_nudge_claim on todos\n" in broken.out


async def test_print_sql_prints_the_migration_and_changes_nothing(blank_dsn: str) -> None:
    """--print-sql prints the concurrent index builds, then one transaction; nothing changes."""
    await cli("migrate", "--dsn", blank_dsn, "--host-schema")
    conn = await asyncpg.connect(blank_dsn)
    try:
        await conn.execute("DROP SCHEMA stall_nudge CASCADE; DROP TABLE queue_stall_nudges")
    finally:
        await conn.close()
    printed = await cli("migrate", "--dsn", blank_dsn, "--print-sql", "--footprint", "incremental")
    check = await cli("migrate", "--dsn", blank_dsn, "--check")

    assert 0 == printed.status
    assert printed.out.startswith("-- stall-nudge schema version 4, footprint incremental")
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending" in printed.out
    assert "BEGIN;\n" in printed.out
    assert "CREATE OR REPLACE TRIGGER stall_nudge_claim" in printed.out
    assert (3, "problem: not migrated: run stall-nudge migrate\n") == (check.status, check.out)


async def test_uninstall_prints_then_removes_every_object(blank_dsn: str) -> None:
    """--uninstall --print-sql shows the drops; --uninstall lists what it removed."""
    await cli("migrate", "--dsn", blank_dsn, "--host-schema", "--footprint", "incremental")

    printed = await cli("migrate", "--dsn", blank_dsn, "--uninstall", "--print-sql")
    removed = await cli("migrate", "--dsn", blank_dsn, "--uninstall")
    again = await cli("migrate", "--dsn", blank_dsn, "--uninstall")

    assert "DROP SCHEMA IF EXISTS stall_nudge CASCADE;" in printed.out
    assert 0 == removed.status
    assert "removed trigger stall_nudge_claim on todos\n" in removed.out
    assert "removed table queue_stall_nudges\n" in removed.out
    assert removed.out.endswith("uninstalled\n")
    assert (0, "nothing of stall-nudge's was here\n") == (again.status, again.out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--uninstall", "--footprint", "lean"), "--uninstall goes alone, or with --print-sql"),
        (("--check", "--footprint", "lean"), "--check compares with what is recorded"),
        (("--host-schema", "--check"), "--host-schema creates tables"),
    ],
)
async def test_mixed_actions_are_usage_mistakes(
    blank_dsn: str, args: tuple[str, ...], message: str
) -> None:
    """Options that do not go together exit 2 with one line, running nothing."""
    result = await cli("migrate", "--dsn", blank_dsn, *args)

    assert 2 == result.status
    assert 1 == len(result.err.splitlines())
    assert message in result.err
