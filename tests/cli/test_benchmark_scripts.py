"""The benchmarks that need no database, run small: each ends with the line it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("cli_start", "--rounds", "1"), r"cli_start: median_ms=\d+\.\d"),
        (("sim_speed", "--pairs", "20"), r"sim_speed: fleet_week_s=\d+\.\d\d pair_ticks_per_s=\d+"),
    ],
)
def test_a_small_run_prints_its_last_line(args: tuple[str, ...], line: str) -> None:
    """Run as docs/benchmarks.md prints it, at a small size."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks." + args[0], *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert 0 == done.returncode, done.stderr
    assert re.fullmatch(line, done.stdout.splitlines()[-1]), done.stdout
