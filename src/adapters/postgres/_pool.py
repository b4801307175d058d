"""Borrowing a pool's connection with a bound, and giving it back safely."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from adapters.postgres.sql import queries
from stall_core import format_seconds

from ._errors import DATABASE_ERRORS
from ._types import PooledConnection

__all__ = ["NOT_MIGRATED", "BoundedPool", "hand_back"]

#: The first statement of each of our transactions: see ledger.sql's guest.
_GUEST = queries("adapters.postgres", "ledger.sql")["guest"]
#: Why a statement naming the host's tables cannot run: migrate recorded no schema for them.
NOT_MIGRATED = "stall-nudge's record of the host's schema is missing: run stall-nudge migrate"


async def hand_back(
    pool: asyncpg.Pool, conn: PooledConnection, *, idle: bool, within: float
) -> None:
    """Return an idle connection to the pool and cut off any other.

    A connection left mid-call is cut off, not released: a release resets it
    first, which a black-holed server never answers. A connection the server
    closed is already back in the pool (asyncpg detaches it, and any call on it
    raises ``InterfaceError``), so there is nothing left to do. A failed release
    changes nothing that committed. ``within`` bounds the release's reset.
    """
    with contextlib.suppress(*DATABASE_ERRORS):
        if idle and not conn.is_in_transaction():
            await pool.release(conn, timeout=within)
        else:
            conn.terminate()


class BoundedPool:
    """One-statement calls on a pool (the hook directory's ``Queryable``), each a guest's, bounded.

    Each call runs in its own transaction that resolves names in pg_catalog
    and our schema alone (ledger.sql's ``guest``), where migrate's views of the
    host's tables live. The bound, ``timeout`` seconds,
    covers waiting for a connection, the statements and handing it back.
    """

    def __init__(self, pool: asyncpg.Pool, timeout: float = 30.0) -> None:
        self._pool = pool
        self._timeout = timeout

    async def fetch(self, query: str, *args: object) -> Any:
        return await self._call("fetch", query, args)

    async def fetchrow(self, query: str, *args: object) -> Any:
        return await self._call("fetchrow", query, args)

    async def execute(self, query: str, *args: object) -> Any:
        return await self._call("execute", query, args)

    async def _call(self, method: str, query: str, args: tuple[object, ...]) -> Any:
        conn: PooledConnection | None = None
        done = False
        try:
            async with asyncio.timeout(self._timeout):
                conn = await self._pool.acquire()
                async with conn.transaction():
                    if await conn.fetchval(_GUEST, column=1) is None:
                        raise asyncpg.UndefinedTableError(NOT_MIGRATED)
                    result = await getattr(conn, method)(query, *args)
                done = True
        except TimeoutError:
            raise TimeoutError(f"timed out after {format_seconds(self._timeout)}") from None
        finally:
            if conn is not None:
                await hand_back(self._pool, conn, idle=done, within=self._timeout)
        return result
