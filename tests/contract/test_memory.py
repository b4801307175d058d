"""The contract scenarios against the in-memory board."""

from __future__ import annotations

import re

import pytest

from stall_testing import MemoryDriver
from stall_testing.contract import LedgerContract


class TestMemory(LedgerContract):
    @pytest.fixture(name="driver")
    def _driver(self) -> MemoryDriver:
        return MemoryDriver()


#: The SPEC-0038 scenarios (and failure modes) the shipped suite runs on every ledger.
SPEC_SCENARIOS = (
    "Pending work with no new inbound webhook",
    "Fresh work is not a stalled queue",
    "Unverified deliveries age quietly",
    "A queue with no receiver is not charged",
    "A deep backlog costs one wake",
    "A stalled queue backs off and stops",
    "Consumer woken but never claims",
    "Progress keeps the short cadence",
    "A drained queue does not ring",
    "Two instances, one wake",
    "A nudge spends no ring budget",
    "Nudging does not wake a quarantined queue",
    "The reported case",
    "The wake is lost",
)


def test_the_shipped_suite_runs_every_ledger_scenario_of_the_spec() -> None:
    """stall_testing.contract has one test per spec scenario title, so no backend skips one."""
    names = {name for name in dir(LedgerContract) if name.startswith("test_")}
    wanted = {
        "test_" + re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") for title in SPEC_SCENARIOS
    }

    assert set() == wanted - names
