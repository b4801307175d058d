"""Connection-level failures the soak met reach the sweeper as LedgerError, never raw."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, Nudge, PacingPolicy, TodoRef
from tests.support import T0


class _BrokenConnection:
    """A connection whose every call fails as asyncpg's did after pg_terminate_backend."""

    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    async def _fail(self, *args: object, **kwargs: object) -> Any:
        raise self._exc

    fetch = fetchrow = fetchval = execute = _fail

    def transaction(self, **options: object) -> _BrokenTransaction:
        return _BrokenTransaction(self._exc)

    def is_in_transaction(self) -> bool:
        return False

    def terminate(self) -> None:
        pass


class _BrokenTransaction:
    """A transaction whose BEGIN (and anything after) fails."""

    def __init__(self, exc: Exception) -> None:
        self._exc = exc

    async def _fail(self, *args: object) -> Any:
        raise self._exc

    start = commit = rollback = __aenter__ = _fail

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class _Acquire:
    """Like asyncpg's PoolAcquireContext: awaitable, and an async context manager."""

    def __init__(self, pool: _BrokenPool) -> None:
        self._pool = pool
        self._conn: _BrokenConnection | None = None

    def __await__(self) -> Generator[Any, None, _BrokenConnection]:
        return self._pool.connect().__await__()

    async def __aenter__(self) -> _BrokenConnection:
        self._conn = await self._pool.connect()
        return self._conn

    async def __aexit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            await self._pool.release(self._conn)


class _BrokenPool:
    """A pool that fails at ``where``: handing out a connection, or every query on one."""

    def __init__(self, exc: Exception, where: str) -> None:
        self._exc = exc
        self._where = where

    async def _fail(self, *args: object, **kwargs: object) -> Any:
        raise self._exc

    fetch = fetchrow = fetchval = execute = _fail

    def acquire(self) -> _Acquire:
        return _Acquire(self)

    async def connect(self) -> _BrokenConnection:
        if self._where == "acquire":
            raise self._exc
        return _BrokenConnection(self._exc)

    async def release(self, conn: _BrokenConnection) -> None:
        pass


FAILURES = pytest.mark.parametrize(
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
WHERE = pytest.mark.parametrize("where", ["acquire", "query"])

NUDGE = Nudge(
    endpoint_id="ep",
    queue="lane",
    todo=TodoRef(id="t1", created_at=T0),
    number=1,
    charged_at=T0,
)


@FAILURES
@WHERE
async def test_connection_failures_are_ledger_errors(exc: Exception, where: str) -> None:
    """A dropped or confused connection is a LedgerError the loop logs in one line."""
    ledger = PostgresLedger(_BrokenPool(exc, where))

    with pytest.raises(LedgerError, match="charging due pairs failed"):
        await ledger.charge_due(policy=PacingPolicy())


@FAILURES
@WHERE
async def test_refund_connection_failures_are_ledger_errors(exc: Exception, where: str) -> None:
    """A refund on a dropped connection is a LedgerError naming the pair, which the sweeper logs."""
    ledger = PostgresLedger(_BrokenPool(exc, where))

    with pytest.raises(LedgerError, match="refunding ep/lane failed"):
        await ledger.refund(NUDGE)


@FAILURES
@WHERE
async def test_status_connection_failures_are_ledger_errors(exc: Exception, where: str) -> None:
    """Reading the status on a dropped connection is a LedgerError too (the CLI prints it)."""
    ledger = PostgresLedger(_BrokenPool(exc, where))

    with pytest.raises(LedgerError, match="reading the queue status failed"):
        await ledger.status(policy=PacingPolicy())
