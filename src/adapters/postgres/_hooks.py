"""The hook directory (a core port) over the host's ``notify_hooks`` table, through asyncpg.

Each verb is one statement, so two instances booking failures for the same
hook never lose a count and disable it exactly once. Text PostgreSQL cannot
take (a NUL, a lone surrogate) is refused before any statement, naming the
field: asyncpg's own error would quote the value.
"""

from __future__ import annotations

from datetime import datetime

from adapters.postgres.sql import queries
from stall_core import HookDirectory, HookHealth, HookTarget

from ._types import Queryable

__all__ = ["PostgresHooks"]

_SQL = queries("adapters.postgres", "hooks.sql")


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
    """``notify_hooks`` as a hook directory; the pool is the caller's (the composition root's)."""

    def __init__(self, pool: Queryable) -> None:
        self._pool = pool

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        rows = await self._pool.fetch(
            _SQL["hooks_covering"], _storable("endpoint_id", endpoint_id), _storable("queue", queue)
        )
        return tuple(
            HookTarget(
                id=row["id"], endpoint_id=row["endpoint_id"], url=row["url"], secret=row["secret"]
            )
            for row in rows
        )

    async def record_success(self, hook_id: str) -> None:
        await self._pool.execute(_SQL["record_success"], _storable("hook id", hook_id))

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
        return HookHealth(consecutive_failures=row["consecutive_failures"], enabled=row["enabled"])


def _conforms(hooks: PostgresHooks) -> HookDirectory:
    """mypy checks here that the Postgres directory satisfies the port."""
    return hooks
