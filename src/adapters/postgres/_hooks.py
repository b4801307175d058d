"""The hook directory (a core port) over the host's ``notify_hooks`` table, through asyncpg.

Each verb is one statement, so two instances booking failures for the same
hook never lose a count and disable it exactly once.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from adapters._sql import queries
from stall_core import HookDirectory, HookHealth, HookTarget

__all__ = ["PostgresHooks"]

_SQL = queries("adapters.postgres", "hooks.sql")


class PostgresHooks:
    """``notify_hooks`` as a hook directory; the pool is the caller's (the composition root's)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        rows = await self._pool.fetch(_SQL["hooks_covering"], endpoint_id, queue)
        return tuple(
            HookTarget(
                id=row["id"], endpoint_id=row["endpoint_id"], url=row["url"], secret=row["secret"]
            )
            for row in rows
        )

    async def record_success(self, hook_id: str) -> None:
        await self._pool.execute(_SQL["record_success"], hook_id)

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        row = await self._pool.fetchrow(_SQL["record_failure"], hook_id, disable_after, at, reason)
        if row is None:
            return None
        return HookHealth(consecutive_failures=row["consecutive_failures"], enabled=row["enabled"])


def _conforms(hooks: PostgresHooks) -> HookDirectory:
    """mypy checks here that the Postgres directory satisfies the port."""
    return hooks
