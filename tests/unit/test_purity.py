"""The core and the simulator never read the wall clock: ``now`` is always an argument.

What may import what, the core's purity included (no clock or randomness
module, no driver, no adapter, asyncio in the sweeper only), is one check:
the import-linter contracts in pyproject.toml, run by ``lint-imports`` in
.ci/run. Import-linter sees imports only, and ``datetime`` is imported for
its types, so a call to ``datetime.now()`` is the one rule left to this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stall_core
import stall_sim

MODULES = sorted(
    [
        *Path(stall_core.__file__).parent.rglob("*.py"),
        *Path(stall_sim.__file__).parent.rglob("*.py"),
    ]
)
WALL_CLOCK = {"now", "utcnow", "today"}


def wall_clock_reads(source: str) -> list[str]:
    """Each ``datetime.now``/``utcnow``/``today`` or ``date.today`` read in a module's source."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in WALL_CLOCK
        # `self._clock` and plain `now` variables are fine; only attribute reads on a type.
        and isinstance(node.value, ast.Name)
        and node.value.id in {"datetime", "date"}
    ]


def test_the_scan_sees_the_core_and_a_wall_clock_read() -> None:
    """The scan covers the core's modules and finds a read (else the test below proves nothing)."""
    source = "from datetime import date, datetime\ndef f(now):\n    return now, date.today()\n"

    assert {"_decide.py", "_sweeper.py", "run.py"} <= {p.name for p in MODULES}
    assert ["date.today"] == wall_clock_reads(source)


def test_the_core_reads_no_wall_clock() -> None:
    """No core or simulator module reads the wall clock: the ledger is the time authority."""
    reads = {str(p): found for p in MODULES if (found := wall_clock_reads(p.read_text()))}

    assert {} == reads
