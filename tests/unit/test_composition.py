"""One composition function: only ``stall_nudge._bootstrap`` builds the sweep's parts."""

from __future__ import annotations

from pathlib import Path

import stall_nudge

ROOT = Path(stall_nudge.__file__).parent
#: The parts a command or open_reaper would otherwise wire by hand.
PARTS = ("PostgresLedger(", "PostgresHooks(", "HookDispatcher(", "Sweeper(")


def test_only_the_bootstrap_builds_the_ledger_the_dispatcher_and_the_sweeper() -> None:
    """No module of the composition root (the CLI included) constructs a part but _bootstrap."""
    builders = {
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.py")
        for line in path.read_text().splitlines()
        if any(part in line.partition("#")[0] for part in PARTS)
    }

    assert {"_bootstrap.py"} == builders
