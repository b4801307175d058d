"""The plots' choices: coinciding lines drawn once, pending todos binned, the front drawn."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest

from stall_sim import Consumer, ConsumerKind, Scenario, SimPolicy, SimResult, simulate
from stall_sim.plot import (
    bin_width,
    binned_max,
    coinciding,
    near_counts,
    near_waits,
    same_on_every_panel,
)
from stall_sim.search import Grid, Synthetic, run_search


def _run(scenario: Scenario, policy: SimPolicy) -> SimResult:
    return simulate(scenario, policy, workload=random.Random(1), chance=random.Random(2))


def test_equal_values_are_one_group_in_order() -> None:
    """Values equal to a group's first member join it; groups keep the order they appear in."""
    assert [[0, 2], [1, 3], [4]] == coinciding(["a", "b", "a", "b", "c"], lambda x, y: x == y)


def test_counts_within_one_percent_of_the_axis_are_near() -> None:
    """On a linear axis to 1,000, lines 10 apart are one line and 11 apart are two."""
    close = near_counts([1_000, 1_000])
    a = ((0.0, 0), (1.0, 1_000))

    assert (True, False) == (
        close(a, ((0.0, 10), (1.0, 1_000))),
        close(a, ((0.0, 11), (1.0, 1_000))),
    )


def test_a_log_count_axis_tells_small_counts_apart() -> None:
    """With counts 100-fold apart the axis is logarithmic, where 1 and 2 todos are two lines."""
    close = near_counts([2, 1_000])

    assert not close(((0.0, 1),), ((0.0, 2),))


def test_waits_are_near_on_a_log_axis() -> None:
    """Percentile curves a hair apart on the log axis are one line; 2x apart are two."""
    close = near_waits(0.1, 10_000.0)
    base = tuple(float(q + 1) for q in range(101))

    assert (True, False) == (
        close(base, tuple(w * 1.01 for w in base)),
        close(base, tuple(w * 2 for w in base)),
    )


def test_pending_todos_are_binned_to_each_bins_most() -> None:
    """A dense series of spikes becomes the most in each bin, bins from 0."""
    series = ((0.0, 0), (10.0, 3), (20.0, 0), (60.0, 1), (70.0, 0), (130.0, 5))

    assert [(0.0, 3), (60.0, 1), (120.0, 5)] == binned_max(series, 60.0)


def test_the_bin_is_a_named_span_no_finer_than_the_samples() -> None:
    """A week binned by the hour or coarser; a quarter hour sampled every 21.6 s by 30 s."""
    assert (7_200.0, 30.0) == (bin_width(7 * 86_400, 151.0), bin_width(900, 21.6))


def test_the_default_and_fixed_5m_coincide_on_a_backlog_drained_by_first_nudges() -> None:
    """One consumer draining a backlog gets nudge 1 after each claim: default and fixed-5m
    are the same run, and edge-only is not."""
    scenario = Scenario(pairs=1, duration=timedelta(hours=2), backlog=10, samples=200)
    results = [
        _run(scenario, p)
        for p in (SimPolicy.default(), SimPolicy.edge_only(), SimPolicy.fixed(timedelta(minutes=5)))
    ]

    assert [(["default", "fixed-5m"], True)] == same_on_every_panel(results, 60.0)


def test_a_dead_consumer_separates_capped_from_uncapped() -> None:
    """A capped policy and a never-capped one part ways when nudges go unanswered."""
    scenario = Scenario(
        pairs=2, duration=timedelta(days=1), backlog=1, consumer=Consumer(kind=ConsumerKind.DEAD)
    )
    results = [
        _run(scenario, p) for p in (SimPolicy.default(), SimPolicy.fixed(timedelta(minutes=5)))
    ]

    assert [] == same_on_every_panel(results, 3_600.0)


def test_the_compare_and_front_plots_write_pngs(tmp_path: Path) -> None:
    """Both figures draw to a PNG (matplotlib, the plot extra)."""
    pytest.importorskip("matplotlib")
    from stall_sim.plot import plot, plot_front

    scenario = Scenario(pairs=4, duration=timedelta(hours=3), backlog=2, wake_loss=0.2)
    results = [_run(scenario, p) for p in (SimPolicy.default(), SimPolicy.edge_only())]
    outcomes = run_search(
        Synthetic(scenario=scenario, generator=random.Random, workload_seed="w", chance_seed="c"),
        Grid(caps=(1, 3)).policies(),
        workers=1,
    )

    plot(str(tmp_path / "compare.png"), scenario, results, heading="four pairs")
    plot_front(str(tmp_path / "front.png"), outcomes, heading="four pairs")

    assert [b"\x89PNG"] * 2 == [
        (tmp_path / n).read_bytes()[:4] for n in ("compare.png", "front.png")
    ]
