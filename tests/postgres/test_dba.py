"""A database set up by a DBA, and one a role with ordinary rights acted on first (tests/pg.py).

Every planted function raises, so if any ran the statement would fail.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import asyncpg
import attrs
import pytest

import stall_nudge
from adapters.postgres import (
    HOST_TABLES,
    MigrationError,
    PostgresLedger,
    check,
    host_schema_sql,
    installed,
    migrate,
    plan,
    uninstall,
    uninstall_plan,
)
from stall_core import PacingPolicy
from stall_testing import FakeClock
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0

pytestmark = pytest.mark.postgres

#: Every host privilege, object and row, as a DBA would compare them before and after.
FOOTPRINT = """
SELECT 'schema ' || n.nspname || ' owner ' || n.nspowner::regrole || ' '
       || coalesce(n.nspacl::text, '')
  FROM pg_namespace n
 WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
UNION ALL
SELECT 'relation ' || c.oid::regclass || ' ' || c.relkind::text || ' owner ' || c.relowner::regrole
       || ' ' || coalesce(c.relacl::text, '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
UNION ALL
SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' ' || a.attacl::text
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE a.attacl IS NOT NULL AND n.nspname NOT LIKE 'pg\\_%'
UNION ALL
SELECT 'function ' || p.oid::regprocedure
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
UNION ALL
SELECT 'membership ' || roleid::regrole || ' ' || member::regrole FROM pg_auth_members
 WHERE member::regrole::text = ANY ($1::text[])
UNION ALL SELECT 'todo ' || t::text FROM sb.todos t
UNION ALL SELECT 'hook ' || h::text FROM sb.notify_hooks h
UNION ALL SELECT 'endpoint ' || e::text FROM sb.endpoints e
UNION ALL SELECT 'delivery ' || d::text FROM sb.deliveries d
"""


async def footprint(site: pg.Site) -> list[str]:
    async with site.connect() as conn:
        return sorted(r[0] for r in await conn.fetch(FOOTPRINT, attrs.astuple(site.cast)))


async def test_install_grant_sweep_and_uninstall_leave_the_host_as_it_was(
    bare_site: pg.Site,
) -> None:
    """As a non-superuser: only what the roles lacked is granted, and uninstall undoes only that."""
    cast, clock = bare_site.cast, FakeClock(T0)
    async with bare_site.driver(clock) as host:
        await stalled_queue(host)
    before = await footprint(bare_site)
    said: list[str] = []
    async with bare_site.connect(cast.migrator) as migrator:
        for role in (cast.owner, cast.app):  # one owns the host's tables, one holds grants
            await migrate(migrator, schema="sb", grant=role, say=said.append)
        report = await migrate(migrator, grant=cast.sweeper, say=said.append)
        current = await check(migrator)
    charged: list[list[int]] = []
    for role in (cast.app, cast.sweeper):
        async with asyncpg.create_pool(bare_site.as_role(role), min_size=1, max_size=2) as pool:
            async with stall_nudge.open_reaper(pool):
                pass  # the start-up check finds sb where migrate recorded it
            clock.set(T0 + timedelta(minutes=10 + 6 * len(charged)))
            outcome = await PostgresLedger(pool, clock=clock).charge_due(policy=PacingPolicy())
            charged.append([n.number for n in outcome.charged])
    async with bare_site.connect(cast.migrator) as migrator:
        await uninstall(migrator)
    after = await footprint(bare_site)

    granted = [line for line in said if line.startswith("granted ")]
    on_host = ("on schema sb", *(f'"sb"."{t}"' for t in HOST_TABLES))
    host_roles = (cast.owner, cast.app)
    assert [] == [g for g in granted if g.endswith(host_roles) and any(h in g for h in on_host)]
    assert f'granted SELECT (state) on "sb"."deliveries" to {cast.sweeper}' not in granted
    assert f'granted SELECT (verified) on "sb"."deliveries" to {cast.sweeper}' in granted
    assert [] == [line for line in granted if '"sb"."todos"' in line and "SELECT" in line]
    assert [] == [line for line in granted if "on schema sb" in line]
    assert ((cast.sweeper, 11),) == report.held  # USAGE on sb and 10 columns, through readers
    assert () == current.problems
    assert [[1], [2]] == charged
    assert before == after


async def test_a_host_schema_on_no_search_path_is_found_where_migrate_recorded_it(
    site: pg.Site,
) -> None:
    """status and start-up read sb by the record; a hint names the fix for production."""
    sweeper = site.as_role(site.cast.sweeper)
    await pg.execute(site.dsn, "ALTER TABLE sb.todos RENAME TO todos_old")
    with pytest.raises(stall_nudge.StartupError) as refused:
        async with stall_nudge.open_reaper(sweeper):
            pass
    await pg.execute(site.dsn, "ALTER TABLE sb.todos_old RENAME TO todos")
    async with stall_nudge.open_reaper(sweeper) as reaper:
        report = await reaper.tick()

    assert "host tables missing in schema sb, the one migrate recorded: todos" in str(refused.value)
    assert "--host-schema" not in str(refused.value)
    assert "migrate --schema" in str(refused.value)
    assert "full" == report.kind


async def test_grant_refuses_predefined_and_superuser_roles(bare_site: pg.Site) -> None:
    """--grant pg_read_all_data or a superuser fails in one line, and grants nothing."""
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        superuser = await conn.fetchval("SELECT min(rolname) FROM pg_roles WHERE rolsuper")
        refused = []
        for role in ("pg_read_all_data", superuser):
            with pytest.raises(MigrationError) as error:
                await migrate(conn, grant=role)
            refused.append(str(error.value))
        state = await installed(conn)

    assert "predefined" in refused[0]
    assert "superuser" in refused[1]
    assert state is None


#: Our objects that depend on anything outside pg_catalog (a planted operator or function).
BUILT_ON_PLANTS = """
SELECT d.objid::regclass::text FROM pg_depend d
  JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass
   AND (c.relname LIKE 'stall\\_nudge\\_%' OR c.relnamespace = 'stall_nudge'::regnamespace)
   AND ((d.refclassid = 'pg_proc'::regclass
         AND (SELECT pronamespace FROM pg_proc WHERE oid = d.refobjid) = 'public'::regnamespace)
        OR (d.refclassid = 'pg_operator'::regclass
            AND (SELECT oprnamespace FROM pg_operator WHERE oid = d.refobjid)
                = 'public'::regnamespace))
"""


@pytest.mark.parametrize("bare_site", ["planted"], indirect=True)
async def test_the_printed_scripts_run_by_psql_in_a_hostile_session_build_what_migrate_does(
    bare_site: pg.Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--print-sql and --uninstall --print-sql, run by psql with public first, run no plant."""
    # A DBA's psql session with public before pg_catalog (notices kept quiet).
    options = f"-c search_path={pg.CARELESS.replace(' ', '')} -c client_min_messages=warning"
    monkeypatch.setitem(os.environ, "PGOPTIONS", options)
    migrator = bare_site.as_role(bare_site.cast.migrator)
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        installed_by_psql = await pg.psql_file(migrator, (await plan(conn)).sql(), tmp_path)
        built_on_plants = [r[0] for r in await conn.fetch(BUILT_ON_PLANTS)]
        report = await check(conn)
        removed = await pg.psql_file(migrator, (await uninstall_plan(conn)).sql(), tmp_path)
        left = await pg.ours(conn)
        theirs = await conn.fetchval("SELECT to_regclass('sb.queue_stall_nudges') IS NOT NULL")

    assert (0, b"") == installed_by_psql
    assert [] == built_on_plants
    assert () == report.problems
    assert (0, b"") == removed
    assert set() == left
    assert theirs  # the planter's table under our ledger's name: never adopted, never dropped


#: What a refused migrate built: our indexes on the host's tables, our record of migrations.
BUILT = """
SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname LIKE 'stall\\_nudge\\_%'
   AND i.indrelid = ANY ('{sb.todos,sb.deliveries,sb.notify_hooks}'::regclass[])
    OR to_regclass('stall_nudge.migrations') IS NOT NULL
"""


@pytest.mark.parametrize(
    ("grant", "plant", "refused"),
    [
        (
            "CREATE ON DATABASE {db}",
            "CREATE SCHEMA stall_nudge; CREATE TABLE stall_nudge.settings (host_schema text);"
            " INSERT INTO stall_nudge.settings VALUES ('elsewhere')",
            "schema stall_nudge",
        ),
        (
            "USAGE, CREATE ON SCHEMA sb",
            "CREATE TABLE sb.stall_nudge_pending (x int)",
            "table sb.stall_nudge_pending",
        ),
    ],
    ids=["schema", "host-index-name"],
)
async def test_what_another_role_made_first_under_our_names_is_refused_not_adopted(
    bare_site: pg.Site, grant: str, plant: str, refused: str
) -> None:
    """migrate refuses in one line naming the object and its owner; check reports it."""
    planter = bare_site.cast.planter
    await pg.execute(bare_site.dsn, f'GRANT {grant.format(db=bare_site.database)} TO "{planter}"')
    await pg.execute(bare_site.as_role(planter), plant)
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        with pytest.raises(MigrationError) as error:
            await migrate(conn)
        report = await check(conn)
    async with bare_site.connect() as conn:
        built = await conn.fetchval(BUILT)

    assert f"refusing to adopt {refused} (owner {planter})" in str(error.value)
    assert "\n" not in str(error.value)
    assert any(p.startswith(f"not ours: {refused} (owner {planter})") for p in report.problems)
    assert 0 == built


async def test_a_second_schema_of_look_alike_tables_is_never_picked_silently(
    bare_site: pg.Site,
) -> None:
    """With a "$user" schema holding look-alike tables, migrate asks for a name, then keeps it."""
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        # First on the default search_path ("$user", public): look-alikes a careless
        # lookup would take for the host's.
        await conn.execute("CREATE SCHEMA AUTHORIZATION CURRENT_USER")
        await conn.execute(host_schema_sql())
        with pytest.raises(MigrationError) as ambiguous:
            await migrate(conn)
        await migrate(conn, schema="sb")
        again = await plan(conn)
        state = await installed(conn)

    schemas = ", ".join(sorted([bare_site.cast.migrator, "sb"]))
    assert f"more than one schema ({schemas})" in str(ambiguous.value)
    assert state is not None
    assert "sb" == state.host_schema
    assert () == again.steps
