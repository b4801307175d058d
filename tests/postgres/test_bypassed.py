"""The reported case drains with every host write hidden from our triggers (Postgres only).

The host's pool writes under ``session_replication_role = replica``, as a
logical-replication subscriber or ``pg_restore --disable-triggers`` does: no
trigger of ours sees a todo arrive, a claim, or a completion. The ledger's own
pool is an ordinary one. The host's rows are the truth, so the shared
scenario's every assertion holds as it does with the triggers firing: in the
lean footprint there is nothing to hide from, in the incremental one the
pairs come back by their ended backoff and the full pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from stall_testing import T0, FakeClock, PostgresDriver, PostgresHost
from stall_testing.contract import LedgerContract

pytestmark = pytest.mark.postgres


class HiddenWritesDriver(PostgresDriver):
    """The ledger on ``pool``; every host verb on ``host_pool``, which no trigger sees."""

    def __init__(self, pool: asyncpg.Pool, host_pool: asyncpg.Pool) -> None:
        super().__init__(pool, FakeClock())
        PostgresHost.__init__(self, host_pool)


@pytest.fixture(name="dsn", params=["lean", "incremental"])
def _dsn(request: pytest.FixtureRequest) -> str:
    name = "pg_dsn" if request.param == "lean" else "pg_dsn_incremental"
    dsn: str = request.getfixturevalue(name)
    return dsn


@pytest.fixture(name="driver")
async def _driver(dsn: str) -> AsyncIterator[HiddenWritesDriver]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    host_pool = await asyncpg.create_pool(
        dsn, min_size=1, max_size=2, server_settings={"session_replication_role": "replica"}
    )
    try:
        yield HiddenWritesDriver(pool, host_pool)
    finally:
        await host_pool.close()
        await pool.close()


async def test_the_reported_case_drains_with_every_host_write_hidden(
    driver: HiddenWritesDriver, dsn: str
) -> None:
    """Every todo is claimed, within one threshold and backoff step each; the ledger empties."""
    conn = await asyncpg.connect(dsn)
    try:
        await LedgerContract().test_the_reported_case(driver)
        # The writes really were hidden: a todo that would log a change logs none.
        await driver.add_endpoint("ep-probe")
        await driver.create_todo("probe", endpoint_id="ep-probe", queue="q", created_at=T0)
        await driver.claim("probe", owner="probe", at=T0)
        logged = await conn.fetchval(
            "SELECT (SELECT count(*) FROM stall_nudge.claims)"
            " + (SELECT count(*) FROM stall_nudge.changes)"
        )
    finally:
        await conn.close()
    assert 0 == logged
