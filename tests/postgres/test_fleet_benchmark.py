"""The fleet benchmark, run small: real sidecars on random phases keep one sweep per interval."""

from __future__ import annotations

import re

import pytest

from stall_core import PacingPolicy
from tests.benchmarks_run import last_line

pytestmark = pytest.mark.postgres

SMALL = ("--sidecars", "2", "--intervals", "4", "--interval", "1")
LINE = re.compile(
    r"fleet: sidecars=(?P<sidecars>\d+) sweeps_per_interval=(?P<sweeps>\d+\.\d+)"
    r" max_wakes_per_interval=(?P<wakes>\d+)"
)


def test_two_sidecars_sweep_at_most_once_an_interval_and_wake_at_most_the_tick_limit(
    pg_server: str,
) -> None:
    """Sweeps are an interval apart by design, so both figures hold whatever the machine's speed."""
    last = last_line("fleet", *SMALL, "--dsn", pg_server)

    found = LINE.fullmatch(last)
    assert found is not None, last
    assert "2" == found["sidecars"]
    # At most one sweep an interval (sweeps are at least an interval apart), and some.
    assert 0 < float(found["sweeps"]) <= 1.0
    assert int(found["wakes"]) <= PacingPolicy().tick_limit
