"""The tick benchmarks, run small: each prints every figure its last line promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def last_line(pg_server: str, *args: str) -> dict[str, str]:
    """Run ``python -m benchmarks.<args>`` on ``pg_server``; its last line's figures."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks." + args[0], *args[1:], "--dsn", pg_server],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    name, _, figures = done.stdout.splitlines()[-1].partition(": ")
    assert args[0] == name, done.stdout
    return dict(re.findall(r"(\w+)=(\S+)", figures))


def test_sweep_scale_prints_every_figure_with_deltas_between_scheduled_full_passes(
    pg_server: str,
) -> None:
    """Every part at a small size; steady and churn run no full pass the schedule did not call."""
    figures = last_line(pg_server, "sweep_scale", "--todos", "20000")

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
    } == set(figures)
    # 60 ticks a part, steady and churn on two boards, a full pass every 20th tick.
    assert ("228", "240") == (figures["delta_ticks"], figures["ticks"])


def test_backlog_runs_a_full_pass_after_the_outage_then_deltas(pg_server: str) -> None:
    """The first tick after an outage larger than a full pass is a full pass; later ones deltas."""
    figures = last_line(
        pg_server, "backlog", "--todos", "20000", "--writes", "20000", "--ticks", "5"
    )

    assert "full" == figures["first_tick_kind"]
    assert "1" == figures["full_passes"]
    assert {"writes", "worst_tick_ms", "full_pass_ms", "later_tick_ms", "back_at_tick"} <= set(
        figures
    )
