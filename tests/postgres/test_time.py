"""Policy durations mean the same span of time on the server as in the pure core."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from stall_core import PacingPolicy
from stall_testing import MemoryDriver, PostgresDriver
from tests import pg

pytestmark = pytest.mark.postgres

#: A simulation's policy with day-long steps; the switchboard default has none.
DAILY = PacingPolicy(threshold=timedelta(minutes=2), backoff=(timedelta(days=1),), cap=3)
#: Nudge 1 the day before Europe's clocks go back (2026-10-25 01:00 UTC).
FIRST = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)


async def numbers_due(driver: MemoryDriver | PostgresDriver) -> list[int]:
    """Nudge one stalled pair at FIRST; return the numbers charged a day later."""
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-1", endpoint_id="ep-1")
    await driver.create_todo(
        "t", endpoint_id="ep-1", queue="lane-l", created_at=FIRST - timedelta(hours=1)
    )
    driver.clock.set(FIRST)
    await driver.ledger.charge_due(policy=DAILY)
    driver.clock.set(FIRST + timedelta(days=1))
    return [n.number for n in (await driver.ledger.charge_due(policy=DAILY)).charged]


async def test_a_day_long_backoff_is_24_hours_in_any_server_time_zone(site: pg.Site) -> None:
    """A 1-day backoff across a DST change ends 24 h after the nudge, as in the pure core,
    for a sweeping role whose sessions run in Europe/Berlin."""
    berlin = {"TimeZone": "Europe/Berlin"}
    async with (
        site.host_pool() as host,
        asyncpg.create_pool(
            site.as_role(site.cast.sweeper), min_size=1, max_size=1, server_settings=berlin
        ) as sweeper,
    ):
        postgres = pg.SiteDriver(host, sweeper)

        assert [[2], [2]] == [await numbers_due(d) for d in (MemoryDriver(), postgres)]
        assert "Europe/Berlin" == await sweeper.fetchval("SHOW TimeZone")
