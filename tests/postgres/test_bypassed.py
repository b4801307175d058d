"""The reported case drains with every host write under the replica role (Postgres only).

The host's pool writes under ``session_replication_role = replica``, as a
logical-replication subscriber or ``pg_restore --disable-triggers`` does: no
ordinary trigger fires on its writes. Nothing of ours is a trigger; the
sweep reads the host's rows, which are the truth, so the reported case (ten
todos, a one-shot consumer) drains on every kind of host the contract
names, as it does with ordinary writes. The ledger's own pool is an
ordinary one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from stall_testing import FakeClock, PostgresDriver, PostgresHost
from stall_testing.contract import LedgerContract

pytestmark = pytest.mark.postgres

#: The contract's reported case with ten todos, one scenario per kind of host.
TEN_TODO_CASES = [
    "test_the_reported_case_with_a_host_clock_behind",
    "test_the_reported_case_on_a_host_that_deletes_finished_work",
    "test_the_reported_case_on_a_host_that_unstamps_finished_work",
    "test_the_reported_case_with_a_claim_that_spans_the_fifth_nudge",
]


class ReplicaWritesDriver(PostgresDriver):
    """The ledger on ``pool``; every host verb on ``host_pool``, under the replica role."""

    def __init__(self, pool: asyncpg.Pool, host_pool: asyncpg.Pool) -> None:
        super().__init__(pool, FakeClock())
        PostgresHost.__init__(self, host_pool)
        self.host_pool = host_pool


@pytest.fixture(name="driver")
async def _driver(pg_dsn: str) -> AsyncIterator[ReplicaWritesDriver]:
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=2)
    host_pool = await asyncpg.create_pool(
        pg_dsn, min_size=1, max_size=2, server_settings={"session_replication_role": "replica"}
    )
    try:
        yield ReplicaWritesDriver(pool, host_pool)
    finally:
        await host_pool.close()
        await pool.close()


@pytest.mark.parametrize("case", TEN_TODO_CASES, ids=lambda name: name.rpartition("case_")[2])
async def test_the_reported_case_drains_with_every_host_write_under_the_replica_role(
    driver: ReplicaWritesDriver, case: str
) -> None:
    """Every todo is claimed and the ledger empties (the scenario's own assertions)."""
    await getattr(LedgerContract(), case)(driver)

    # The host's writes really were made under the replica role.
    assert "replica" == await driver.host_pool.fetchval("SHOW session_replication_role")
