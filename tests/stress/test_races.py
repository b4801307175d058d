"""The races benchmark, short: real sweeper processes on skewed clocks find no violation.

``tests/stress/races.py`` runs with ``--trials`` small, against a throwaway
database on the session's server, in each footprint. Its positive controls
run it on deliberately broken ledgers, so a clean line is known to mean
something.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stress.races import FOOTPRINTS

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
]

ROOT = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(
    r"races: trials=(?P<trials>\d+) instances=(?P<instances>\d+)"
    r" duplicates=(?P<duplicates>\d+) double_resets=(?P<double_resets>\d+)"
    r" lost=(?P<lost>\d+) stranded=(?P<stranded>\d+)"
    r" db_sweeps_per_tick=(?P<db_sweeps_per_tick>\d+\.\d+)"
)
COUNTS = ("duplicates", "double_resets", "lost", "stranded")


def run_races(pg_server: str, *args: str) -> tuple[int, dict[str, str], str]:
    """Run the benchmark; return its exit code, its last line's fields and all its output."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.stress.races", "--dsn", pg_server, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1]) if lines else None
    assert match is not None, output
    return done.returncode, match.groupdict(), output


@pytest.mark.parametrize("footprint", FOOTPRINTS)
def test_a_short_run_finds_no_violation(pg_server: str, footprint: str) -> None:
    """Thirty-two trials over 4 and 8 sweeper processes end with every count 0 and exit 0."""
    code, fields, output = run_races(pg_server, "--trials", "32", "--footprint", footprint)

    assert 0 == code, output
    assert "32" == fields["trials"]
    assert "8" == fields["instances"]
    assert dict.fromkeys(COUNTS, "0") == {name: fields[name] for name in COUNTS}, output
    assert 1.0 <= float(fields["db_sweeps_per_tick"]) <= 4.0


@pytest.mark.parametrize(
    ("fault", "count"),
    [
        ("no-lock", "duplicates"),
        ("double-count", "double_resets"),
        ("ignore-claims", "lost"),
        ("no-refund", "stranded"),
        ("hide-charge", "lost"),
    ],
)
@pytest.mark.parametrize("footprint", FOOTPRINTS)
def test_a_broken_ledger_is_caught(pg_server: str, fault: str, count: str, footprint: str) -> None:
    """Each deliberately broken ledger makes its count non-zero and the run fail."""
    code, fields, output = run_races(
        pg_server, "--trials", "14", "--instances", "4", "--fault", fault, "--footprint", footprint
    )

    assert 1 == code, output
    assert int(fields[count]) > 0, output
