"""No host write can fail because of us: a host role with rights on its own tables only.

The host's role may write endpoints, deliveries, todos and notify_hooks and
nothing of ours. Nothing of ours is on its path but indexes (no trigger,
function or rule on its tables), so dropping any table of ours changes no
host write, and the sweep says which table is missing and what to run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import HOST_TABLES, OUR_TABLES, PostgresLedger, migrate
from stall_core import LedgerError, PacingPolicy
from stall_testing import PostgresHost
from tests import pg
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
#: The tables of ours a tick reads; without one it fails, naming it and the fix.
READ_BY_TICK = {
    "queue_stall_nudges",
    "stall_nudge.held",
    "stall_nudge.sweeps",
    "stall_nudge.settings",
}
#: What would run code on a host write: the triggers (but the foreign keys' own) and the
#: rules on the host's tables. The reference host has none, and we add none.
CODE_ON_HOST_WRITES = """
SELECT tgrelid::regclass::text, tgname FROM pg_trigger
 WHERE NOT tgisinternal AND tgrelid = ANY ($1::regclass[])
UNION ALL
SELECT ev_class::regclass::text, rulename FROM pg_rewrite WHERE ev_class = ANY ($1::regclass[])
"""


@pytest.fixture(name="role_dsn")
async def _role_dsn(pg_server: str, pg_dsn: str) -> AsyncIterator[str]:
    """The DSN of a login role granted the host's tables only (and USAGE on the host's schema)."""
    async with pg.login_role(pg_server, pg_dsn, "stall_host_role") as (role, dsn):
        admin = await asyncpg.connect(pg_dsn)
        try:
            await admin.execute(
                f'GRANT USAGE ON SCHEMA public TO "{role}";'
                " GRANT SELECT, INSERT, UPDATE, DELETE"
                f' ON endpoints, deliveries, todos, notify_hooks TO "{role}"'
            )
        finally:
            await admin.close()
        yield dsn


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


async def test_a_host_role_without_our_grants_writes_as_ever(pg_dsn: str, role_dsn: str) -> None:
    """Each host write succeeds for a role with no right on our tables; none runs code of ours."""
    admin = await asyncpg.connect(pg_dsn)
    try:
        code = await admin.fetch(CODE_ON_HOST_WRITES, list(HOST_TABLES))
    finally:
        await admin.close()

    await host_writes(role_dsn)

    assert [] == [tuple(r) for r in code]


@pytest.mark.parametrize("table", OUR_TABLES)
async def test_host_writes_need_none_of_our_tables(pg_dsn: str, role_dsn: str, table: str) -> None:
    """With any table of ours dropped, every host write succeeds; the sweep names the fix."""
    admin = await asyncpg.connect(pg_dsn)
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2)
    try:
        await admin.execute(f"DROP TABLE {table}")

        await host_writes(role_dsn)

        ledger = PostgresLedger(pool, clock=FakeClock(T0 + minutes(10)))
        if table in READ_BY_TICK:
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
