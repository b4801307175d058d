"""migrate --grant: a sweeping role gets exactly what sweep and status need, recorded and checked.

Each test starts from a DBA's database (tests/pg.py), migrated by a role that
is no superuser, and a login role of its own granted nothing (dropped, with
what it was granted there, afterwards). The set-up's own sweeping role,
which reads through a group role, ticks in the contract suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

import stall_nudge
from adapters.postgres import MigrationReport, check, migrate, plan, uninstall
from tests import pg

pytestmark = pytest.mark.postgres

#: Everything migrate --grant gives a new role, as the catalog lists it: checked in here,
#: apart from the list migrate grants from (adapters.postgres.SWEEPER_PRIVILEGES).
EXPECTED = {
    "schema sb: USAGE",
    "schema stall_nudge: USAGE",
    *(f"column endpoints.{c}: SELECT" for c in ("id", "state")),
    *(f"column deliveries.{c}: SELECT" for c in ("id", "verified")),
    *(
        f"column todos.{c}: SELECT"
        for c in ("id", "endpoint_id", "queue", "delivery_id", "state", "title", "created_at")
    ),
    "column todos.claimed_at: SELECT",
    *(
        f"column notify_hooks.{c}: SELECT"
        for c in ("id", "endpoint_id", "url", "secret", "queues", "enabled")
    ),
    *(
        f"column {t}.{c}: {p}"
        for t in ("notify_hooks", "host_notify_hooks")
        for c in ("consecutive_failures", "disabled_at", "disabled_reason")
        for p in ("SELECT", "UPDATE")
        if (t, p) != ("host_notify_hooks", "SELECT")
    ),
    "column notify_hooks.enabled: UPDATE",
    "column host_notify_hooks.enabled: UPDATE",
    *(f"table host_{t}: SELECT" for t in ("endpoints", "deliveries", "todos", "notify_hooks")),
    *(f"table queue_stall_nudges: {p}" for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
    *(f"table held: {p}" for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
    *(f"table ticks: {p}" for p in ("SELECT", "INSERT", "UPDATE")),
    *(
        f"table {t}: {p}"
        for t in ("silences", "history")
        for p in ("SELECT", "INSERT", "UPDATE", "DELETE")
    ),
    "table settings: SELECT",
    "table migrations: SELECT",
    "table grants: SELECT",
}
PRIVILEGES_OF = """
SELECT 'schema ' || n.nspname || ': ' || a.privilege_type
  FROM pg_namespace n, aclexplode(n.nspacl) a WHERE a.grantee = $1::regrole
UNION ALL
SELECT 'table ' || c.relname || ': ' || a.privilege_type
  FROM pg_class c, aclexplode(c.relacl) a WHERE a.grantee = $1::regrole
UNION ALL
SELECT 'column ' || c.relname || '.' || t.attname || ': ' || a.privilege_type
  FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid, aclexplode(t.attacl) a
 WHERE a.grantee = $1::regrole
"""


@pytest.fixture(name="role")
async def _role(site: pg.Site) -> AsyncIterator[str]:
    """A login role of its own, granted nothing."""
    async with pg.login_role(site.dsn, site.dsn, "stall_sweeper") as (role, _):
        yield role


async def privileges(site: pg.Site, role: str) -> set[str]:
    async with site.connect() as conn:
        return {r[0] for r in await conn.fetch(PRIVILEGES_OF, role)}


async def migrated(site: pg.Site, grant: str | None = None) -> MigrationReport:
    """migrate (--grant ``grant``) as the set-up's migrating role."""
    async with site.connect(site.cast.migrator) as conn:
        return await migrate(conn, grant=grant)


async def test_a_sweeping_role_gets_exactly_the_listed_privileges(site: pg.Site, role: str) -> None:
    """The catalog holds exactly the checked-in list for the role: no ALL, no table-wide UPDATE."""
    report = await migrated(site, grant=role)
    async with site.connect(site.cast.migrator) as conn:
        again = await plan(conn, grant=role)
        recorded = {r[0] for r in await conn.fetch("SELECT role FROM stall_nudge.grants")}

    assert EXPECTED == await privileges(site, role)
    assert () == report.for_dba
    assert () == again.steps  # granting twice changes nothing
    assert {site.cast.sweeper, role} == recorded


async def test_a_privilege_revoked_is_drift_that_migrate_repairs(site: pg.Site, role: str) -> None:
    """check names the privilege the role lost; migrate grants it again."""
    await migrated(site, grant=role)
    await pg.execute(site.dsn, f'REVOKE SELECT (claimed_at) ON sb.todos FROM "{role}"')
    async with site.connect(site.cast.migrator) as conn:
        found = await check(conn)
        await migrate(conn)
        after = await check(conn)

    assert f'grants: role {role} lacks SELECT (claimed_at) on "sb"."todos"' in found.problems
    assert () == after.problems
    assert EXPECTED == await privileges(site, role)


async def test_check_as_the_sweeping_role_reports_and_does_not_fail(site: pg.Site) -> None:
    """A role that may read but not migrate runs check: a current database has no problem."""
    async with site.connect(site.cast.sweeper) as conn:
        report = await check(conn)

    assert () == report.problems


async def test_uninstall_revokes_the_grants_it_gave(site: pg.Site, role: str) -> None:
    """After --uninstall the role holds nothing on the host's tables."""
    await migrated(site, grant=role)
    async with site.connect(site.cast.migrator) as conn:
        await uninstall(conn)

    assert set() == await privileges(site, role)


async def test_a_role_without_its_grants_cannot_start(site: pg.Site, role: str) -> None:
    """open_reaper refuses a role lacking a privilege, in one line naming it."""
    with pytest.raises(stall_nudge.StartupError) as refused:
        async with stall_nudge.open_reaper(site.as_role(role)):
            pass

    assert "\n" not in str(refused.value)
    assert "lacks USAGE on schema" in str(refused.value)
    assert "migrate --grant" in str(refused.value)


async def test_a_migrating_role_that_may_not_grant_on_the_host_leaves_it_to_a_dba(
    site: pg.Site, role: str
) -> None:
    """Our objects' grants are given; those on the host's tables are printed for a DBA."""
    async with pg.login_role(site.dsn, site.dsn, "stall_migrator") as (migrator, as_migrator):
        # Ours are this role's now; it may look the host's schema up, and owns none of it.
        await pg.execute(
            site.dsn,
            f'REASSIGN OWNED BY "{site.cast.migrator}" TO "{migrator}";'
            f' GRANT USAGE ON SCHEMA sb TO "{migrator}"',
        )
        conn = await asyncpg.connect(as_migrator)
        try:
            report = await migrate(conn, grant=role)
        finally:
            await conn.close()
        held = await privileges(site, role)

    assert report.for_dba
    assert all(sql.startswith("GRANT") and '"sb"' in sql for sql in report.for_dba)
    assert "table held: SELECT" in held
    assert "column todos.id: SELECT" not in held


async def test_one_migrate_restores_a_dropped_table_and_its_grants(
    site: pg.Site, role: str
) -> None:
    """A table of ours dropped by hand comes back, granted to the recorded role, in one migrate."""
    await migrated(site, grant=role)
    await pg.execute(site.dsn, "DROP TABLE stall_nudge.held")
    await migrated(site)
    async with site.connect(site.cast.migrator) as conn:
        again = await plan(conn)

    assert () == again.steps
    assert EXPECTED == await privileges(site, role)


async def test_check_names_what_an_interrupted_first_migrate_left(bare_site: pg.Site) -> None:
    """A first migrate killed after its index builds: check names each index it left."""
    await pg.execute(
        bare_site.dsn,
        "CREATE INDEX stall_nudge_arrivals ON sb.todos (created_at) WHERE state = 'pending'",
    )
    async with bare_site.connect(bare_site.cast.migrator) as conn:
        report = await check(conn)

    assert (
        "not migrated: run stall-nudge migrate (an interrupted migrate left the objects below)",
        "left by an interrupted migrate: index stall_nudge_arrivals on todos",
    ) == report.problems
