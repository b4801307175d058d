"""Starting `stall-nudge` loads what the command needs, no more (benchmarks/cli_start.py times it).

Each case runs in a fresh interpreter, since this one has long since imported
everything; none measures time.
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

PROBE = """
import json, runpy, sys
sys.argv = ["stall-nudge", *json.loads(sys.argv[1])]
if sys.argv[1:]:
    try:
        runpy.run_module("stall_nudge.cli", run_name="__main__")
    except SystemExit:
        pass
else:
    import stall_nudge.cli
    stall_nudge.cli.build_parser()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_after(*args: str) -> set[str]:
    """The heavy modules (or their submodules) loaded by `stall-nudge ARGS`, or by parser build."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = json.loads(result.stderr.splitlines()[-1])
    return {h for h in HEAVY for m in modules if m == h or m.startswith(h + ".")}


def test_building_the_parser_loads_no_driver_http_stack_plotter_or_demo() -> None:
    """Importing stall_nudge.cli and building the parser leaves asyncpg and the rest out."""
    assert set() == loaded_after()


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        *((command, "--help") for command in ("migrate", "sweep", "status", "demo", "simulate")),
    ],
    ids=" ".join,
)
def test_help_and_version_load_no_driver_http_stack_plotter_or_demo(
    args: tuple[str, ...],
) -> None:
    """`--version` and every command's `--help` answer without loading the heavy modules."""
    assert set() == loaded_after(*args)


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
