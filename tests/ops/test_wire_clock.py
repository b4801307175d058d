"""The database's clock on the wire: a sidecar 10 minutes ahead still sends verifiable nudges."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from stall_testing import PostgresHost, Receiver, SkewUnavailable, skewed_env
from tests.cli.conftest import cli

from .conftest import reasons, stalled_pair

pytestmark = pytest.mark.postgres


@pytest.fixture(name="ahead")
def _ahead() -> dict[str, str]:
    """The environment of a child whose wall clock runs 10 minutes ahead."""
    try:
        return skewed_env("+10m")
    except SkewUnavailable as exc:
        pytest.skip(str(exc))


async def test_a_sidecar_ten_minutes_ahead_sends_nudges_a_verifier_accepts(
    pg_dsn: str, host: PostgresHost, receiver: Receiver, ahead: dict[str, str]
) -> None:
    """The receiver (5-minute tolerance) accepts the skewed child's nudge: it is stamped on
    the database's clock, and the start-up line says how far this host's clock is off."""
    await stalled_pair(host, receiver)

    result = await cli("--log-level", "info", "sweep", "--once", "--dsn", pg_dsn, env=ahead)

    assert 0 == result.status, result.err
    assert ([], [("l-0", "stalled")]) == (receiver.refused, reasons(receiver))
    assert "wire clock: the database's (this host is 10m ahead)" in result.err


async def test_the_harness_really_moves_the_childs_clock(ahead: dict[str, str]) -> None:
    """The skewed child reads the wall clock exactly 10 minutes ahead: past the 5-minute limit."""
    script = "import time; print(repr(time.time()))"
    before = time.time()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=ahead, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    after = time.time()

    # Read while the child ran, shifted by exactly the offset.
    assert before + 600 <= float(out) <= after + 600
