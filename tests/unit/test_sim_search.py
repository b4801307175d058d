"""The policy search: its grid, its Pareto front, the spec's mark, and --sweep's parsing."""

from __future__ import annotations

import argparse
import random
from datetime import timedelta

import pytest

from stall_core import PacingPolicy
from stall_nudge.cli import CliError
from stall_nudge.cli.simulate_sweep import format_search, grid_of, sweep_axis
from stall_sim import Scenario
from stall_sim.search import (
    Grid,
    Outcome,
    Synthetic,
    is_spec,
    pareto_front,
    policy_name,
    run_search,
)


def test_the_front_keeps_the_points_nothing_beats() -> None:
    """A point is off the front when another has no more starts and no longer p99, one less."""
    points = [(10, 50.0), (20, 10.0), (15, 60.0), (30, 10.0), (5, None), (10, 50.0)]

    assert [True, True, False, False, False, True] == pareto_front(points)


def test_the_front_of_one_point_and_of_none() -> None:
    """One scored point is its own front; a point without a p99 never is."""
    assert ([True], [False], []) == (pareto_front([(3, 1.0)]), pareto_front([(3, None)]), [])


def test_a_grid_adds_the_spec_policy_when_it_leaves_it_out() -> None:
    """A grid that misses the spec's values runs the spec's policy first, marked."""
    policies = Grid(caps=(3, 8)).policies()

    assert [True, False, False] == [is_spec(p) for p in policies]
    assert [5, 3, 8] == [p.pacing.cap for p in policies if p.pacing]


def test_a_grid_that_holds_the_spec_policy_runs_it_once() -> None:
    """The cartesian product with the spec's values in it has the spec's policy once."""
    policies = Grid(caps=(3, 5), tick_limits=(4, 16)).policies()

    assert (4, 1) == (len(policies), sum(is_spec(p) for p in policies))


def test_a_policy_name_reads_back_as_a_policy_spec() -> None:
    """The name is --policy's key=value syntax, with the core's durations."""
    name = policy_name(PacingPolicy(backoff=(timedelta(minutes=2), timedelta(hours=1)), cap=3))

    assert "threshold=2m,backoff=2m/1h,cap=3,tick_limit=4" == name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cap", "expected KEY=V1,V2,..., got 'cap'"),
        ("limit=3", "unknown key 'limit' (threshold, backoff, cap, tick_limit)"),
        ("cap=3,,5", "cap: expected comma-separated values, got '3,,5'"),
        ("cap=3,x", "cap: expected a whole number, got 'x'"),
        ("tick_limit=0", "tick_limit: must be at least 1, got '0'"),
        ("cap=3,3", "cap: '3' is listed twice"),
        ("threshold=soon", "threshold: expected a duration like"),
        ("threshold=0", "threshold: "),
        ("backoff=1h/5m", "backoff: '1h/5m': backoff must not shrink"),
        ("backoff=5m/x", "backoff: expected a duration like"),
    ],
)
def test_a_bad_sweep_value_is_one_line_naming_it(text: str, message: str) -> None:
    """Each --sweep option is checked alone; the error names the key and the value."""
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        sweep_axis(text)

    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_key_swept_twice_is_refused() -> None:
    """Two --sweep options for one key are a usage error, not a silent override."""
    with pytest.raises(CliError, match="--sweep: cap is given twice"):
        grid_of([sweep_axis("cap=3"), sweep_axis("cap=5")])


def test_sweep_values_build_the_grid() -> None:
    """Durations, schedules and counts reach the grid as the core's values."""
    grid = grid_of([sweep_axis("threshold=1m,90"), sweep_axis("backoff=5m/1h,2m")])

    assert (
        (timedelta(minutes=1), timedelta(seconds=90)),
        ((timedelta(minutes=5), timedelta(hours=1)), (timedelta(minutes=2),)),
        (5,),
    ) == (grid.thresholds, grid.backoffs, grid.caps)


def _search(workers: int) -> list[Outcome]:
    scenario = Scenario(pairs=8, duration=timedelta(hours=6), wake_loss=0.3)
    return list(
        run_search(
            Synthetic(
                scenario=scenario,
                generator=random.Random,
                workload_seed="1:workload",
                chance_seed="1:chance",
            ),
            Grid(caps=(1, 5), thresholds=(timedelta(minutes=1), timedelta(minutes=2))).policies(),
            workers=workers,
        )
    )


def test_a_search_marks_the_spec_and_the_front_in_its_table() -> None:
    """The table lists the front first and names the spec's policy on its row."""
    outcomes = _search(workers=1)

    table = format_search(outcomes)
    rows = table.splitlines()[1 : 1 + len(outcomes)]
    spec_rows = [row for row in rows if "spec" in row.split()]
    assert 1 == len(spec_rows)
    assert "2m" in spec_rows[0]
    assert "5m/20m/1h/6h" in spec_rows[0]
    fronts = [row.startswith("front") for row in rows]
    assert fronts == sorted(fronts, reverse=True)
    assert fronts[0]


def test_a_search_gives_the_same_outcomes_in_worker_processes() -> None:
    """Workers draw from generators seeded alike: the pool changes nothing but the speed."""
    assert _search(workers=1) == _search(workers=2)
