"""The hook directory (a core port) over the host's ``notify_hooks`` table, through asyncpg.

Each verb is one statement, so two instances booking failures for the same
hook never lose a count and disable it exactly once. Text PostgreSQL cannot
take (a NUL, a lone surrogate) is refused before any statement, naming the
field: asyncpg's own error would quote the value.

Lookups are cached per (endpoint, queue) for ``ttl`` seconds: a burst of
wakes for one pair costs one query, and an operator's change (a disabled
hook, a rotated secret) is seen within ``ttl``. A failure this instance
books that disables a hook forgets the cache at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from datetime import datetime

import asyncpg

from adapters.postgres.sql import queries
from stall_core import HookDirectory, HookHealth, HookTarget

from ._pool import BoundedPool
from ._types import Queryable

__all__ = ["PostgresHooks"]

_SQL = queries("adapters.postgres", "hooks.sql")

#: Pairs whose lookups are remembered; past this many the cache starts over.
_CACHED_PAIRS = 4096


def _storable(field: str, value: str) -> str:
    """``value`` when PostgreSQL text can hold it; else ``ValueError`` naming only the field."""
    if "\x00" in value:
        raise ValueError(f"{field} holds a NUL character, which PostgreSQL text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} holds text that cannot be encoded (a lone surrogate)") from None
    return value


class PostgresHooks:
    """``notify_hooks`` as a hook directory; the pool is the caller's (the composition root's).

    An asyncpg pool is used through ``BoundedPool`` (each call a guest's, at
    most 30 s). ``ttl`` is how many seconds a lookup is reused (0: never);
    ``clock`` is the monotonic clock that ages it.
    """

    def __init__(
        self,
        pool: Queryable | asyncpg.Pool,
        *,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        number = isinstance(ttl, int | float) and not isinstance(ttl, bool)
        if not (number and 0 <= ttl and math.isfinite(ttl)):
            raise ValueError(f"ttl must be a finite number of seconds >= 0, got {ttl!r}")
        self._pool: Queryable = BoundedPool(pool) if isinstance(pool, asyncpg.Pool) else pool
        self._ttl = float(ttl)
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, tuple[HookTarget, ...]]] = {}

    @property
    def ttl(self) -> float:
        return self._ttl

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        key = (endpoint_id, queue)
        cached = self._cache.get(key)
        if cached is not None and self._clock() < cached[0]:
            return cached[1]
        rows = await self._pool.fetch(
            _SQL["hooks_covering"], _storable("endpoint_id", endpoint_id), _storable("queue", queue)
        )
        found = tuple(
            HookTarget(
                id=row["id"], endpoint_id=row["endpoint_id"], url=row["url"], secret=row["secret"]
            )
            for row in rows
        )
        if self._ttl:
            if len(self._cache) >= _CACHED_PAIRS:
                self._cache.clear()
            self._cache[key] = (self._clock() + self._ttl, found)
        return found

    async def record_success(self, hook_id: str) -> None:
        await self._pool.execute(_SQL["record_success"], _storable("hook id", hook_id))

    async def record_successes(self, hook_ids: Collection[str]) -> None:
        if hook_ids:
            ids = [_storable("hook id", hook_id) for hook_id in hook_ids]
            await self._pool.execute(_SQL["record_successes"], ids)

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        row = await self._pool.fetchrow(
            _SQL["record_failure"],
            _storable("hook id", hook_id),
            disable_after,
            at,
            _storable("reason", reason),
        )
        if row is None:
            return None
        if not row["enabled"]:
            self._cache.clear()
        return HookHealth(consecutive_failures=row["consecutive_failures"], enabled=row["enabled"])


def _conforms(hooks: PostgresHooks) -> HookDirectory:
    """mypy checks here that the Postgres directory satisfies the port."""
    return hooks
