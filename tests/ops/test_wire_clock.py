"""The database's clock on the wire: a sidecar 10 minutes ahead still sends verifiable nudges."""

from __future__ import annotations

import pytest

from stall_testing import PostgresHost, Receiver, SkewUnavailable, skewed_env
from tests.cli.conftest import cli_process

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
    the database's clock. The child's start-up line, reading its own wall clock against the
    database's, shows the shift really took: 10 minutes, past the receiver's tolerance."""
    await stalled_pair(host, receiver)

    result = await cli_process("--log-level", "info", "sweep", "--once", "--dsn", pg_dsn, env=ahead)

    assert 0 == result.status, result.err
    assert ([], [("l-0", "stalled")]) == (receiver.refused, reasons(receiver))
    assert "wire clock: the database's (this host is 10m ahead)" in result.err
