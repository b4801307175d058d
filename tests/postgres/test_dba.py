"""A database set up by a DBA, and one an attacker with ordinary rights acted on first.

The DBA's database: switchboard's tables in schema ``sb``, owned by a role of
their own and on no role's search_path; the application's role already holds
its grants there; a sweeping role reads through a group role; and the
migrating role is no superuser (as on managed PostgreSQL), only a member of
the tables' owner with CREATE on the database. The attacker holds CREATE on
``public`` (PostgreSQL's default before 15) or on the database, and acts
before the first migrate. Every planted function raises, so if any ran the
statement would fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
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
    migrate,
    plan,
    uninstall,
    uninstall_plan,
)
from stall_core import PacingPolicy
from stall_testing import FakeClock, PostgresDriver
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


@attrs.frozen(kw_only=True)
class Dba:
    """The DBA's database: its DSN (as a superuser) and the roles that act on it."""

    dsn: str
    owner: str
    app: str
    readers: str
    sweeper: str
    migrator: str

    def as_role(self, role: str) -> str:
        return pg.with_user(self.dsn, role)


@pytest.fixture(name="database")
async def _database(pg_server: str) -> AsyncIterator[str]:
    """A brand-new, empty database."""
    name = pg.unique_name("stall_dba")
    await pg.create_database(pg_server, name, template="template0")
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="dba")
async def _dba(pg_server: str, database: str) -> AsyncIterator[Dba]:
    """Switchboard's tables in schema sb as a DBA sets them up, and nothing of ours."""
    async with pg.roles(
        pg_server, database, "NOLOGIN", "LOGIN", "NOLOGIN", "LOGIN", "LOGIN", prefix="stall_dba"
    ) as names:
        owner, app, readers, sweeper, migrator = names
        conn = await asyncpg.connect(database)
        try:
            await conn.execute(f'CREATE SCHEMA sb AUTHORIZATION "{owner}"')
            await conn.execute(f'SET ROLE "{owner}"; SET search_path = sb')
            await conn.execute(host_schema_sql())
            await conn.execute(
                f'GRANT USAGE ON SCHEMA sb TO "{app}";'
                f' GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA sb TO "{app}";'
                f' GRANT USAGE ON SCHEMA sb TO "{readers}";'
                f' GRANT SELECT ON sb.todos, sb.endpoints TO "{readers}"'
            )
            await conn.execute("RESET ROLE; RESET search_path")
            await conn.execute(
                f'GRANT "{readers}" TO "{sweeper}"; GRANT "{owner}" TO "{migrator}";'
                f' GRANT CREATE ON DATABASE "{await conn.fetchval("SELECT current_database()")}"'
                f' TO "{migrator}"'
            )
        finally:
            await conn.close()
        yield Dba(
            dsn=database, owner=owner, app=app, readers=readers, sweeper=sweeper, migrator=migrator
        )


async def footprint(dba: Dba) -> list[str]:
    conn = await asyncpg.connect(dba.dsn)
    roles = [dba.owner, dba.app, dba.readers, dba.sweeper, dba.migrator]
    try:
        return sorted(r[0] for r in await conn.fetch(FOOTPRINT, roles))
    finally:
        await conn.close()


async def test_install_grant_sweep_and_uninstall_leave_the_host_as_it_was(dba: Dba) -> None:
    """As a non-superuser: only what the roles lacked is granted, and uninstall undoes only that."""
    host = await asyncpg.create_pool(dba.dsn, server_settings={"search_path": "sb"})
    clock = FakeClock(T0)
    try:
        await stalled_queue(PostgresDriver(host, clock))
    finally:
        await host.close()
    before = await footprint(dba)
    said: list[str] = []
    migrator = await asyncpg.connect(dba.as_role(dba.migrator))
    try:
        await migrate(migrator, schema="sb", grant=dba.app, say=said.append)
        await migrate(migrator, grant=dba.sweeper, say=said.append)
        current = await check(migrator)
    finally:
        await migrator.close()
    sweepers = {
        role: await asyncpg.create_pool(dba.as_role(role), min_size=1, max_size=2)
        for role in (dba.app, dba.sweeper)
    }
    try:
        clock.set(T0 + timedelta(minutes=10))
        charged = []
        for pool in sweepers.values():
            async with stall_nudge.open_reaper(pool):
                pass  # the start-up check finds sb where migrate recorded it
            outcome = await PostgresLedger(pool, clock=clock).charge_due(policy=PacingPolicy())
            charged.append([n.number for n in outcome.charged])
            clock.advance(timedelta(minutes=6))
    finally:
        for pool in sweepers.values():
            await pool.close()
    migrator = await asyncpg.connect(dba.as_role(dba.migrator))
    try:
        await uninstall(migrator)
    finally:
        await migrator.close()
    after = await footprint(dba)

    granted = [line for line in said if line.startswith("granted ")]
    on_host = ("on schema sb", *(f'"sb"."{t}"' for t in HOST_TABLES))
    assert [] == [g for g in granted if g.endswith(dba.app) and any(h in g for h in on_host)]
    assert f'granted SELECT (state) on "sb"."deliveries" to {dba.sweeper}' not in granted
    assert f'granted SELECT (verified) on "sb"."deliveries" to {dba.sweeper}' in granted
    assert [] == [line for line in granted if '"sb"."todos"' in line and "SELECT" in line]
    assert [] == [line for line in granted if "on schema sb" in line]
    assert f"{dba.sweeper} already held 11 of the 41 privileges it needs" in said
    assert () == current.problems
    assert [[1], [2]] == charged
    assert before == after


async def test_a_host_schema_on_no_search_path_is_found_where_migrate_recorded_it(
    dba: Dba,
) -> None:
    """status and start-up read sb by the record; a hint names the fix for production."""
    migrator = await asyncpg.connect(dba.as_role(dba.migrator))
    try:
        await migrate(migrator, schema="sb", grant=dba.sweeper)
    finally:
        await migrator.close()
    conn = await asyncpg.connect(dba.dsn)
    try:
        await conn.execute("ALTER TABLE sb.todos RENAME TO todos_old")
        with pytest.raises(stall_nudge.StartupError) as refused:
            async with stall_nudge.open_reaper(dba.as_role(dba.sweeper)):
                pass
        await conn.execute("ALTER TABLE sb.todos_old RENAME TO todos")
    finally:
        await conn.close()
    async with stall_nudge.open_reaper(dba.as_role(dba.sweeper)) as reaper:
        report = await reaper.tick()

    assert "host tables missing in schema sb, the one migrate recorded: todos" in str(refused.value)
    assert "--host-schema" not in str(refused.value)
    assert "migrate --schema" in str(refused.value)
    assert "full" == report.kind


async def test_grant_refuses_predefined_and_superuser_roles(dba: Dba) -> None:
    """--grant pg_read_all_data or a superuser fails in one line, and grants nothing."""
    conn = await asyncpg.connect(dba.dsn)
    try:
        superuser = await conn.fetchval("SELECT current_user")
        refused = []
        for role in ("pg_read_all_data", superuser):
            with pytest.raises(MigrationError) as error:
                await migrate(conn, schema="sb", grant=role)
            refused.append(str(error.value))
        installed = await conn.fetchval("SELECT to_regclass('stall_nudge.grants') IS NOT NULL")
    finally:
        await conn.close()

    assert "predefined" in refused[0]
    assert "superuser" in refused[1]
    assert False is installed


#: A DBA's psql session with the host's schema before pg_catalog (notices kept quiet).
HOSTILE_SESSION = "-c search_path=public,pg_catalog -c client_min_messages=warning"
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


async def test_the_printed_scripts_run_by_psql_in_a_hostile_session_build_what_migrate_does(
    pg_server: str, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--print-sql and --uninstall --print-sql, run by psql with public first, run no plant."""
    async with pg.roles(pg_server, database, "LOGIN") as [planter]:
        conn = await asyncpg.connect(database)
        try:
            await conn.execute(host_schema_sql("varchar"))
            await conn.execute(f'GRANT CREATE ON SCHEMA public TO "{planter}"')
            await pg.execute(pg.with_user(database, planter), pg.PLANT)
            script = (await plan(conn)).sql()
            monkeypatch.setitem(
                os.environ,
                "PGOPTIONS",
                "-c search_path=public,pg_catalog -c client_min_messages=warning",
            )
            installed = await pg.psql_file(database, script, tmp_path)
            built_on_plants = [r[0] for r in await conn.fetch(BUILT_ON_PLANTS)]
            report = await check(conn)
            removal = (await uninstall_plan(conn)).sql()
            removed = await pg.psql_file(database, removal, tmp_path)
            left = await pg.ours(conn)
        finally:
            await conn.close()

    assert (0, b"") == installed
    assert [] == built_on_plants
    assert () == report.problems
    assert (0, b"") == removed
    assert set() == left


#: An attacker's ledger: every read of it runs the attacker's function as the reader.
ATTACKERS_LEDGER = """
CREATE FUNCTION public.steal() RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'attacker code ran'; END $$;
CREATE TABLE public.queue_stall_nudges (endpoint_id text, queue text, nudges int,
                                        last_nudged_at timestamptz);
ALTER TABLE public.queue_stall_nudges ENABLE ROW LEVEL SECURITY;
CREATE POLICY steal ON public.queue_stall_nudges USING (public.steal());
GRANT ALL ON public.queue_stall_nudges TO PUBLIC;
"""
ATTACKERS_SCHEMA = """
CREATE SCHEMA stall_nudge;
CREATE TABLE stall_nudge.settings (singleton boolean PRIMARY KEY DEFAULT true,
                                   host_schema text NOT NULL);
INSERT INTO stall_nudge.settings VALUES (true, 'elsewhere');
"""
SQUAT = "CREATE TABLE public.{name} (x int)"
#: What a refused migrate built: our indexes on the host's tables, our record of migrations.
BUILT = """
SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname LIKE 'stall\\_nudge\\_%'
   AND i.indrelid = ANY ('{todos,deliveries,notify_hooks}'::regclass[])
    OR to_regclass('stall_nudge.migrations') IS NOT NULL
"""


@pytest.mark.parametrize(
    ("grant", "plant", "refused"),
    [
        ("CREATE ON SCHEMA public", ATTACKERS_LEDGER, "table public.queue_stall_nudges"),
        ("CREATE ON DATABASE {db}", ATTACKERS_SCHEMA, "schema stall_nudge"),
        (
            "CREATE ON SCHEMA public",
            SQUAT.format(name="stall_nudge_pending"),
            "table public.stall_nudge_pending",
        ),
        (
            "CREATE ON SCHEMA public",
            SQUAT.format(name="stall_nudge_ledger_pair"),
            "table public.stall_nudge_ledger_pair",
        ),
    ],
    ids=["ledger", "schema", "host-index-name", "ledger-index-name"],
)
async def test_what_an_attacker_made_first_is_refused_not_adopted(
    pg_server: str, database: str, grant: str, plant: str, refused: str
) -> None:
    """migrate refuses in one line naming the object and its owner; check reports it."""
    async with pg.roles(pg_server, database, "LOGIN") as [attacker]:
        conn = await asyncpg.connect(database)
        try:
            await conn.execute(host_schema_sql())
            target = grant.format(db=f'"{await conn.fetchval("SELECT current_database()")}"')
            await conn.execute(f'GRANT {target} TO "{attacker}"')
            await pg.execute(pg.with_user(database, attacker), plant)
            with pytest.raises(MigrationError) as error:
                await migrate(conn)
            report = await check(conn)
            built = await conn.fetchval(BUILT)
        finally:
            await conn.close()

    assert f"refusing to adopt {refused} (owner {attacker})" in str(error.value)
    assert "\n" not in str(error.value)
    assert any(p.startswith(f"not ours: {refused} (owner {attacker})") for p in report.problems)
    assert 0 == built


async def test_a_second_schema_of_look_alike_tables_is_never_picked_silently(
    database: str,
) -> None:
    """With a "$user" schema holding look-alike tables, migrate asks for a name, then keeps it."""
    conn = await asyncpg.connect(database)
    try:
        await conn.execute(host_schema_sql())
        user = await conn.fetchval("SELECT current_user")
        # First on the default search_path ("$user", public): look-alikes a careless
        # lookup would take for the host's.
        await conn.execute("CREATE SCHEMA AUTHORIZATION CURRENT_USER")
        await conn.execute(host_schema_sql())
        with pytest.raises(MigrationError) as ambiguous:
            await migrate(conn)
        await migrate(conn, schema="public")
        again = await plan(conn)
        recorded = await conn.fetchval("SELECT host_schema FROM stall_nudge.settings")
    finally:
        await conn.close()

    assert f"more than one schema ({', '.join(sorted([user, 'public']))})" in str(ambiguous.value)
    assert "public" == recorded
    assert () == again.steps
