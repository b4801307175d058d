"""How long `stall-nudge` takes to start: real processes, `--version` and each `--help`.

Each round starts the installed console script once per command line, in
turn; the figures are milliseconds of wall time from spawn to exit, which is
start-up (interpreter, imports, argument parsing) plus printing the help.
Prints each command line's median, min and max, the bare interpreter's
median for reference, whether bytecode is cached (PYTHONDONTWRITEBYTECODE
is inherited), then the machine's load average, since the figures only
mean something next to it. The last line is exactly
``cli_start: median_ms=<float>``, the median over every start.

Run: ``.venv/bin/python benchmarks/cli_start.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND_LINES = (
    ("--version",),
    ("--help",),
    *((command, "--help") for command in ("migrate", "sweep", "status", "demo", "simulate")),
)


def console_script() -> str:
    """The `stall-nudge` next to this interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("stall-nudge")
    found = str(beside) if beside.exists() else shutil.which("stall-nudge")
    if found is None:
        sys.exit("cli_start: no stall-nudge console script: pip install -e . first")
    return found


def started_ms(argv: list[str]) -> float:
    """Milliseconds from spawning ``argv`` to its exit; it must exit 0."""
    began = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="starts per command line")
    rounds = parser.parse_args().rounds
    script = console_script()
    bare = [sys.executable, "-c", "pass"]
    times: dict[tuple[str, ...], list[float]] = {line: [] for line in COMMAND_LINES}
    baseline = []
    for line in COMMAND_LINES:  # warm the page cache and the bytecode once
        started_ms([script, *line])
    for _ in range(rounds):
        baseline.append(started_ms(bare))
        for line in COMMAND_LINES:
            times[line].append(started_ms([script, *line]))
    for line, spans in times.items():
        print(
            f"stall-nudge {' '.join(line)}: median {statistics.median(spans):.0f} ms "
            f"(min {min(spans):.0f}, max {max(spans):.0f}, {len(spans)} starts)"
        )
    print(f"python -c pass: median {statistics.median(baseline):.0f} ms")
    if sys.flags.dont_write_bytecode:  # inherited by the starts timed above
        print(
            "bytecode: not written (PYTHONDONTWRITEBYTECODE): uncached modules compile each start"
        )
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs")
    every = [span for spans in times.values() for span in spans]
    print(f"cli_start: median_ms={statistics.median(every):.1f}")


if __name__ == "__main__":
    main()
