"""Borrowing a pool's connection with a bound, and giving it back safely."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from ._errors import DATABASE_ERRORS
from ._types import PooledConnection

__all__ = ["BoundedPool", "hand_back"]


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
    """One-statement calls on a pool (the hook directory's ``Queryable``), each bounded in all.

    The bound covers waiting for a connection, the statement and handing the
    connection back.
    """

    def __init__(self, pool: asyncpg.Pool, timeout: float) -> None:
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
                result = await getattr(conn, method)(query, *args)
                done = True
        except TimeoutError:
            raise TimeoutError(f"timed out after {self._timeout:g} s") from None
        finally:
            if conn is not None:
                await hand_back(self._pool, conn, idle=done, within=self._timeout)
        return result
