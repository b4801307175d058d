"""The contract scenarios against the Postgres ledger, plus Postgres-only checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

import asyncpg
import pytest

from adapters.memory import Todo
from adapters.postgres import PostgresHost, PostgresLedger
from stall_core import LedgerPort, LedgerRow, PairKey

from .scenarios import LedgerContract


class PostgresDriver:
    """The reference host verbs and PostgresLedger behind the driver interface."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.host = PostgresHost(pool)
        self._ledger = PostgresLedger(pool)

    @property
    def ledger(self) -> LedgerPort:
        return self._ledger

    async def add_endpoint(self, endpoint_id: str, *, state: str = "active") -> None:
        await self.host.add_endpoint(endpoint_id, state=state)

    async def set_endpoint_state(self, endpoint_id: str, state: str) -> None:
        await self.host.set_endpoint_state(endpoint_id, state)

    async def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> None:
        await self.host.add_delivery(
            delivery_id, endpoint_id=endpoint_id, verified=verified, received_at=received_at
        )

    async def add_hook(
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None:
        await self.host.add_hook(
            hook_id,
            endpoint_id=endpoint_id,
            url="http://127.0.0.1:9/hook",
            secret="whsec_" + "A" * 32,
            queues=queues,
            enabled=enabled,
        )

    async def set_hook_enabled(self, hook_id: str, enabled: bool) -> None:
        await self.host.set_hook_enabled(hook_id, enabled)

    async def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> None:
        await self.host.set_hook_queues(hook_id, queues)

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
        await self.host.create_todo(
            todo_id,
            endpoint_id=endpoint_id,
            queue=queue,
            created_at=created_at,
            delivery_id=delivery_id,
            title=title,
        )

    async def claim(self, todo_id: str, *, owner: str, at: datetime) -> None:
        await self.host.claim(todo_id, owner=owner, at=at)

    async def complete(self, todo_id: str) -> None:
        await self.host.complete(todo_id)

    async def requeue(self, todo_id: str) -> None:
        await self.host.requeue(todo_id)

    async def ring(self, todo_id: str, *, at: datetime) -> None:
        await self.host.ring(todo_id, at=at)

    async def todos(self) -> Mapping[str, Todo]:
        return {key: Todo(**row) for key, row in (await self.host.todos()).items()}  # type: ignore[arg-type]

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        return await self._ledger.ledger_rows()


@pytest.mark.postgres
class TestPostgresLedger(LedgerContract):
    @pytest.fixture(name="driver")
    def _driver(self, pg_pool: asyncpg.Pool) -> PostgresDriver:
        return PostgresDriver(pg_pool)
