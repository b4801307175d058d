"""The benchmarks that need no database, run small: each ends with the line it promises."""

from __future__ import annotations

import re

import pytest

from tests.benchmarks_run import last_line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("cli_start", "--rounds", "1"), r"cli_start: median_ms=\d+\.\d"),
        (("sim_speed", "--pairs", "20"), r"sim_speed: fleet_week_s=\d+\.\d\d pair_ticks_per_s=\d+"),
        (("sim_sweep", "--pairs", "20"), r"sim_sweep: policies=100 wall_s=\d+\.\d\d"),
    ],
)
def test_a_small_run_prints_its_last_line(args: tuple[str, ...], line: str) -> None:
    """Run as docs/benchmarks.md prints it, at a small size."""
    last = last_line(*args)

    assert re.fullmatch(line, last), last
