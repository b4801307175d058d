"""A guest in the host's database: nothing another role plants in the host's schema runs as ours.

The host's ids and queue names are varchar here, so pg_catalog has no exact
``=`` for them, and a role that may CREATE in the host's schema plants an
``=`` and a ``>`` for varchar, functions shadowing ones our statements call,
and tables named as ours. Every planted function raises: if any of it ran,
the statement would fail. The sessions put the host's schema first on their
search_path, as a careless embedder's pool might. A control shows the plant
captures a query that does not take care.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresHooks, PostgresLedger, check, migrate, plan
from stall_core import PacingPolicy
from stall_testing import FakeClock, PostgresDriver
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0

pytestmark = pytest.mark.postgres

#: Host first, pg_catalog after it: planted objects would win every tie.
CARELESS = {"search_path": "public, pg_catalog"}


@pytest.fixture(name="dsn")
async def _dsn(pg_server: str) -> AsyncIterator[str]:
    """A database with a varchar host, migrated, then planted by a role that may CREATE there."""
    name = pg.unique_name("stall_guest")
    await pg.create_database(pg_server, name, template="template0")
    dsn = pg.with_database(pg_server, name)
    async with pg.login_role(pg_server, dsn, "stall_planter") as (planter, planter_dsn):
        admin = await asyncpg.connect(dsn)
        try:
            await migrate(admin, host_schema=True, host_id_type="varchar")
            await admin.execute("ALTER TABLE todos ALTER COLUMN queue TYPE varchar")
            await migrate(admin)  # our indexes on queue, rebuilt for its new type
            await admin.execute(f'GRANT CREATE ON SCHEMA public TO "{planter}"')
        finally:
            await admin.close()
        await pg.execute(planter_dsn, pg.PLANT)
        yield dsn
    await pg.drop_database(pg_server, name)


async def test_the_plant_captures_a_careless_query(dsn: str) -> None:
    """The control: a varchar comparison resolved through the host's schema runs planted code."""
    conn = await asyncpg.connect(dsn, server_settings=CARELESS)
    try:
        await conn.execute("INSERT INTO endpoints VALUES ('ep-1', 'active')")
        with pytest.raises(asyncpg.RaiseError, match="planted code ran"):
            await conn.fetch("SELECT 1 FROM endpoints WHERE id = 'ep-1'::varchar")
    finally:
        await conn.close()


async def test_the_sweep_status_and_hooks_run_none_of_it(dsn: str) -> None:
    """Ticks (full and delta), status and the hook directory work, and no planted code runs."""
    host = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, server_settings=CARELESS)
    try:
        clock = FakeClock(T0)
        ids = await stalled_queue(PostgresDriver(host, clock), todos=2)
        ledger = PostgresLedger(pool, clock=clock)
        clock.set(T0 + timedelta(minutes=10))
        full = await ledger.charge_due(policy=PacingPolicy())
        # The host's own claim, written so the plant does not capture it (id::text).
        await host.execute(
            "UPDATE todos SET state = 'claimed', claimed_at = $2, claim_owner = 'consumer'"
            " WHERE id::text = $1",
            ids[0],
            clock.now,
        )
        clock.advance(timedelta(seconds=15))
        delta = await ledger.charge_due(policy=PacingPolicy())
        _, pairs = await ledger.status(policy=PacingPolicy())
        hooks = PostgresHooks(pool)
        [hook] = await hooks.hooks_covering("ep-1", "lane-l")
        health = await hooks.record_failure(hook.id, at=T0, reason="down", disable_after=10)
        await hooks.record_success(hook.id)
    finally:
        await pool.close()
        await host.close()

    assert ("full", [1]) == (full.kind, [n.number for n in full.charged])
    assert ("delta", [(1, ids[1])]) == (delta.kind, [(n.number, n.todo.id) for n in delta.charged])
    assert [("ep-1", "lane-l")] == [(p.endpoint_id, p.queue) for p in pairs]
    assert health is not None
    assert 1 == health.consecutive_failures


async def test_migrate_and_check_run_none_of_it(dsn: str) -> None:
    """As the migrating role (a superuser here), plan, check and migrate run no planted code."""
    conn = await asyncpg.connect(dsn, server_settings=CARELESS)
    try:
        before = await plan(conn)
        report = await check(conn)
        await migrate(conn)
        search_path = await conn.fetchval("SHOW search_path")
    finally:
        await conn.close()

    assert () == before.steps
    assert () == report.problems
    assert any("may create objects in the host's schema public" in a for a in report.advice)
    assert "public, pg_catalog" == search_path  # the caller's, put back


async def test_the_reaper_starts_and_ticks_on_a_careless_pool(dsn: str) -> None:
    """open_reaper's start-up checks and a tick, on the embedder's careless pool, run none of it."""
    import stall_nudge

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, server_settings=CARELESS)
    try:
        async with stall_nudge.open_reaper(pool) as reaper:
            report = await reaper.tick()
    finally:
        await pool.close()

    assert "full" == report.kind
