"""A guest in the host's database: nothing a role with ordinary rights planted runs as ours.

On the ``planted`` set-up (tests/pg.py): the host's ids and queue names are
varchar, so pg_catalog has no exact ``=`` for them, and before we installed
a role with CREATE on public planted an ``=`` and a ``>`` for varchar,
functions shadowing ones our statements call, and tables under our names.
Our sessions put public ahead of pg_catalog (``pg.CARELESS``), as a careless
embedder's pool might. The contract suite ticks on this set-up too; here are
the rest: status, the hook directory, start-up, migrate and check.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

import stall_nudge
from adapters.postgres import PostgresHooks, check, migrate, plan
from stall_core import PacingPolicy
from stall_testing import FakeClock
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("site", ["planted"], indirect=True),
]


async def test_the_plant_captures_a_careless_query(site: pg.Site) -> None:
    """The control: a varchar comparison, on the sweeping role's own search_path, runs it."""
    async with site.connect(site.cast.sweeper) as conn:
        with pytest.raises(asyncpg.RaiseError, match="planted code ran"):
            await conn.fetchval("SELECT 'ep-1'::varchar = 'ep-1'::varchar")


async def test_status_hooks_and_start_up_run_none_of_it(site: pg.Site) -> None:
    """open_reaper's start-up and a tick, status and the hook directory run no planted code."""
    async with site.driver(FakeClock(T0)) as driver:
        async with stall_nudge.open_reaper(driver.sweeper) as reaper:
            report = await reaper.tick()  # before there is work: nothing is sent
        await stalled_queue(driver, todos=2)
        driver.clock.set(T0 + timedelta(minutes=10))
        _, pairs = await driver.sweeping.status(policy=PacingPolicy())
        hooks = PostgresHooks(driver.sweeper)
        [hook] = await hooks.hooks_covering("ep-1", "lane-l")
        health = await hooks.record_failure(hook.id, at=T0, reason="down", disable_after=10)
        await hooks.record_success(hook.id)

    assert [("ep-1", "lane-l")] == [(p.endpoint_id, p.queue) for p in pairs]
    assert health is not None
    assert 1 == health.consecutive_failures
    assert "full" == report.kind


async def test_migrate_and_check_run_none_of_it(site: pg.Site) -> None:
    """As the migrating role, no superuser, plan, check and migrate run no planted code."""
    conn = await asyncpg.connect(
        site.as_role(site.cast.migrator), server_settings={"search_path": pg.CARELESS}
    )
    try:
        before = await plan(conn)
        report = await check(conn)
        await migrate(conn)
        search_path = await conn.fetchval("SHOW search_path")
    finally:
        await conn.close()

    assert () == before.steps
    assert () == report.problems
    assert any("may create objects in the host's schema sb" in a for a in report.advice)
    assert pg.CARELESS == search_path  # the caller's, put back
