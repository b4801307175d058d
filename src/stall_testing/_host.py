"""The reference host's verbs on Postgres (test support): switchboard's side of the board.

The demo, the soak and the contract suite use it to create, claim and
complete todos the way switchboard does, including the todo_ready NOTIFY.
Verbs raise ``HostError`` naming what was wrong, with nothing changed; text
PostgreSQL cannot store (a NUL character) is refused before any statement,
naming the field and never quoting a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import asyncpg

from adapters.postgres.sql import queries
from stall_core import aware

__all__ = ["HOST_SQL", "HostError", "PostgresHost"]

#: The reference host's statements by name (host.sql), for harnesses that write as the host.
HOST_SQL = queries("stall_testing", "host.sql")
_SQL = HOST_SQL


class HostError(ValueError):
    """A host verb named a missing row or asked an impossible transition."""


class PostgresHost:
    """Switchboard's verbs on the reference host schema, over an asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def add_endpoint(self, endpoint_id: str, *, state: str = "active") -> None:
        _storable(endpoint_id=endpoint_id, state=state)
        await self._insert(f"endpoint {endpoint_id!r}", "add_endpoint", endpoint_id, state)

    async def set_endpoint_state(self, endpoint_id: str, state: str) -> None:
        _storable(endpoint_id=endpoint_id, state=state)
        await self._expect(
            _SQL["set_endpoint_state"], f"endpoint {endpoint_id!r}", endpoint_id, state
        )

    async def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> None:
        _storable(delivery_id=delivery_id, endpoint_id=endpoint_id)
        await self._insert(
            f"delivery {delivery_id!r}",
            "add_delivery",
            delivery_id,
            endpoint_id,
            verified,
            aware("received_at", received_at),
        )

    async def add_hook(
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        url: str,
        secret: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None:
        _storable(hook_id=hook_id, endpoint_id=endpoint_id, url=url, secret=secret)
        await self._insert(
            f"hook {hook_id!r}",
            "add_hook",
            hook_id,
            endpoint_id,
            url,
            secret,
            _queues(queues),
            enabled,
        )

    async def set_hook_enabled(
        self, hook_id: str, enabled: bool, *, at: datetime | None = None, reason: str | None = None
    ) -> None:
        await self._expect(
            _SQL["set_hook_enabled"], f"hook {hook_id!r}", hook_id, enabled, at, reason
        )

    async def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> None:
        listed = _queues(queues)
        _storable(hook_id=hook_id, **{f"queue {i}": q for i, q in enumerate(listed or ())})
        await self._expect(_SQL["set_hook_queues"], f"hook {hook_id!r}", hook_id, listed)

    async def create_todo(
        self,
        todo_id: str,
        *,
        endpoint_id: str,
        queue: str,
        created_at: datetime,
        delivery_id: str | None = None,
        title: str | None = None,
    ) -> None:
        _storable(
            todo_id=todo_id,
            endpoint_id=endpoint_id,
            queue=queue,
            delivery_id=delivery_id,
            title=title,
        )
        await self._insert(
            f"todo {todo_id!r}",
            "create_todo",
            todo_id,
            endpoint_id,
            queue,
            delivery_id,
            title,
            aware("created_at", created_at),
        )

    async def claim(
        self,
        todo_id: str,
        *,
        owner: str,
        at: datetime | None = None,
        lease: timedelta = timedelta(minutes=5),
    ) -> None:
        """Claim a pending todo; ``claimed_at`` is ``at``, or the database's ``now()``."""
        await self._transition("claim", todo_id, "pending", owner, _instant(at), lease)

    async def claim_next(
        self,
        endpoint_id: str,
        queue: str,
        *,
        owner: str,
        at: datetime | None = None,
        lease: timedelta = timedelta(minutes=5),
    ) -> str | None:
        """Claim the pair's oldest pending todo (stamped as ``claim`` does); None when none."""
        _storable(endpoint_id=endpoint_id, queue=queue, owner=owner)
        todo_id: str | None = await self._pool.fetchval(
            _SQL["claim_next"], endpoint_id, queue, owner, _instant(at), lease
        )
        return todo_id

    async def complete(self, todo_id: str, *, unstamp: bool = False) -> None:
        """Mark a claimed todo done; ``unstamp`` also clears its claimed_at (some hosts do)."""
        await self._transition("complete", todo_id, "claimed", unstamp)

    async def requeue(self, todo_id: str, *, unstamp: bool = False) -> None:
        """Return a claimed todo to pending; ``unstamp`` also clears its claimed_at."""
        await self._transition("requeue", todo_id, "claimed", unstamp)

    async def move_todo(self, todo_id: str, queue: str) -> None:
        _storable(queue=queue)
        await self._expect(_SQL["move_todo"], f"todo {todo_id!r}", todo_id, queue)

    async def delete_todo(self, todo_id: str) -> None:
        await self._expect(_SQL["delete_todo"], f"todo {todo_id!r}", todo_id)

    async def set_delivery_verified(self, delivery_id: str, verified: bool) -> None:
        await self._expect(
            _SQL["set_delivery_verified"], f"delivery {delivery_id!r}", delivery_id, verified
        )

    async def ring(self, todo_id: str, *, at: datetime) -> None:
        await self._expect(_SQL["ring"], f"todo {todo_id!r}", todo_id, aware("at", at))

    async def todos(self) -> dict[str, dict[str, object]]:
        """Every todo row, every column, keyed by id."""
        return {r["id"]: dict(r) for r in await self._pool.fetch(_SQL["todos"])}

    async def _insert(self, what: str, name: str, *args: object) -> None:
        try:
            await self._pool.execute(_SQL[name], *args)
        except asyncpg.UniqueViolationError:
            raise HostError(f"{what} already exists") from None
        except asyncpg.ForeignKeyViolationError as exc:
            raise HostError(f"{what}: {exc.detail or exc}") from None
        except asyncpg.CheckViolationError as exc:
            raise HostError(f"{what}: {exc}") from None

    async def _expect(self, sql: str, what: str, *args: object) -> None:
        if await self._pool.fetchval(sql, *args) is None:
            raise HostError(f"no {what}")

    async def _transition(self, verb: str, todo_id: str, needs: str, *args: object) -> None:
        if await self._pool.fetchval(_SQL[verb], todo_id, *args) is not None:
            return
        state = await self._pool.fetchval(_SQL["todo_state"], todo_id)
        if state is None:
            raise HostError(f"no todo {todo_id!r}")
        raise HostError(f"todo {todo_id!r} is {state}, not {needs}")


def _storable(**fields: str | None) -> None:
    """Refuse text PostgreSQL cannot store (NUL, a lone surrogate) by field name, unquoted.

    asyncpg's own error would quote the whole value, a secret included.
    """
    for name, value in fields.items():
        if value is None:
            continue
        if "\x00" in value:
            raise HostError(
                f"{name.replace('_', ' ')} contains a NUL character, which PostgreSQL text "
                "cannot store; nothing was written"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HostError(
                f"{name.replace('_', ' ')} holds text that cannot be encoded (a lone "
                "surrogate); nothing was written"
            ) from None


def _instant(at: datetime | None) -> datetime | None:
    return None if at is None else aware("at", at)


def _queues(queues: Iterable[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        raise HostError("hook queues must be a collection of queue names, not one string")
    return list(queues)
