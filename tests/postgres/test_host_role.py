"""No host write can fail because of us: the host's role, with rights on its own tables only.

The host's application role (tests/pg.py) writes endpoints, deliveries,
todos and notify_hooks and holds nothing of ours. Nothing of ours is on its
path but indexes (no trigger, function or rule on its tables), so dropping
any table of ours changes no host write, and the sweep says which table is
missing and what to run.
"""

from __future__ import annotations

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
    "stall_nudge.queue_stall_nudges",
    "stall_nudge.held",
    "stall_nudge.ticks",
    "stall_nudge.settings",
    "stall_nudge.silences",
    "stall_nudge.history",
}
#: What would run code on a host write: the triggers (but the foreign keys' own) and the
#: rules on the host's tables. The reference host has none, and we add none.
CODE_ON_HOST_WRITES = """
SELECT tgrelid::regclass::text, tgname FROM pg_trigger
 WHERE NOT tgisinternal AND tgrelid = ANY ($1::regclass[])
UNION ALL
SELECT ev_class::regclass::text, rulename FROM pg_rewrite WHERE ev_class = ANY ($1::regclass[])
"""


async def host_writes(site: pg.Site) -> None:
    """Every write the host makes: endpoints, hooks, deliveries, todos created to completed."""
    async with site.host_pool() as pool:
        host = PostgresHost(pool)
        await host.add_endpoint("ep")
        await host.add_hook("hook", endpoint_id="ep", url="http://127.0.0.1:9/", secret=SECRET)
        await host.add_delivery("dlv", endpoint_id="ep", verified=False, received_at=T0)
        for todo in ("a", "b"):
            await host.create_todo(
                todo, endpoint_id="ep", queue="q", created_at=T0, delivery_id="dlv"
            )
        await host.set_delivery_verified("dlv", True)
        await host.claim("a", owner="consumer", at=T0 + minutes(1))
        await host.requeue("a")
        await host.claim("a", owner="consumer", at=T0 + minutes(2))
        await host.complete("a")
        await host.set_hook_queues("hook", ["q"])
        await host.set_hook_enabled("hook", False, at=T0, reason="by hand")
        await host.set_endpoint_state("ep", "paused")
        await host.delete_todo("b")
        assert {"a": "done"} == {t: row["state"] for t, row in (await host.todos()).items()}


async def test_a_host_role_without_our_grants_writes_as_ever(site: pg.Site) -> None:
    """Each host write succeeds for a role with no right on our tables; none runs code of ours."""
    async with site.connect() as conn:
        code = await conn.fetch(CODE_ON_HOST_WRITES, [f"sb.{t}" for t in HOST_TABLES])

    await host_writes(site)

    assert [] == [tuple(r) for r in code]


@pytest.mark.parametrize("table", OUR_TABLES)
async def test_host_writes_need_none_of_our_tables(site: pg.Site, table: str) -> None:
    """With any table of ours dropped, every host write succeeds; the sweep names the fix."""
    await pg.execute(site.dsn, f"DROP TABLE {table}")

    await host_writes(site)

    async with site.sweeper_pool() as pool:
        ledger = PostgresLedger(pool, clock=FakeClock(T0 + minutes(10)))
        if table in READ_BY_TICK:
            name = table.rpartition(".")[2]
            with pytest.raises(LedgerError, match=rf"{name}.*stall-nudge migrate"):
                await ledger.charge_due(policy=PacingPolicy())
        else:
            assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
        async with site.connect(site.cast.migrator) as conn:
            await migrate(conn)
        assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
