"""``stall-nudge simulate --sweep``, run small through the command line's entry point."""

from __future__ import annotations

import json

import pytest

from stall_nudge.cli import main

SMALL = ["simulate", "--pairs", "8", "--days", "0.25", "--wake-loss", "0.3", "--seed", "2"]
SWEEP = ["--sweep", "threshold=1m,2m", "--sweep", "cap=2,5", "--workers", "2"]


def test_a_sweep_prints_every_policy_with_the_spec_and_the_front_marked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Four combinations, the spec's among them: four rows, one marked spec, the front first."""
    status = main([*SMALL, *SWEEP])

    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("front"))
    rows = lines[header + 1 : header + 5]
    assert 0 == status
    assert ["front", "spec", "threshold", "backoff"] == lines[header].split()[:4]
    assert 1 == sum("spec" in row.split() for row in rows)
    assert rows[0].startswith("front")
    assert lines[header + 6].startswith("4 policies, ")


def test_a_sweeps_json_matches_the_compare_run_of_the_spec_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The sweep's spec row is the same run `--compare default` makes with the seed."""
    main([*SMALL, *SWEEP, "--json"])
    swept = json.loads(capsys.readouterr().out)
    main([*SMALL, "--compare", "default", "--json"])
    compared = json.loads(capsys.readouterr().out)["results"][0]

    spec = [p for p in swept["policies"] if p["spec"]]
    assert 1 == len(spec)
    assert (compared["consumers_started"], compared["nudges"], compared["wait_s"]) == (
        spec[0]["consumers_started"],
        spec[0]["nudges"],
        {k: spec[0]["wait_s"][k] for k in ("p50", "p90", "p99", "max")},
    )
    assert 4 == len(swept["policies"])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--sweep", "cap=3,zero"], "--sweep: cap: expected a whole number, got 'zero'"),
        (["--sweep", "speed=1"], "--sweep: unknown key 'speed'"),
        (["--sweep", "cap=3", "--sweep", "cap=4"], "--sweep: cap is given twice"),
        (["--sweep", "cap=3", "--policy", "p:cap=2"], "--sweep: --policy cannot be combined"),
    ],
)
def test_a_bad_sweep_is_one_line_and_exit_2(
    option: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --sweep exits 2 with one line on stderr naming the key or value."""
    status = main([*SMALL, *option])

    err = capsys.readouterr().err
    assert 2 == status
    assert 1 == len(err.splitlines())
    assert err.startswith(f"stall-nudge: error: {message}"), err
