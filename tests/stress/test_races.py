"""The races benchmark: real sweeper processes on skewed clocks find no violation.

``tests/stress/races.py`` runs against a throwaway database on the session's
server: 36 trials by default (every race class twice on 4 and on 8
sweepers), ``STALL_RACE_TRIALS`` of them when set (a release check runs
``STALL_RACE_TRIALS=10000``); the checks are the same at every size. Its
positive controls run it on deliberately broken ledgers (a correct one
broken from Python), so a clean line is known to mean something; its
negative control runs one sweeper beside the fleet's lock, which the
compare-and-set alone must keep from charging a wake twice. The controls
keep their short size. Each run prints its lines, counts included
(``pytest -rP`` shows them).

``tests/stress/nudge_race.py`` races two operators' nudge now against a
sweeping fleet, in separate processes, on the same server: 16 trials
here, ``STALL_NUDGE_RACE_TRIALS`` when set; each pair must wake once. Its
control (every operator's charge woken twice) must be counted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.stress.shared import ROOT

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
]

LAST_LINE = re.compile(
    r"races: trials=(?P<trials>\d+) instances=(?P<instances>\d+)"
    r" duplicates=(?P<duplicates>\d+) double_resets=(?P<double_resets>\d+)"
    r" lost=(?P<lost>\d+) stranded=(?P<stranded>\d+)"
    r" db_sweeps_per_tick=(?P<db_sweeps_per_tick>\d+\.\d+)"
)
CONFIG_LINE = re.compile(
    r"races\[(?P<instances>\d+) instances\]: .* \(full=(?P<full>\d+) delta=(?P<delta>\d+)\)"
    r" .* other=(?P<other>\d+) "
)
COUNTS = ("duplicates", "double_resets", "lost", "stranded")
#: The suite's run: every race class (nine) twice on 4 and on 8 sweepers, unless
#: STALL_RACE_TRIALS says how many (at least one per sweeper count).
TRIALS = os.environ.get("STALL_RACE_TRIALS", "36")
#: A control's run: every class twice on 4 sweepers.
CONTROL_TRIALS = "18"


def run_races(pg_server: str, trials: str, *args: str) -> tuple[int, dict[str, str], str]:
    """Run ``trials`` trials; return the exit code, the last line's fields and all the output."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.stress.races", "--dsn", pg_server, "--trials", trials, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600 + 2 * int(trials),  # only a hang takes this long
        check=False,
    )
    output = done.stdout + done.stderr
    print(output)
    lines = done.stdout.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1]) if lines else None
    assert match is not None, output
    return done.returncode, match.groupdict(), output


def _configs(output: str) -> list[dict[str, str]]:
    return [m.groupdict() for m in CONFIG_LINE.finditer(output)]


def test_a_run_finds_no_violation(pg_server: str) -> None:
    """The trials split over 4 and 8 sweepers, full passes and deltas both: every count 0."""
    code, fields, output = run_races(pg_server, TRIALS)

    assert 0 == code, output
    assert (TRIALS, "8") == (fields["trials"], fields["instances"])
    assert dict.fromkeys(COUNTS, "0") == {name: fields[name] for name in COUNTS}, output
    configs = _configs(output)
    assert ["4", "8"] == [c["instances"] for c in configs], output
    assert ["0", "0"] == [c["other"] for c in configs], output
    assert all(int(c["full"]) > 0 and int(c["delta"]) > 0 for c in configs), output
    assert 1.0 <= float(fields["db_sweeps_per_tick"]) <= 4.0


@pytest.mark.parametrize(
    ("fault", "count"),
    [
        ("double-hand", "duplicates"),
        ("forget-reads", "double_resets"),
        ("skip-refund", "stranded"),
        ("hide-charge", "lost"),
    ],
)
def test_a_broken_ledger_is_caught(pg_server: str, fault: str, count: str) -> None:
    """Each ledger broken from Python makes its count non-zero and the run fail."""
    code, fields, output = run_races(
        pg_server, CONTROL_TRIALS, "--instances", "4", "--fault", fault
    )

    assert 1 == code, output
    assert int(fields[count]) > 0, output


def test_a_sweeper_beside_the_fleet_lock_charges_no_wake_twice(pg_server: str) -> None:
    """One sweeper on its own lock key races the fleet; the compare-and-set leaves every count 0."""
    code, fields, output = run_races(
        pg_server, CONTROL_TRIALS, "--instances", "4", "--fault", "outside-lock"
    )

    assert 0 == code, output
    assert dict.fromkeys(COUNTS, "0") == {name: fields[name] for name in COUNTS}, output
    assert ["0"] == [c["other"] for c in _configs(output)], output
    # Both sweep every round: the one beside the lock never misses it.
    assert float(fields["db_sweeps_per_tick"]) >= 2.0, output
    overlapped = sum(int(n) for n in re.findall(r" overlapped=(\d+)", output))
    assert overlapped > 0, output


NUDGE_LINE = re.compile(
    r"nudge_now: trials=(?P<trials>\d+) sweepers=(?P<sweepers>\d+) operators=2"
    r" wakes=(?P<wakes>\d+) duplicates=(?P<duplicates>\d+) lost=(?P<lost>\d+)"
    r" other=(?P<other>\d+)"
)
NUDGE_WINNERS = re.compile(
    r"nudge_now\[.*\]: trials=\d+ by_operator=(?P<by_operator>\d+)"
    r" by_operator_tick=\d+ by_fleet=\d+ waits=(?P<waits>\d+)"
)
#: The suite's nudge-now race: each of its four kinds four times (STALL_NUDGE_RACE_TRIALS
#: overrides it); the control's, each kind twice.
NUDGE_TRIALS = os.environ.get("STALL_NUDGE_RACE_TRIALS", "16")
NUDGE_CONTROL_TRIALS = "8"


def run_nudge_race(pg_server: str, trials: str, *args: str) -> tuple[int, dict[str, str], str]:
    """Run the nudge-now race; return the exit code, the last line's fields and all the output."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.stress.nudge_race", "--dsn", pg_server, "--trials", trials,
         *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600 + 2 * int(trials),  # only a hang takes this long
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    print(output)
    lines = done.stdout.strip().splitlines()
    match = NUDGE_LINE.fullmatch(lines[-1]) if lines else None
    assert match is not None, output
    return done.returncode, match.groupdict(), output


def test_nudge_now_racing_a_fleet_and_another_operator_wakes_once(pg_server: str) -> None:
    """Two operators and four sweeper processes at one pair: one wake per trial, none lost."""
    code, fields, output = run_nudge_race(pg_server, NUDGE_TRIALS)

    assert 0 == code, output
    assert (NUDGE_TRIALS, NUDGE_TRIALS) == (fields["trials"], fields["wakes"]), output
    assert ("0", "0", "0") == (fields["duplicates"], fields["lost"], fields["other"]), output
    winners = NUDGE_WINNERS.search(output)
    assert winners is not None, output
    # The operators raced: their own nudge won some trials and was told to wait in others.
    assert int(winners["by_operator"]) > 0, output
    assert int(winners["waits"]) > 0, output


def test_a_nudge_woken_twice_is_counted(pg_server: str) -> None:
    """The control: operators that wake each charge a second time make duplicates non-zero."""
    code, fields, output = run_nudge_race(pg_server, NUDGE_CONTROL_TRIALS, "--fault", "double-hand")

    assert 1 == code, output
    assert int(fields["duplicates"]) > 0, output
