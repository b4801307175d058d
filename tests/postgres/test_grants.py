"""migrate --grant: a sweeping role gets exactly what sweep and status need, recorded and checked.

Each test starts from a brand-new database migrated with the reference host
tables, and a login role made for it (dropped, with what it was granted there, afterwards).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

import stall_nudge
from adapters.postgres import (
    PostgresHooks,
    PostgresLedger,
    check,
    migrate,
    missing_privileges,
    plan,
    recorded_schema,
    uninstall,
)
from stall_core import PacingPolicy
from stall_testing import FakeClock, PostgresDriver
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0

pytestmark = pytest.mark.postgres

#: Everything migrate --grant gives a new role, as the catalog lists it: checked in here,
#: apart from the list migrate grants from (adapters.postgres.SWEEPER_PRIVILEGES). USAGE
#: on public is not among them: every role holds it through PUBLIC, so it is not given.
EXPECTED = {
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
        f"column notify_hooks.{c}: {p}"
        for c in ("consecutive_failures", "disabled_at", "disabled_reason")
        for p in ("SELECT", "UPDATE")
    ),
    "column notify_hooks.enabled: UPDATE",
    *(f"table queue_stall_nudges: {p}" for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
    *(f"table held: {p}" for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
    *(f"table sweeps: {p}" for p in ("SELECT", "INSERT", "UPDATE")),
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


@pytest.fixture(name="dsn")
async def _dsn(pg_server: str) -> AsyncIterator[str]:
    """A brand-new database, migrated with the reference host tables."""
    name = pg.unique_name("stall_grants")
    await pg.create_database(pg_server, name, template="template0")
    dsn = pg.with_database(pg_server, name)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, host_schema=True)
    finally:
        await conn.close()
    yield dsn
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="role")
async def _role(pg_server: str, dsn: str) -> AsyncIterator[str]:
    """A login role of its own, dropped (with whatever it was granted) afterwards."""
    async with pg.login_role(pg_server, dsn, "stall_sweeper") as (role, _):
        yield role


async def privileges(conn: asyncpg.Connection, role: str) -> set[str]:
    return {r[0] for r in await conn.fetch(PRIVILEGES_OF, role)}


async def test_a_sweeping_role_gets_exactly_the_listed_privileges(dsn: str, role: str) -> None:
    """The catalog holds exactly the checked-in list for the role: no ALL, no table-wide UPDATE."""
    conn = await asyncpg.connect(dsn)
    try:
        report = await migrate(conn, grant=role)
        held = await privileges(conn, role)
        again = await plan(conn, grant=role)
        recorded = [r[0] for r in await conn.fetch("SELECT role FROM stall_nudge.grants")]
    finally:
        await conn.close()

    assert EXPECTED == held
    assert () == report.for_dba
    assert () == again.steps  # granting twice changes nothing
    assert [role] == recorded


async def test_the_role_sweeps_and_asks_status(dsn: str, role: str) -> None:
    """As the sweeping role: a tick charges, status answers, a hook's failure is booked."""
    conn = await asyncpg.connect(dsn)
    await migrate(conn, grant=role)
    await conn.close()
    host = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    sweeper = await asyncpg.create_pool(pg.with_user(dsn, role), min_size=1, max_size=2)
    try:
        clock = FakeClock(T0)
        await stalled_queue(PostgresDriver(host, clock))
        clock.set(T0 + timedelta(minutes=10))
        ledger = PostgresLedger(sweeper, clock=clock)
        outcome = await ledger.charge_due(policy=PacingPolicy())
        _, pairs = await ledger.status(policy=PacingPolicy())
        hooks = PostgresHooks(sweeper)
        [hook] = await hooks.hooks_covering("ep-1", "lane-l")
        health = await hooks.record_failure(hook.id, at=T0, reason="test", disable_after=10)
        async with sweeper.acquire() as mine:
            lacking = await missing_privileges(mine, await recorded_schema(mine))
    finally:
        await sweeper.close()
        await host.close()

    assert [1] == [n.number for n in outcome.charged]
    assert [("ep-1", "lane-l")] == [(p.endpoint_id, p.queue) for p in pairs]
    assert health is not None
    assert 1 == health.consecutive_failures
    assert [] == lacking


async def test_a_privilege_revoked_is_drift_that_migrate_repairs(dsn: str, role: str) -> None:
    """check names the privilege the role lost; migrate grants it again."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, grant=role)
        await conn.execute(f'REVOKE SELECT (claimed_at) ON todos FROM "{role}"')
        found = await check(conn)
        await migrate(conn)
        after = await check(conn)
        held = await privileges(conn, role)
    finally:
        await conn.close()

    assert f'grants: role {role} lacks SELECT (claimed_at) on "public"."todos"' in found.problems
    assert () == after.problems
    assert EXPECTED == held


async def test_check_as_the_sweeping_role_reports_and_does_not_fail(dsn: str, role: str) -> None:
    """A role that may read but not migrate runs check: a current database has no problem."""
    conn = await asyncpg.connect(dsn)
    await migrate(conn, grant=role)
    await conn.close()
    mine = await asyncpg.connect(pg.with_user(dsn, role))
    try:
        report = await check(mine)
    finally:
        await mine.close()

    assert () == report.problems


async def test_uninstall_revokes_the_grants_it_gave(dsn: str, role: str) -> None:
    """After --uninstall the role holds nothing on the host's tables."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, grant=role)
        await uninstall(conn)
        held = await privileges(conn, role)
    finally:
        await conn.close()

    assert set() == held


async def test_a_role_without_its_grants_cannot_start(dsn: str, role: str) -> None:
    """open_reaper refuses a role lacking a privilege, in one line naming it."""
    with pytest.raises(stall_nudge.StartupError) as refused:
        async with stall_nudge.open_reaper(pg.with_user(dsn, role)):
            pass

    assert "\n" not in str(refused.value)
    assert "lacks USAGE on schema stall_nudge" in str(refused.value)
    assert "migrate --grant" in str(refused.value)


async def test_a_migrating_role_that_may_not_grant_on_the_host_leaves_it_to_a_dba(
    dsn: str, role: str, pg_server: str
) -> None:
    """Our objects' grants are given; those on the host's tables are printed for a DBA."""
    async with pg.login_role(pg_server, dsn, "stall_migrator") as (migrator, migrator_dsn):
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'ALTER SCHEMA stall_nudge OWNER TO "{migrator}"')
            for table in ("migrations", "settings", "sweeps", "held", "grants"):
                await admin.execute(f'ALTER TABLE stall_nudge.{table} OWNER TO "{migrator}"')
            await admin.execute(f'ALTER TABLE queue_stall_nudges OWNER TO "{migrator}"')
            conn = await asyncpg.connect(migrator_dsn)
            try:
                report = await migrate(conn, grant=role)
            finally:
                await conn.close()
            held = await privileges(admin, role)
        finally:
            # Ours again, so that dropping the migrator drops none of our objects.
            await admin.execute(f'REASSIGN OWNED BY "{migrator}" TO CURRENT_USER')
            await admin.close()

    assert report.for_dba
    assert all(sql.startswith("GRANT") and '"public"' in sql for sql in report.for_dba)
    assert "table held: SELECT" in held
    assert "column todos.id: SELECT" not in held


async def test_one_migrate_restores_a_dropped_table_and_its_grants(dsn: str, role: str) -> None:
    """A table of ours dropped by hand comes back, granted to the recorded role, in one migrate."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, grant=role)
        await conn.execute("DROP TABLE stall_nudge.held")
        await migrate(conn)
        again = await plan(conn)
        held = await privileges(conn, role)
    finally:
        await conn.close()

    assert () == again.steps
    assert EXPECTED == held


async def test_check_names_what_an_interrupted_first_migrate_left(dsn: str) -> None:
    """A first migrate killed after its index builds: check names each index it left."""
    conn = await asyncpg.connect(dsn)
    try:
        await uninstall(conn)
        await conn.execute(
            "CREATE INDEX stall_nudge_arrivals ON todos (created_at) WHERE state = 'pending'"
        )
        report = await check(conn)
    finally:
        await conn.close()

    assert (
        "not migrated: run stall-nudge migrate (an interrupted migrate left the objects below)",
        "left by an interrupted migrate: index stall_nudge_arrivals on todos",
    ) == report.problems
