"""Starting `stall-nudge` loads what the command needs, no more (benchmarks/cli_start.py times it).

The probe runs in a fresh interpreter, since this one has long since imported
everything; it measures no time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from adapters.postgres import HOST_ID_TYPES
from stall_nudge.cli import build_parser

#: What start-up must not load: the driver, the HTTP stack, the plotter and the demo.
HEAVY = ("asyncpg", "aiohttp", "matplotlib", "stall_nudge.cli.demo")

#: Each step of the probe: build the parser, then every command line a person types first.
STEPS = (
    (),
    ("--version",),
    ("--help",),
    *((command, "--help") for command in ("migrate", "sweep", "status", "demo", "simulate")),
)

PROBE = """
import json, runpy, sys
heavy = json.loads(sys.argv[1])
loaded = {}
for args in json.loads(sys.argv[2]):
    sys.argv = ["stall-nudge", *args]
    if args:
        try:
            runpy.run_module("stall_nudge.cli", run_name="__main__")
        except SystemExit:
            pass
    else:
        import stall_nudge.cli
        stall_nudge.cli.build_parser()
    loaded[" ".join(args) or "build_parser()"] = sorted(
        h for h in heavy for m in sys.modules if m == h or m.startswith(h + ".")
    )
print(json.dumps(loaded), file=sys.stderr)
"""


def test_building_the_parser_help_and_version_load_no_driver_http_stack_plotter_or_demo() -> None:
    """One fresh interpreter builds the parser, then answers `--version` and every `--help`:
    after each, none of the heavy modules is loaded (what one step loads, the next still shows)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(STEPS)],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(result.stderr.splitlines()[-1])

    assert [" ".join(args) or "build_parser()" for args in STEPS] == list(loaded)
    assert {step: [] for step in loaded} == loaded


def test_migrate_offers_the_host_id_types_the_adapter_knows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """migrate's id types, spelled out so the parser loads no driver, are the adapter's."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["migrate", "--help"])

    out = capsys.readouterr().out
    assert f"--host-id-type {{{','.join(HOST_ID_TYPES)}}}" in out
    assert "varchar" in HOST_ID_TYPES


def test_migrate_help_no_longer_offers_a_footprint(capsys: pytest.CaptureFixture[str]) -> None:
    """The retired --footprint is not in migrate's help (using it is a usage error)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["migrate", "--help"])

    assert "--footprint" not in capsys.readouterr().out
