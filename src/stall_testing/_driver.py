"""The board a contract scenario drives: host verbs, the ledger under test, its clock.

Every LedgerPort gets one driver; scenarios speak only ``BoardDriver``, so
they never branch on the backend. ``HostVerbs`` is what both reference
hosts (the memory board, awaited, and ``PostgresHost``) offer; an embedder
whose host has its own verbs implements ``BoardDriver`` over them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Protocol

import asyncpg

from adapters.memory import MemoryBoard, MemoryHooks, Todo
from adapters.postgres import LOOKBACK, PostgresHooks, PostgresLedger
from stall_core import (
    FULL_PASS_INTERVAL,
    HistoryPort,
    HookDirectory,
    LedgerPort,
    LedgerRow,
    OperatorPort,
    PacingPolicy,
    PairKey,
    PairStatus,
)

from ._clock import FakeClock
from ._host import PostgresHost

#: Where the ledger scenarios' hooks point: nothing listens, and nothing is sent.
INERT_HOOK_URL = "http://127.0.0.1:9/hook"
INERT_HOOK_SECRET = "whsec_" + "A" * 32


class HostVerbs(Protocol):
    """The host's verbs the scenarios use, awaited; hooks point where nothing listens."""

    async def add_endpoint(self, endpoint_id: str, *, state: str = "active") -> None: ...
    async def set_endpoint_state(self, endpoint_id: str, state: str) -> None: ...
    async def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> None: ...
    async def add_hook(
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None: ...
    async def set_hook_enabled(self, hook_id: str, enabled: bool) -> None: ...
    async def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> None: ...
    async def create_todo(
        self,
        todo_id: str,
        *,
        endpoint_id: str,
        queue: str,
        created_at: datetime,
        delivery_id: str | None = None,
        title: str | None = None,
    ) -> None: ...
    async def claim(self, todo_id: str, *, owner: str, at: datetime | None = None) -> None: ...
    async def complete(self, todo_id: str, *, unstamp: bool = False) -> None: ...
    async def requeue(self, todo_id: str, *, unstamp: bool = False) -> None: ...
    async def move_todo(self, todo_id: str, queue: str) -> None: ...
    async def delete_todo(self, todo_id: str) -> None: ...
    async def set_delivery_verified(self, delivery_id: str, verified: bool) -> None: ...
    async def ring(self, todo_id: str, *, at: datetime) -> None: ...
    async def todos(self) -> Mapping[str, Todo]: ...


class Operated(LedgerPort, OperatorPort, HistoryPort, Protocol):
    """A ledger with the operator's verbs, the history and status: both shipped ledgers are."""

    async def status(self, *, policy: PacingPolicy) -> tuple[datetime, list[PairStatus]]: ...


class BoardDriver(HostVerbs, Protocol):
    """Host verbs over one backend, plus the ledger under test and its clock.

    ``clock`` is the ledger's time authority (the database's clock in
    production); scenarios move it to move time.
    """

    @property
    def ledger(self) -> LedgerPort: ...
    @property
    def clock(self) -> FakeClock: ...
    @property
    def operated(self) -> Operated:
        """The ledger under test, with the operator's verbs and the history."""
        ...

    @property
    def hooks(self) -> HookDirectory:
        """The host's hooks as the sweep's deliveries book their health on them."""
        ...

    def hold_tick(self) -> AbstractAsyncContextManager[None]:
        """Hold the fleet's tick as another instance mid-sweep would."""
        ...

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]: ...


class MemoryDriver:
    """The in-memory board behind the driver interface: its verbs, awaitable."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self._clock = clock if clock is not None else FakeClock()
        self.board = MemoryBoard(clock=self._clock)

    @property
    def ledger(self) -> LedgerPort:
        return self.board

    @property
    def operated(self) -> Operated:
        return self.board

    @property
    def hooks(self) -> HookDirectory:
        return MemoryHooks(self.board)

    @property
    def clock(self) -> FakeClock:
        return self._clock

    @asynccontextmanager
    async def hold_tick(self) -> AsyncIterator[None]:
        with self.board.hold_tick():
            yield

    async def add_endpoint(self, endpoint_id: str, *, state: str = "active") -> None:
        self.board.add_endpoint(endpoint_id, state=state)

    async def set_endpoint_state(self, endpoint_id: str, state: str) -> None:
        self.board.set_endpoint_state(endpoint_id, state)

    async def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> None:
        self.board.add_delivery(
            delivery_id, endpoint_id=endpoint_id, verified=verified, received_at=received_at
        )

    async def set_hook_enabled(self, hook_id: str, enabled: bool) -> None:
        self.board.set_hook_enabled(hook_id, enabled)

    async def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> None:
        self.board.set_hook_queues(hook_id, queues)

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
        self.board.create_todo(
            todo_id,
            endpoint_id=endpoint_id,
            queue=queue,
            created_at=created_at,
            delivery_id=delivery_id,
            title=title,
        )

    async def claim(self, todo_id: str, *, owner: str, at: datetime | None = None) -> None:
        self.board.claim(todo_id, owner=owner, at=at)

    async def complete(self, todo_id: str, *, unstamp: bool = False) -> None:
        self.board.complete(todo_id, unstamp=unstamp)

    async def requeue(self, todo_id: str, *, unstamp: bool = False) -> None:
        self.board.requeue(todo_id, unstamp=unstamp)

    async def move_todo(self, todo_id: str, queue: str) -> None:
        self.board.move_todo(todo_id, queue)

    async def delete_todo(self, todo_id: str) -> None:
        self.board.delete_todo(todo_id)

    async def set_delivery_verified(self, delivery_id: str, verified: bool) -> None:
        self.board.set_delivery_verified(delivery_id, verified)

    async def ring(self, todo_id: str, *, at: datetime) -> None:
        self.board.ring(todo_id, at=at)

    async def add_hook(
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None:
        """A hook no delivery reaches: the ledger scenarios never send."""
        self.board.add_hook(
            hook_id,
            endpoint_id=endpoint_id,
            url=INERT_HOOK_URL,
            secret=INERT_HOOK_SECRET,
            queues=queues,
            enabled=enabled,
        )

    async def todos(self) -> Mapping[str, Todo]:
        return dict(self.board.todos)

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        return dict(self.board.ledger)


class PostgresDriver(PostgresHost):
    """The reference host verbs and PostgresLedger behind the driver interface.

    The ledger decides on ``clock`` instead of the database's clock, so
    scenarios can move time; claims are stamped with it too.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: FakeClock | None = None,
        *,
        full_pass_interval: timedelta = FULL_PASS_INTERVAL,
        lookback: timedelta = LOOKBACK,
    ) -> None:
        super().__init__(pool)
        self.pool = pool
        self._clock = clock if clock is not None else FakeClock()
        self._ledger = PostgresLedger(
            pool, clock=self._clock, full_pass_interval=full_pass_interval, lookback=lookback
        )

    @property
    def ledger(self) -> LedgerPort:
        return self._ledger

    @property
    def operated(self) -> Operated:
        return self._ledger

    @property
    def hooks(self) -> HookDirectory:
        return PostgresHooks(self.pool, ttl=0)

    @property
    def clock(self) -> FakeClock:
        return self._clock

    def hold_tick(self) -> AbstractAsyncContextManager[None]:
        return self._ledger.hold_tick()

    async def claim(  # type: ignore[override]
        self, todo_id: str, *, owner: str, at: datetime | None = None
    ) -> None:
        """Claim, stamped with the ledger's clock unless ``at`` is given (the database's, live)."""
        await super().claim(todo_id, owner=owner, at=self._clock() if at is None else at)

    async def add_hook(  # type: ignore[override]
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None:
        """A hook no delivery reaches: the ledger scenarios never send."""
        await super().add_hook(
            hook_id,
            endpoint_id=endpoint_id,
            url=INERT_HOOK_URL,
            secret=INERT_HOOK_SECRET,
            queues=queues,
            enabled=enabled,
        )

    async def todos(self) -> Mapping[str, Todo]:  # type: ignore[override]
        return {key: Todo(**row) for key, row in (await super().todos()).items()}  # type: ignore[arg-type]

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        return await self._ledger.ledger_rows()


def _conforms(memory: MemoryDriver, postgres: PostgresDriver) -> tuple[BoardDriver, BoardDriver]:
    """mypy checks here that both hosts satisfy the driver the scenarios speak."""
    return memory, postgres
