"""The tick benchmarks, run small: each prints every figure its last line promises."""

from __future__ import annotations

import pytest

from tests.benchmarks_run import figures

pytestmark = pytest.mark.postgres


def test_sweep_scale_prints_every_figure_with_deltas_between_scheduled_full_passes(
    pg_server: str,
) -> None:
    """Every part at a small size; steady and churn run no full pass the schedule did not call."""
    found = figures("sweep_scale", "--todos", "20000", "--dsn", pg_server)

    assert {
        "tick_ms",
        "tick_100k_ms",
        "churn_tick_ms",
        "churn_tick_100k_ms",
        "storm_tick_ms",
        "storm_first_tick_ms",
        "full_pass_ms",
        "full_pass_100k_ms",
        "naive_ms",
        "speedup_vs_naive",
        "delta_ticks",
        "ticks",
        "lookback_s",
        "load_1m",
    } == set(found)
    # 60 ticks a part, steady and churn on two boards, a full pass every 20th tick.
    assert ("228", "240") == (found["delta_ticks"], found["ticks"])


def test_backlog_runs_a_full_pass_after_the_outage_then_deltas(pg_server: str) -> None:
    """The first tick after an outage larger than a full pass is a full pass; later ones deltas."""
    found = figures(
        "backlog", "--todos", "20000", "--writes", "20000", "--ticks", "5", "--dsn", pg_server
    )

    assert "full" == found["first_tick_kind"]
    assert "1" == found["full_passes"]
    assert {"writes", "worst_tick_ms", "full_pass_ms", "later_tick_ms", "back_at_tick"} <= set(
        found
    )
