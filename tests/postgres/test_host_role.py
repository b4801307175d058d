"""No host write can fail because of us: a host role with rights on its own tables only.

The host's role may write endpoints, deliveries, todos and notify_hooks and
nothing of ours. In the incremental footprint our triggers still log its
writes (they run with the migrating role's rights); in the lean one nothing
of ours is on its path at all, so dropping any table of ours changes no host
write, and the sweep says which table is missing and what to run.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import OUR_TABLES, PostgresLedger, migrate
from stall_core import LedgerError, PacingPolicy
from stall_testing import PostgresHost
from tests import pg
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
#: The tables of ours a lean tick reads; without one it fails, naming it and the fix.
READ_BY_LEAN_TICK = {
    "queue_stall_nudges",
    "stall_nudge.claims",
    "stall_nudge.held",
    "stall_nudge.sweeps",
    "stall_nudge.settings",
}


@pytest.fixture(name="dsn", params=["lean", "incremental"])
def _dsn(request: pytest.FixtureRequest) -> str:
    """A fresh database in each footprint (chosen before any event loop runs)."""
    dsn: str = request.getfixturevalue(
        "pg_dsn" if request.param == "lean" else "pg_dsn_incremental"
    )
    return dsn


@pytest.fixture(name="role_dsn")
async def _role_dsn(pg_server: str, dsn: str) -> AsyncIterator[str]:
    """The DSN of a login role granted the host's tables only (and USAGE on the host's schema)."""
    role = pg.unique_name("stall_host_role")
    server = await asyncpg.connect(pg_server)
    admin = await asyncpg.connect(dsn)
    try:
        await server.execute(f"CREATE ROLE {role} LOGIN")
        await admin.execute(
            f"GRANT USAGE ON SCHEMA public TO {role};"
            f" GRANT SELECT, INSERT, UPDATE, DELETE ON endpoints, deliveries, todos, notify_hooks"
            f" TO {role}"
        )
        yield re.sub(r"^(postgres(?:ql)?://)[^@/]*@", rf"\g<1>{role}@", dsn, count=1)
    finally:
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.close()
        await server.execute(f"DROP ROLE {role}")
        await server.close()


async def host_writes(dsn: str) -> None:
    """Every write the host makes: endpoints, hooks, deliveries, todos created to completed."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        host = PostgresHost(pool)
        await host.add_endpoint("ep")
        await host.add_hook("hook", endpoint_id="ep", url="http://127.0.0.1:9/", secret=SECRET)
        await host.add_delivery("dlv", endpoint_id="ep", verified=False, received_at=T0)
        for todo in ("a", "b"):
            await host.create_todo(
                todo, endpoint_id="ep", queue="q", created_at=T0, delivery_id="dlv"
            )
        await pool.execute("UPDATE deliveries SET verified = true WHERE id = 'dlv'")
        await host.claim("a", owner="consumer", at=T0 + minutes(1))
        await host.requeue("a")
        await host.claim("a", owner="consumer", at=T0 + minutes(2))
        await host.complete("a")
        await host.set_hook_queues("hook", ["q"])
        await host.set_hook_enabled("hook", False, at=T0, reason="by hand")
        await host.set_endpoint_state("ep", "paused")
        await pool.execute("DELETE FROM todos WHERE id = 'b'")
        assert {"a": "done"} == {t: row["state"] for t, row in (await host.todos()).items()}
    finally:
        await pool.close()


async def test_a_host_role_without_our_grants_writes_as_ever(dsn: str, role_dsn: str) -> None:
    """Each host write succeeds for a role with no right on our tables; incremental logs it all."""
    await host_writes(role_dsn)

    admin = await asyncpg.connect(dsn)
    try:
        footprint = await admin.fetchval("SELECT footprint FROM stall_nudge.settings")
        logged = await admin.fetchrow(
            "SELECT (SELECT count(*) FROM stall_nudge.claims) AS claims,"
            " (SELECT count(*) FROM stall_nudge.changes) AS changes"
        )
    finally:
        await admin.close()
    # Incremental: two claims; two todos created, one requeued, one deleted pending, and
    # the endpoint logged by a hook added (once), then before and after each of a delivery
    # verified, two hook changes and the endpoint paused.
    assert ((0, 0) if footprint == "lean" else (2, 4 + 1 + 2 * 4)) == tuple(logged)


@pytest.mark.parametrize("dsn", ["lean"], indirect=True)
@pytest.mark.parametrize("table", OUR_TABLES)
async def test_lean_host_writes_need_none_of_our_tables(
    dsn: str, role_dsn: str, table: str
) -> None:
    """With any table of ours dropped, every host write succeeds; the sweep names the fix."""
    admin = await asyncpg.connect(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await admin.execute(f"DROP TABLE {table}")

        await host_writes(role_dsn)

        ledger = PostgresLedger(pool, clock=FakeClock(T0 + minutes(10)))
        if table in READ_BY_LEAN_TICK:
            name = table.rpartition(".")[2]
            with pytest.raises(LedgerError, match=rf"{name}.*stall-nudge migrate"):
                await ledger.charge_due(policy=PacingPolicy())
        else:
            assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
        await migrate(admin)
        assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
    finally:
        await pool.close()
        await admin.close()


@pytest.mark.parametrize("dsn", ["incremental"], indirect=True)
@pytest.mark.parametrize("log", ["stall_nudge.claims", "stall_nudge.changes"])
async def test_an_incremental_log_dropped_by_hand_fails_no_host_write(
    dsn: str, role_dsn: str, log: str
) -> None:
    """Our triggers skip a log table that is gone; the sweep's error names it and the fix."""
    admin = await asyncpg.connect(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await admin.execute(f"DROP TABLE {log}")

        await host_writes(role_dsn)

        ledger = PostgresLedger(pool, clock=FakeClock(T0 + minutes(10)))
        with pytest.raises(LedgerError, match=rf"{log.partition('.')[2]}.*stall-nudge migrate"):
            await ledger.charge_due(policy=PacingPolicy())
    finally:
        await pool.close()
        await admin.close()
