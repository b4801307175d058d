"""The contract scenarios against the in-memory board."""

from __future__ import annotations

import pytest

from stall_testing import MemoryDriver
from stall_testing.contract import LedgerContract


class TestMemoryLedger(LedgerContract):
    @pytest.fixture(name="driver")
    def _driver(self) -> MemoryDriver:
        return MemoryDriver()
