"""`stall-nudge migrate` with --check, --print-sql, --uninstall and --host-schema, in process.

The plan itself (each problem, each repair) is tested in tests/postgres/test_migrate.py;
these tests hold the command line to it: exit statuses, one line a problem, and what is
printed. Install, check and uninstall as an operator runs them: test_cli.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.postgres import SCHEMA_VERSION, host_schema_sql
from tests import pg
from tests.cli.conftest import cli

pytestmark = pytest.mark.postgres

CURRENT = f"schema version {SCHEMA_VERSION}: as this build makes it\n"
NOT_MIGRATED = "problem: not migrated: run stall-nudge migrate\n"


@pytest.fixture(name="blank_dsn")
async def _blank_dsn(pg_server: str) -> AsyncIterator[str]:
    """A database with no tables at all."""
    name = pg.unique_name("stall_cli_migrate")
    await pg.create_database(pg_server, name)
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="host_dsn")
async def _host_dsn(blank_dsn: str) -> str:
    """A database with the reference host tables and nothing of ours."""
    await pg.execute(blank_dsn, host_schema_sql())
    return blank_dsn


async def test_check_exits_3_with_a_line_a_problem_until_migrate_repairs_them(
    host_dsn: str,
) -> None:
    """--check exits 3 with one line a problem (missing, INVALID) until migrate repairs them."""
    await cli("migrate", "--dsn", host_dsn)
    await pg.execute(
        host_dsn,
        "DROP INDEX stall_nudge_activity; DROP TABLE stall_nudge.settings;"
        " UPDATE pg_index SET indisvalid = false"
        "  WHERE indexrelid = 'stall_nudge_requeued'::regclass",
    )
    broken = await cli("migrate", "--dsn", host_dsn, "--check")
    repaired = await cli("migrate", "--dsn", host_dsn)
    again = await cli("migrate", "--dsn", host_dsn, "--check")

    assert (3, "") == (broken.status, broken.err)
    assert [
        "problem: missing: index stall_nudge_activity on todos",
        "problem: invalid: index stall_nudge_requeued on todos (an interrupted build)",
        "problem: missing: stall_nudge.settings",
        "problem: missing: the record of the host's schema (public)",
        "problem: stall-nudge migrate repairs these",
    ] == broken.out.splitlines()
    assert 0 == repaired.status, repaired.err
    assert (0, CURRENT) == (again.status, again.out)


async def test_migrate_needs_host_tables_and_makes_them_only_with_host_schema(
    blank_dsn: str,
) -> None:
    """Without host tables migrate refuses, with no demo flag as advice; --host-schema makes
    them, then installs, and a second run has nothing to do."""
    bare = await cli("migrate", "--dsn", blank_dsn)
    created = await cli("migrate", "--dsn", blank_dsn, "--host-schema")
    again = await cli("migrate", "--dsn", blank_dsn, "--host-schema")

    assert 1 == bare.status
    assert "host tables missing: no schema holds all of" in bare.err
    assert "--host-schema" not in bare.err  # a demo's flag is no advice for production
    assert 0 == created.status, created.err
    assert "applied 0001_baseline\n" in created.out
    assert (
        0,
        f"schema version {SCHEMA_VERSION}: nothing to do, the database is as this build makes it\n",
    ) == (again.status, again.out)


async def test_check_exits_1_only_when_it_cannot_run(blank_dsn: str) -> None:
    """No host tables to compare with, or no server: one line on stderr, exit 1, no traceback."""
    no_host = await cli("migrate", "--dsn", blank_dsn, "--check")
    no_server = await cli("migrate", "--dsn", "postgresql://nobody@127.0.0.1:1/x", "--check")

    assert (1, "") == (no_host.status, no_host.out)
    assert [
        "stall-nudge: error: host tables missing: no schema holds all of endpoints, deliveries,"
        " todos, notify_hooks"
    ] == [line.partition(" (")[0] for line in no_host.err.splitlines()]
    assert (1, "") == (no_server.status, no_server.out)
    assert 1 == len(no_server.err.splitlines())
    assert "cannot connect" in no_server.err


async def test_print_sql_prints_the_migration_and_changes_nothing(
    host_dsn: str, tmp_path: Path
) -> None:
    """--print-sql prints what migrate would run, schema-qualified, dropping nothing; it changes
    nothing; applied by hand it leaves a database --check accepts, and then it prints nothing."""
    printed = await cli("migrate", "--dsn", host_dsn, "--print-sql")
    with_host = await cli("migrate", "--dsn", host_dsn, "--print-sql", "--host-schema")
    unchanged = await pg.ours(host_dsn)
    check = await cli("migrate", "--dsn", host_dsn, "--check")
    applied = await pg.psql_file(host_dsn, printed.out, tmp_path)
    accepted = await cli("migrate", "--dsn", host_dsn, "--check")
    current = await cli("migrate", "--dsn", host_dsn, "--print-sql")

    assert 0 == printed.status, printed.err
    assert printed.out.startswith(f"-- stall-nudge schema version {SCHEMA_VERSION}: ")
    assert (
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending "
        'ON "public".todos (endpoint_id, queue, created_at, (id::text) COLLATE "C") '
        "INCLUDE (id, delivery_id)"
    ) in printed.out
    assert "CREATE TABLE IF NOT EXISTS stall_nudge.queue_stall_nudges (" in printed.out
    assert (
        "CREATE VIEW stall_nudge.host_todos WITH (security_invoker = true) AS SELECT id, "
    ) in printed.out
    assert "BEGIN;\n" in printed.out
    assert printed.out.endswith("COMMIT;\n")
    assert [] == [line for line in printed.out.splitlines() if line.startswith("DROP")]
    assert 0 == with_host.status, with_host.err
    assert with_host.out.startswith(host_schema_sql())
    assert with_host.out.endswith(printed.out)
    assert set() == unchanged
    assert (3, NOT_MIGRATED) == (check.status, check.out)
    assert (0, b"") == applied
    assert (0, CURRENT) == (accepted.status, accepted.out)
    assert (0, "", "") == (current.status, current.out, current.err)


async def test_print_sql_after_damage_prints_the_repair_alone(
    host_dsn: str, tmp_path: Path
) -> None:
    """On a damaged install --print-sql builds the missing index and no other object; applied
    by hand, --check accepts the database."""
    await cli("migrate", "--dsn", host_dsn)
    await pg.execute(host_dsn, "DROP INDEX stall_nudge_hooks")

    printed = await cli("migrate", "--dsn", host_dsn, "--print-sql")
    applied = await pg.psql_file(host_dsn, printed.out, tmp_path)
    accepted = await cli("migrate", "--dsn", host_dsn, "--check")

    assert 0 == printed.status, printed.err
    assert [
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_hooks ON "public".notify_hooks '
        "(endpoint_id) WHERE enabled;"
    ] == [
        line
        for line in printed.out.splitlines()
        if line.startswith(("CREATE", "DROP", "ALTER", "GRANT", "REVOKE"))
    ]
    assert "-- missing: index stall_nudge_hooks on notify_hooks\n" in printed.out
    assert (0, b"") == applied
    assert (0, CURRENT) == (accepted.status, accepted.out)


async def test_uninstall_prints_its_drops_changing_nothing_and_is_idempotent(
    host_dsn: str,
) -> None:
    """--uninstall --print-sql shows the drops and changes nothing; after an uninstall, another
    finds nothing to do."""
    await cli("migrate", "--dsn", host_dsn)
    installed = await pg.ours(host_dsn)

    printed = await cli("migrate", "--dsn", host_dsn, "--uninstall", "--print-sql")
    kept = await pg.ours(host_dsn)
    await cli("migrate", "--dsn", host_dsn, "--uninstall")
    again = await cli("migrate", "--dsn", host_dsn, "--uninstall")

    assert 0 == printed.status, printed.err
    assert "what migrate --uninstall runs on this database.\n" in printed.out
    assert "DROP SCHEMA IF EXISTS stall_nudge CASCADE;\n" in printed.out
    assert 'DROP INDEX CONCURRENTLY IF EXISTS "public"."stall_nudge_pending";\n' in printed.out
    assert installed == kept
    assert "stall_nudge_pending" in installed
    assert (0, "nothing of stall-nudge's was here\n") == (again.status, again.out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--uninstall", "--check"), "--uninstall goes alone, or with --print-sql"),
        (("--uninstall", "--grant", "sweeper"), "--uninstall goes alone, or with --print-sql"),
        (("--check", "--grant", "sweeper"), "--check changes nothing: it takes no --grant"),
        (("--host-schema", "--check"), "--host-schema creates tables"),
        (("--print-sql", "--check"), "not allowed with argument"),
        (("--footprint", "lean"), "--footprint was retired: there is one footprint now"),
    ],
)
async def test_mixed_actions_are_usage_mistakes(
    blank_dsn: str, args: tuple[str, ...], message: str
) -> None:
    """Options that do not go together, or retired ones, exit 2 with one line, running nothing."""
    result = await cli("migrate", "--dsn", blank_dsn, *args)

    assert (2, "") == (result.status, result.out)
    assert 1 == len(result.err.splitlines()), result.err
    assert message in result.err
    assert set() == await pg.ours(blank_dsn)
