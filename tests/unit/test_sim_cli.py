"""``stall-nudge simulate``: the table, JSON, plot, and one-line errors for bad options."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from stall_nudge.cli import CliError, main
from stall_nudge.cli.simulate import parse_policy
from stall_sim.plot import _settled_at

SMALL = ["simulate", "--pairs", "6", "--days", "0.25", "--backlog", "2", "--seed", "3"]


def test_table_has_one_column_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """The default comparison prints default, edge-only and fixed-5m side by side, the spec's
    production policy marked."""
    status = main(SMALL)

    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "edge-only" in line)
    assert 0 == status
    assert ["default", "(spec)", "edge-only", "fixed-5m"] == header.split()
    assert "wakes per claim" in out


def test_json_reports_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints the scenario and one result per compared policy, custom ones included."""
    custom = ["--policy", "slow:backoff=10m/1h,cap=2", "--days", "1"]  # past nudge 5 at 7.4 h

    status = main([*SMALL, "--json", "--consumer", "dead", "--compare", "default,slow", *custom])

    report = json.loads(capsys.readouterr().out)
    assert 0 == status
    assert ["default", "slow"] == [r["policy"] for r in report["results"]]
    assert [6 * 5, 6 * 2] == [r["nudges"] for r in report["results"]]
    assert "dead" == report["scenario"]["consumer"]


def test_json_is_deterministic_for_a_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs with one seed print the same JSON."""
    main([*SMALL, "--json", "--wake-loss", "0.2"])
    first = capsys.readouterr().out
    main([*SMALL, "--json", "--wake-loss", "0.2"])

    assert first == capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--pairs", "x"], "--pairs: expected an integer, got 'x'"),
        (["--wake-loss", "2"], "--wake-loss: expected a share between 0 and 1, got '2'"),
        (
            ["--tick", "soon"],
            "--tick: expected a duration like 250ms, 15s, 2m, 1h30m or 2d, got 'soon'",
        ),
        (["--consumer", "lazy"], "--consumer: expected one of one-shot, batch, flaky, dead"),
        (["--compare", "default,nope"], "--compare: unknown policy 'nope'"),
        (["--policy", "p:cap=0", "--compare", "p"], "--policy p: cap: must be at least 1"),
        (["--policy", "p:bogus=1"], "--policy p: unknown key 'bogus'"),
        (["--days", "0"], "--days: must be positive"),
        (["--days", "1e12"], "--days: 1000000000000.0 days is too long"),
        (["--tick", "99999999999d"], "--tick: '99999999999d' is too long a duration"),
    ],
)
def test_bad_options_are_one_line_errors(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad option exits 2 with one line on stderr naming it, and no traceback."""
    status = main([*SMALL, *option])

    err = capsys.readouterr().err
    assert 2 == status
    assert 1 == len(err.splitlines())
    assert err.startswith(f"stall-nudge: error: {message}")


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--plot draws nudges, consumer starts, backlog and wait distribution into a PNG file."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "sim.png"

    status = main([*SMALL, "--plot", str(target)])

    assert 0 == status
    assert b"\x89PNG" == target.read_bytes()[:4]
    assert f"plot written to {target}" in capsys.readouterr().out


def test_plot_draws_a_run_where_nothing_is_claimed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead consumer's plot (no claim, a constant backlog) is drawn without error."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "dead.png"

    status = main([*SMALL, "--consumer", "dead", "--rate", "0", "--plot", str(target)])

    assert 0 == status
    assert b"\x89PNG" == target.read_bytes()[:4]
    capsys.readouterr()


def test_settled_at_is_where_a_series_stops_changing() -> None:
    """A plot zooms to the first sample from which every series keeps its final value."""
    series = ((0.0, 5), (10.0, 3), (20.0, 1), (30.0, 1), (40.0, 1))

    assert (20.0, 0.0) == (_settled_at(series), _settled_at(((0.0, 1), (10.0, 1))))


def test_console_script_refuses_a_bad_option() -> None:
    """The installed entry point, run as a process, reports a bad option in one line."""
    done = subprocess.run(
        [sys.executable, "-m", "stall_nudge.cli", "simulate", "--burst", "0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert (2, "") == (done.returncode, done.stdout)
    assert "stall-nudge: error: --burst: must be at least 1, got '0'\n" == done.stderr


def test_duration_options_read_the_cores_units(capsys: pytest.CaptureFixture[str]) -> None:
    """--tick, --latency and --service take durations as every command does: units or seconds."""
    options = ["--json", "--tick", "90", "--latency", "1.5s", "--service", "0", "--days", "1"]

    status = main([*SMALL, *options])

    scenario = json.loads(capsys.readouterr().out)["scenario"]
    assert (0, 90.0, 1.5, 0.0) == (
        status,
        scenario["tick_s"],
        scenario["latency_s"],
        scenario["service_s"],
    )


def test_a_policy_spec_reads_the_cores_units() -> None:
    """A custom policy's threshold and backoff steps take s, m, h, d or bare seconds."""
    _, policy = parse_policy("p:threshold=90,backoff=5m/1.5h/2d")

    assert policy.pacing is not None
    assert (
        timedelta(seconds=90),
        (timedelta(minutes=5), timedelta(minutes=90), timedelta(days=2)),
    ) == (policy.pacing.threshold, policy.pacing.backoff)


def test_parse_policy_keeps_unset_keys_at_the_default() -> None:
    """A custom policy changes only the keys it names."""
    name, policy = parse_policy("quick:backoff=1m/2m,tick_limit=10")

    assert policy.pacing is not None
    assert ("quick", (timedelta(minutes=1), timedelta(minutes=2)), 10, 5) == (
        name,
        policy.pacing.backoff,
        policy.pacing.tick_limit,
        policy.pacing.cap,
    )


def test_parse_policy_refuses_a_built_in_name() -> None:
    """A custom policy may not shadow default, edge-only or fixed-*."""
    with pytest.raises(CliError, match="built-in policy name"):
        parse_policy("default:cap=3")
