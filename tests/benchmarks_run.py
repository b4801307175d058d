"""Run a benchmark as docs/benchmarks.md prints it, and read the line it ends with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def last_line(name: str, *args: str) -> str:
    """Run ``python -m benchmarks.<name> <args>`` from the repository's root: its last line.

    A run that fails or prints nothing fails the test, with what it printed.
    """
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    assert done.stdout.strip(), done.stderr
    return done.stdout.splitlines()[-1]


def figures(name: str, *args: str) -> dict[str, str]:
    """The ``key=value`` figures of the last line, which must read ``<name>: key=value ...``."""
    line = last_line(name, *args)
    head, _, rest = line.partition(": ")
    assert name == head, line
    return dict(re.findall(r"(\w+)=(\S+)", rest))
