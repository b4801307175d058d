"""An interrupted test run leaves no embedded server and no data directory behind.

Each case starts the suite's own machinery (tests/conftest.py) in a pytest
subprocess with no STALL_TEST_DSN and a private TMPDIR, waits until the
embedded server answered a test, interrupts the run the way a person or a CI
runner does, and then looks for what is left: any ``stall-nudge-pg-`` data
directory in that TMPDIR, and any process whose command line names it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/embed/interrupt_target.py"
#: Only a hang takes this long: starting an embedded server, or stopping one.
HANG = 300.0


def _processes_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def _wait_for(path: Path, run: subprocess.Popen[str]) -> None:
    give_up = time.monotonic() + HANG
    while not path.exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < give_up, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "how"),
    [
        # A CI runner's cancel, turned into the interrupt Ctrl-C raises; it reaches pytest
        # alone, so only the session fixture's teardown can stop the server it owns.
        (0, "SIGTERM"),
        # With workers the controller owns the server: Ctrl-C in a terminal reaches every
        # worker too, a cancel the controller alone. (Ctrl-C without workers raises the same
        # interrupt in the one process as the first case: it is not run apart.)
        (2, "SIGINT to the group"),
        (2, "SIGTERM"),
    ],
)
def test_an_interrupted_run_leaves_nothing(tmp_path: Path, workers: int, how: str) -> None:
    """Interrupted as a person or a CI runner does, a run leaves no server and no data directory."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "server-answered"
    env = {k: v for k, v in os.environ.items() if k != "STALL_TEST_DSN"}
    env.update(TMPDIR=str(tmp), STALL_INTERRUPT_MARKER=str(marker))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TARGET]
    run = subprocess.Popen(
        [*command, "-n", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(marker, run)
        data_dirs = [p.name for p in tmp.iterdir() if p.name.startswith("stall-nudge-pg-")]
        assert 1 == len(data_dirs), data_dirs  # the server really ran from this TMPDIR
        if how == "SIGTERM":
            run.send_signal(signal.SIGTERM)
        else:
            os.killpg(run.pid, signal.SIGINT)
        output, _ = run.communicate(timeout=HANG)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()

    assert run.returncode != 0, output  # interrupted, not passed
    left = [p.name for p in tmp.iterdir() if p.name.startswith("stall-nudge-pg-")]
    assert ([], []) == (left, _processes_naming(str(tmp))), output
