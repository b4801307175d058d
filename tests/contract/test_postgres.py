"""The contract scenarios against the Postgres ledger, in each footprint."""

from __future__ import annotations

import asyncpg
import pytest

from stall_testing import PostgresDriver
from stall_testing.contract import CommitOrderContract, LedgerContract, TimestampsContract


@pytest.mark.postgres
class TestPostgresLean(LedgerContract, TimestampsContract):
    @pytest.fixture(name="driver")
    def _driver(self, pg_pool: asyncpg.Pool) -> PostgresDriver:
        return PostgresDriver(pg_pool)


@pytest.mark.postgres
class TestPostgresIncremental(LedgerContract, CommitOrderContract):
    @pytest.fixture(name="driver")
    def _driver(self, pg_pool_incremental: asyncpg.Pool) -> PostgresDriver:
        return PostgresDriver(pg_pool_incremental)
