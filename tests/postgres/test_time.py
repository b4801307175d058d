"""Policy durations mean the same span of time on the server as in the pure core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from stall_core import PacingPolicy
from stall_testing import MemoryDriver, PostgresDriver

pytestmark = pytest.mark.postgres

#: A simulation's policy with day-long steps; the switchboard default has none.
DAILY = PacingPolicy(threshold=timedelta(minutes=2), backoff=(timedelta(days=1),), cap=3)
#: Nudge 1 the day before Europe's clocks go back (2026-10-25 01:00 UTC).
FIRST = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)


@pytest.fixture(name="berlin_pool")
async def _berlin_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool whose sessions run in Europe/Berlin, as a server configured there would."""
    pool = await asyncpg.create_pool(
        pg_dsn, min_size=1, max_size=1, server_settings={"TimeZone": "Europe/Berlin"}
    )
    yield pool
    await pool.close()


async def numbers_due(
    driver: MemoryDriver | PostgresDriver, policy: PacingPolicy, first: datetime, due: datetime
) -> list[int]:
    """Nudge one stalled pair at ``first``; return the numbers charged at ``due``."""
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-1", endpoint_id="ep-1")
    await driver.create_todo(
        "t", endpoint_id="ep-1", queue="lane-l", created_at=first - timedelta(hours=1)
    )
    driver.clock.set(first)
    await driver.ledger.charge_due(policy=policy)
    driver.clock.set(due)
    return [n.number for n in (await driver.ledger.charge_due(policy=policy)).charged]


async def test_the_default_backoff_is_exact_across_a_dst_change(
    berlin_pool: asyncpg.Pool,
) -> None:
    """The default 5-minute backoff ending across Berlin's DST change is due on time on both."""
    # Nudge 1 one minute before the clocks go back; nudge 2 is due 5 minutes later.
    first = datetime(2026, 10, 25, 0, 59, tzinfo=UTC)
    due = first + timedelta(minutes=5)

    assert [[2], [2]] == [
        await numbers_due(driver, PacingPolicy(), first, due)
        for driver in (MemoryDriver(), PostgresDriver(berlin_pool))
    ]


async def test_a_day_long_backoff_is_24_hours_in_any_server_time_zone(
    berlin_pool: asyncpg.Pool,
) -> None:
    """A 1-day backoff across a DST change ends 24 h after the nudge, as in the pure core."""
    assert [[2], [2]] == [
        await numbers_due(driver, DAILY, FIRST, FIRST + timedelta(days=1))
        for driver in (MemoryDriver(), PostgresDriver(berlin_pool))
    ]
