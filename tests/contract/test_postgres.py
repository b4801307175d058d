"""The contract scenarios against the Postgres ledger, on each host set-up (tests/pg.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from stall_testing.contract import LedgerContract
from tests import pg


@pytest.mark.postgres
@pytest.mark.parametrize("site", pg.SETUPS, indirect=True)
class TestPostgres(LedgerContract):
    @pytest.fixture(name="driver")
    async def _driver(self, site: pg.Site) -> AsyncIterator[pg.SiteDriver]:
        async with site.driver() as driver:
            yield driver
