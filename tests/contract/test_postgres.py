"""The contract scenarios against the Postgres ledger."""

from __future__ import annotations

import asyncpg
import pytest

from stall_testing import PostgresDriver
from stall_testing.contract import LedgerContract


@pytest.mark.postgres
class TestPostgres(LedgerContract):
    @pytest.fixture(name="driver")
    def _driver(self, pg_pool: asyncpg.Pool) -> PostgresDriver:
        return PostgresDriver(pg_pool)
