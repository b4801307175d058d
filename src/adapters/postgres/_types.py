"""The asyncpg types our signatures name, checked with ``asyncpg-stubs`` (the ``typing`` extra)."""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias

import asyncpg
import asyncpg.pool

__all__ = ["Connection", "PooledConnection", "Queryable"]

#: A connection of one's own or one lent by a pool: every call here accepts either.
Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

#: A connection lent by a pool (what ``Pool.acquire`` returns and ``Pool.release`` takes).
PooledConnection: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"


class Queryable(Protocol):
    """What the hook directory needs of a pool: three one-statement calls."""

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]: ...

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None: ...

    async def execute(self, query: str, *args: Any) -> str: ...
