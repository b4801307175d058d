"""Connection-level failures the soak met reach the sweeper as LedgerError, never raw."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, PacingPolicy
from tests.support import T0


class _BrokenPool:
    """A pool whose every query fails the way asyncpg did after pg_terminate_backend."""

    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    async def fetch(self, *args: object) -> list[object]:
        raise self._exc


@pytest.mark.parametrize(
    "exc",
    [
        # Seen in the soak: the pool's reset of a connection the server had just terminated.
        asyncpg.InternalClientError(
            "cannot switch to state 15; another operation (2) is in progress"
        ),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        ConnectionResetError("Connection reset by peer"),
    ],
)
async def test_connection_failures_are_ledger_errors(exc: Exception) -> None:
    """A dropped or confused connection is a LedgerError the loop logs in one line."""
    ledger = PostgresLedger(_BrokenPool(exc))

    with pytest.raises(LedgerError, match="charging due pairs failed"):
        await ledger.charge_due(now=T0, policy=PacingPolicy())
