"""migrate: one plan that --print-sql prints, migrate runs and check reports, against this build.

Each test starts from a DBA's database (tests/pg.py), bare or migrated, and
migrates as the migrating role, which is no superuser; the damage a test
does by hand is a superuser's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres import (
    HOST_INDEXES,
    SCHEMA_VERSION,
    MigrationError,
    MissingHostTables,
    check,
    installed,
    migrate,
    plan,
    uninstall,
    uninstall_plan,
)
from tests import pg

pytestmark = pytest.mark.postgres

#: A host that claims "the next todo of a queue" keeps an index like this one, and one of
#: its enabled hooks by endpoint.
HOSTS_OWN_INDEXES = (
    "CREATE INDEX host_claim_next ON sb.todos (endpoint_id, queue, created_at)"
    " WHERE state = 'pending';"
    " CREATE INDEX host_enabled_hooks ON sb.notify_hooks (endpoint_id) WHERE enabled"
)


@pytest.fixture(name="conn")
async def _conn(site: pg.Site) -> AsyncIterator[asyncpg.Connection]:
    """The migrating role, on a migrated database."""
    async with site.connect(site.cast.migrator) as conn:
        yield conn


@pytest.fixture(name="bare")
async def _bare(bare_site: pg.Site) -> AsyncIterator[asyncpg.Connection]:
    """The migrating role, on a database with nothing of ours yet."""
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        yield conn


@pytest.mark.parametrize("bare_site", pg.SETUPS, indirect=True)
async def test_a_fresh_database_migrates_and_then_has_nothing_to_do(
    bare: asyncpg.Connection,
) -> None:
    """After migrate, the plan is empty, check finds nothing and --print-sql prints nothing."""
    said: list[str] = []

    report = await migrate(bare, say=said.append)
    after = await plan(bare)

    assert SCHEMA_VERSION == report.version
    assert f"applied {SCHEMA_VERSION:04d}_baseline" in said
    assert ((), "") == (after.steps, after.sql())
    assert () == (await check(bare)).problems
    assert () == (await migrate(bare)).repaired
    state = await installed(bare)
    assert state is not None
    assert (SCHEMA_VERSION, "sb") == (state.version, state.host_schema)


async def test_the_plan_on_a_fresh_database_drops_nothing(bare: asyncpg.Connection) -> None:
    """--print-sql on a database never migrated creates what is missing and drops nothing."""
    printed = (await plan(bare)).sql()

    assert [] == [line for line in printed.splitlines() if line.startswith("DROP")]
    assert printed.count("CREATE INDEX CONCURRENTLY") == len(HOST_INDEXES)
    assert '"sb".todos' in printed


async def test_the_printed_sql_applied_by_hand_leaves_a_database_check_accepts(
    bare_site: pg.Site, bare: asyncpg.Connection, tmp_path: Path
) -> None:
    """psql -f on --print-sql's output migrates the database exactly as migrate would."""
    migrator = bare_site.as_role(bare_site.cast.migrator)

    applied = await pg.psql_file(migrator, (await plan(bare)).sql(), tmp_path)

    assert (0, b"") == applied
    assert () == (await check(bare)).problems
    assert () == (await plan(bare)).steps


#: A damage done by hand to a migrated database, and the problem line check must print.
DAMAGES: dict[str, tuple[str, str]] = {
    "missing index": (
        "DROP INDEX sb.stall_nudge_activity",
        "missing: index stall_nudge_activity on todos",
    ),
    "invalid index": (
        "UPDATE pg_index SET indisvalid = false"
        " WHERE indexrelid = 'sb.stall_nudge_requeued'::regclass",
        "invalid: index stall_nudge_requeued on todos (an interrupted build)",
    ),
    "different index": (
        "DROP INDEX sb.stall_nudge_hooks;"
        " CREATE INDEX stall_nudge_hooks ON sb.notify_hooks (endpoint_id)",
        "different: index stall_nudge_hooks on notify_hooks",
    ),
    "extra table": ("CREATE TABLE stall_nudge.notes (x int)", "extra: table notes"),
    "extra view": ("CREATE VIEW stall_nudge.glance AS SELECT 1 AS x", "extra: view glance"),
    "extra sequence": ("CREATE SEQUENCE stall_nudge.counter", "extra: sequence counter"),
    "extra view in the host's schema": (
        "CREATE VIEW sb.stall_nudge_glance AS SELECT 1 AS x",
        "extra: view stall_nudge_glance",
    ),
    "extra function": (
        "CREATE FUNCTION stall_nudge.helper() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "extra: function helper()",
    ),
    "extra trigger": (
        "CREATE FUNCTION stall_nudge.noop() RETURNS trigger LANGUAGE plpgsql"
        " AS 'BEGIN RETURN NULL; END';"
        " CREATE TRIGGER stall_nudge_old AFTER INSERT ON sb.todos"
        " FOR EACH ROW EXECUTE FUNCTION stall_nudge.noop()",
        "extra: trigger stall_nudge_old on todos (no build of ours keeps one)",
    ),
    "different table": (
        "ALTER TABLE stall_nudge.held ADD COLUMN note text",
        "different: table held",
    ),
    "different ledger constraint": (
        "ALTER TABLE stall_nudge.queue_stall_nudges DROP CONSTRAINT nudges_not_negative",
        "missing: constraint nudges_not_negative on queue_stall_nudges",
    ),
    "different view": (
        "CREATE OR REPLACE VIEW stall_nudge.host_endpoints AS"
        " SELECT id, state, NULL::text AS name, 'x'::text AS note FROM sb.endpoints",
        "different: view host_endpoints",
    ),
    "missing table": ("DROP TABLE stall_nudge.ticks", "missing: stall_nudge.ticks"),
    "missing settings": ("DROP TABLE stall_nudge.settings", "missing: stall_nudge.settings"),
    "missing record": (
        "DELETE FROM stall_nudge.settings",
        "missing: the record of the host's schema (sb)",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
async def test_check_names_each_problem_and_migrate_repairs_it(
    site: pg.Site, conn: asyncpg.Connection, damage: str
) -> None:
    """A damaged install is one problem line at check; migrate repairs it; check is then clean."""
    sql, problem = DAMAGES[damage]
    await pg.execute(site.dsn, sql)

    found = await check(conn)
    printed = (await plan(conn)).sql()
    await migrate(conn)

    assert problem in found.problems
    assert "stall-nudge migrate repairs these" == found.problems[-1]
    assert f"-- {problem}" in printed
    assert () == (await check(conn)).problems


async def test_a_host_index_that_fits_is_used_and_ours_goes(
    site: pg.Site, conn: asyncpg.Connection
) -> None:
    """The host's own hooks index serves: ours is dropped concurrently, and check is clean.

    Its claim-next index does not stand in for our pending one, which also carries each
    todo's id and delivery (docs/operations.md says why).
    """
    await pg.execute(site.dsn, HOSTS_OWN_INDEXES)

    report = await migrate(conn)

    assert (("stall_nudge_hooks", "host_enabled_hooks"),) == report.used
    assert {"stall_nudge_pending"} == {"stall_nudge_pending", "stall_nudge_hooks"} & set(
        await pg.ours(conn)
    )
    assert () == (await check(conn)).problems


async def test_migrate_refuses_a_database_without_the_host_tables(
    bare_site: pg.Site, bare: asyncpg.Connection
) -> None:
    """No schema holds every host table: a one-line error naming them, and nothing of ours made."""
    await pg.execute(bare_site.dsn, "ALTER TABLE sb.todos RENAME TO todos_old")

    with pytest.raises(MissingHostTables, match="host tables missing"):
        await migrate(bare)

    assert set() == await pg.ours(bare)


async def test_migrate_refuses_a_schema_newer_than_this_build(
    site: pg.Site, conn: asyncpg.Connection
) -> None:
    """A database a newer build migrated is left alone, with the reason in one line."""
    await pg.execute(site.dsn, "INSERT INTO stall_nudge.migrations VALUES (99, 'future', now())")

    with pytest.raises(MigrationError, match="newer than this build"):
        await migrate(conn)


async def test_check_warns_when_others_may_create_in_the_host_schema(
    site: pg.Site, conn: asyncpg.Connection
) -> None:
    """A host schema where PUBLIC may create objects is advice, not a problem."""
    await pg.execute(site.dsn, "GRANT CREATE ON SCHEMA sb TO PUBLIC")

    report = await check(conn)

    assert () == report.problems
    assert any("PUBLIC" in line and "host's schema sb" in line for line in report.advice)


async def test_uninstall_removes_every_trace_and_prints_what_it_runs(
    site: pg.Site, conn: asyncpg.Connection
) -> None:
    """--uninstall drops every object of ours; its --print-sql says exactly that; host rows stay."""
    await pg.execute(site.dsn, "INSERT INTO sb.endpoints VALUES ('ep', 'active')")

    printed = (await uninstall_plan(conn)).sql()
    removed = await uninstall(conn)

    assert set() == await pg.ours(conn)
    assert removed
    assert "DROP SCHEMA IF EXISTS stall_nudge CASCADE;" in printed
    assert 1 == await conn.fetchval("SELECT count(*) FROM sb.endpoints")
    assert "" == (await uninstall_plan(conn)).sql()
