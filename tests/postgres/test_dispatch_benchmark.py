"""The dispatch benchmark runs both hook directories (one on PostgreSQL) to its last line."""

from __future__ import annotations

import re

import pytest
from benchmarks.dispatch import main

pytestmark = pytest.mark.postgres

LAST_LINE = re.compile(
    r"dispatch: deliveries_per_s=(?P<memory>[0-9.]+)"
    r" real_path_deliveries_per_s=(?P<real>[0-9.]+)"
    r" healthy_p99_ms_with_hanging_hook=(?P<p99>[0-9.]+)"
)


def test_a_short_run_ends_with_the_figures_line(
    pg_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A short run with the receiver in its own process prints both rates and the p99 last."""
    main(["--dsn", pg_server, "--messages", "40", "--samples", "5", "--rounds", "2"])

    lines = capsys.readouterr().out.splitlines()
    found = LAST_LINE.fullmatch(lines[-1])
    assert found is not None, lines[-1]
    assert all(float(value) > 0 for value in found.groupdict().values())
    assert any(line.startswith("throughput (postgres):") for line in lines)
    assert "failed=0; enabled hooks after the run=2" in "\n".join(lines)
