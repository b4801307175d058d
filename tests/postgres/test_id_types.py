"""Contract scenarios on hosts whose ids are uuid or bigint, not text.

The reference host schema is built with each id type
(``migrate(host_schema=True, host_id_type=...)``). Scenarios name endpoints,
deliveries, hooks and todos with readable names; ``TypedIdDriver`` gives
each name a real id of the host's type on the way in, and turns the
ledger's ids (their text form) back into names on the way out, so a
scenario runs unchanged.

The whole suite runs on text ids (tests/contract). Here run the scenarios
that between them take every id through each place a statement turns it
into the host's type or back (``TYPED``), and a refund that succeeds.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime, timedelta

import asyncpg
import attrs
import pytest

from adapters.memory import Todo
from adapters.postgres import PostgresHooks, PostgresLedger, migrate
from stall_core import (
    ChargeOutcome,
    LedgerPort,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
)
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import LedgerContract, stalled_queue, sweep
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

#: A random-looking high part, so the uuids are not all zeros but still sort as made.
_UUID_BASE = uuid.UUID("5f0c2a52-8a4e-4c1e-0000-000000000000").int


class _Ids:
    """Readable names <-> the host's ids (as text), one id per name.

    Ids are handed out in increasing order (the same number of digits, so their
    text forms sort as they were made): scenarios create "ep-0" before "ep-1",
    and those whose ties break by endpoint id then hold on every id type.
    """

    def __init__(self, id_type: str) -> None:
        self._id_type = id_type
        self._numbers = itertools.count(1_000_000_007, 7)
        self._ids: dict[str, str] = {}
        self._names: dict[str, str] = {}

    def id(self, name: str) -> str:
        if name not in self._ids:
            number = next(self._numbers)
            made = (
                str(uuid.UUID(int=_UUID_BASE + number)) if self._id_type == "uuid" else str(number)
            )
            self._ids[name], self._names[made] = made, name
        return self._ids[name]

    def maybe(self, name: str | None) -> str | None:
        return None if name is None else self.id(name)

    def name(self, host_id: str) -> str:
        return self._names[host_id]


class _NamedLedger:
    """The ledger under test, its ids turned back into the scenarios' names."""

    def __init__(self, ledger: LedgerPort, ids: _Ids) -> None:
        self._ledger = ledger
        self._ids = ids

    def _named(self, nudge: Nudge) -> Nudge:
        todo = attrs.evolve(nudge.todo, id=self._ids.name(nudge.todo.id))
        return attrs.evolve(nudge, endpoint_id=self._ids.name(nudge.endpoint_id), todo=todo)

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        outcome = await self._ledger.charge_due(policy=policy, every=every)
        changes: dict[str, object] = {}
        for field in attrs.fields(ChargeOutcome):
            value = getattr(outcome, field.name)
            if field.name == "charged":
                changes[field.name] = tuple(self._named(n) for n in value)
            elif isinstance(value, tuple):  # the drained pairs
                changes[field.name] = tuple((self._ids.name(e), q) for e, q in value)
        return attrs.evolve(outcome, **changes)

    async def refund(self, nudge: Nudge) -> bool:
        todo = attrs.evolve(nudge.todo, id=self._ids.id(nudge.todo.id))
        return await self._ledger.refund(
            attrs.evolve(nudge, endpoint_id=self._ids.id(nudge.endpoint_id), todo=todo)
        )


class TypedIdDriver(PostgresDriver):
    """PostgresDriver on a uuid- or bigint-keyed host: names in, names out."""

    def __init__(self, pool: asyncpg.Pool, host_pool: asyncpg.Pool, id_type: str) -> None:
        super().__init__(pool)
        # The host's verbs pass ids as text both ways; the ledger keeps the plain pool,
        # so an id it failed to turn into text would surface as a wrong type.
        self._pool = host_pool
        self.ids = _Ids(id_type)
        self._named = _NamedLedger(super().ledger, self.ids)

    @property
    def ledger(self) -> LedgerPort:
        return self._named

    async def add_endpoint(self, endpoint_id: str, *, state: str = "active") -> None:
        await super().add_endpoint(self.ids.id(endpoint_id), state=state)

    async def set_endpoint_state(self, endpoint_id: str, state: str) -> None:
        await super().set_endpoint_state(self.ids.id(endpoint_id), state)

    async def add_delivery(
        self, delivery_id: str, *, endpoint_id: str, verified: bool, received_at: datetime
    ) -> None:
        await super().add_delivery(
            self.ids.id(delivery_id),
            endpoint_id=self.ids.id(endpoint_id),
            verified=verified,
            received_at=received_at,
        )

    async def add_hook(  # type: ignore[override]
        self,
        hook_id: str,
        *,
        endpoint_id: str,
        queues: Iterable[str] | None = None,
        enabled: bool = True,
    ) -> None:
        await super().add_hook(
            self.ids.id(hook_id),
            endpoint_id=self.ids.id(endpoint_id),
            queues=queues,
            enabled=enabled,
        )

    async def set_hook_enabled(
        self, hook_id: str, enabled: bool, *, at: datetime | None = None, reason: str | None = None
    ) -> None:
        await super().set_hook_enabled(self.ids.id(hook_id), enabled, at=at, reason=reason)

    async def set_hook_queues(self, hook_id: str, queues: Iterable[str] | None) -> None:
        await super().set_hook_queues(self.ids.id(hook_id), queues)

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
        await super().create_todo(
            self.ids.id(todo_id),
            endpoint_id=self.ids.id(endpoint_id),
            queue=queue,
            created_at=created_at,
            delivery_id=self.ids.maybe(delivery_id),
            title=title,
        )

    async def claim(  # type: ignore[override]
        self, todo_id: str, *, owner: str, at: datetime | None = None
    ) -> None:
        await super().claim(self.ids.id(todo_id), owner=owner, at=at)

    async def complete(self, todo_id: str, *, unstamp: bool = False) -> None:
        await super().complete(self.ids.id(todo_id), unstamp=unstamp)

    async def requeue(self, todo_id: str, *, unstamp: bool = False) -> None:
        await super().requeue(self.ids.id(todo_id), unstamp=unstamp)

    async def move_todo(self, todo_id: str, queue: str) -> None:
        await super().move_todo(self.ids.id(todo_id), queue)

    async def delete_todo(self, todo_id: str) -> None:
        await super().delete_todo(self.ids.id(todo_id))

    async def set_delivery_verified(self, delivery_id: str, verified: bool) -> None:
        await super().set_delivery_verified(self.ids.id(delivery_id), verified)

    async def ring(self, todo_id: str, *, at: datetime) -> None:
        await super().ring(self.ids.id(todo_id), at=at)

    async def todos(self) -> Mapping[str, Todo]:
        named = {}
        for host_id, todo in (await super().todos()).items():
            named[self.ids.name(host_id)] = attrs.evolve(
                todo,
                id=self.ids.name(todo.id),
                endpoint_id=self.ids.name(todo.endpoint_id),
                delivery_id=None if todo.delivery_id is None else self.ids.name(todo.delivery_id),
            )
        return named

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        rows = await super().ledger_rows()
        return {
            (self.ids.name(e), q): attrs.evolve(
                row,
                endpoint_id=self.ids.name(e),
                named_todo=None if row.named_todo is None else self.ids.name(row.named_todo),
            )
            for (e, q), row in rows.items()
        }


async def _ids_as_text(conn: asyncpg.Connection) -> None:
    """The reference host's verbs pass ids as text, whatever the column's type."""
    for type_name in ("uuid", "int8"):
        await conn.set_type_codec(
            type_name, schema="pg_catalog", encoder=str, decoder=str, format="text"
        )


def _template(pg_server: str, id_type: str) -> Iterator[str]:
    name = pg.unique_name(f"stall_template_{id_type}")

    async def build() -> None:
        await pg.create_database(pg_server, name)
        conn = await asyncpg.connect(pg.with_database(pg_server, name))
        try:
            await migrate(conn, host_schema=True, host_id_type=id_type)
        finally:
            await conn.close()

    asyncio.run(build())
    yield name
    asyncio.run(pg.drop_database(pg_server, name))


@pytest.fixture(name="uuid_template", scope="session")
def _uuid_template(pg_server: str) -> Iterator[str]:
    """A template database: the reference host with uuid ids, migrated."""
    yield from _template(pg_server, "uuid")


@pytest.fixture(name="bigint_template", scope="session")
def _bigint_template(pg_server: str) -> Iterator[str]:
    """A template database: the reference host with bigint ids, migrated."""
    yield from _template(pg_server, "bigint")


async def _typed_driver(
    pg_server: str, template: str, id_type: str
) -> AsyncIterator[TypedIdDriver]:
    name = pg.unique_name(f"stall_test_{id_type}")
    await pg.create_database(pg_server, name, template=template)
    dsn = pg.with_database(pg_server, name)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    host_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=_ids_as_text)
    try:
        yield TypedIdDriver(pool, host_pool, id_type)
    finally:
        await host_pool.close()
        await pool.close()
        await pg.drop_database(pg_server, name)


#: Between them, every place a statement reads an id in the host's type: a full pass's pairs
#: and its work (tie by id text), a delta's pairs and a held pair's (their text turned back),
#: the sender gate's delivery, the endpoint's state and the hooks covering a queue, a named
#: todo's departure (by a delete or a claim, on a delta and in judge), a clear, a reset, and
#: refunds refused by compare-and-set.
TYPED = [
    "test_pending_work_with_no_new_inbound_webhook",
    "test_the_named_todo_is_the_oldest_gate_passing_one",
    "test_a_queue_with_no_receiver_is_not_charged",
    "test_an_inactive_endpoint_is_not_nudged_until_resumed",
    "test_consumer_woken_but_never_claims",
    "test_one_tick_wakes_at_most_the_tick_limit",
    "test_a_drained_queue_does_not_ring",
    "test_a_deleted_named_todo_has_departed",
    "test_a_claim_that_spans_a_charge_is_progress_by_departure",
    "test_a_claim_stamped_ahead_of_the_ledger_counts_once",
    "test_a_requeued_todo_is_work_again",
    "test_a_refund_never_undoes_a_later_charge",
    "test_the_reported_case",
]


@pytest.fixture(name="driver", params=["uuid", "bigint"])
async def _driver(
    request: pytest.FixtureRequest, pg_server: str, uuid_template: str, bigint_template: str
) -> AsyncIterator[TypedIdDriver]:
    """A fresh database on the reference host with uuid ids, or with bigint ids."""
    id_type: str = request.param
    template = uuid_template if id_type == "uuid" else bigint_template
    async for driver in _typed_driver(pg_server, template, id_type):
        yield driver


@pytest.mark.parametrize("scenario", TYPED, ids=lambda name: name.removeprefix("test_"))
async def test_the_scenario_holds_on_a_typed_host(driver: TypedIdDriver, scenario: str) -> None:
    """The contract scenario passes as it does on text ids (its own assertions)."""
    await getattr(LedgerContract(), scenario)(driver)


async def test_a_refund_takes_a_refused_nudge_back(driver: TypedIdDriver) -> None:
    """A refused nudge's refund matches the row its charge wrote: the count goes back to 0."""
    await stalled_queue(driver)
    wake = RecordingWake(refuse=True)

    await sweep(driver, T0 + minutes(10), wake)

    assert [1] == [n.number for n in wake.refused]
    assert 0 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges


BIGINT = pytest.mark.parametrize("driver", ["bigint"], indirect=True)


@BIGINT
async def test_the_ledger_speaks_ids_as_text(driver: TypedIdDriver) -> None:
    """On a bigint host a nudge and its ledger row name the endpoint and todo by id text."""
    [todo] = await stalled_queue(driver)
    wake = RecordingWake()

    await sweep(driver, T0 + minutes(10), wake)
    rows = await driver.pool.fetch(
        "SELECT endpoint_id, queue, named_todo FROM stall_nudge.queue_stall_nudges"
    )

    assert [(driver.ids.id("ep-1"), "lane-l", driver.ids.id(todo))] == [tuple(r) for r in rows]
    assert [("ep-1", todo)] == [(n.endpoint_id, n.todo.id) for n in wake.sent]


@BIGINT
async def test_status_reads_a_bigint_host(driver: TypedIdDriver) -> None:
    """status on a bigint host names the pair by its endpoint id's text and judges it due."""
    await stalled_queue(driver, todos=2)
    ledger = PostgresLedger(driver.pool, clock=lambda: T0 + minutes(10))

    _, pairs = await ledger.status(policy=PacingPolicy())

    assert [(driver.ids.id("ep-1"), "lane-l", 2, "due")] == [
        (p.endpoint_id, p.queue, p.sendable, p.verdict.value) for p in pairs
    ]


@BIGINT
async def test_the_hook_directory_reads_and_counts_bigint_hooks(driver: TypedIdDriver) -> None:
    """PostgresHooks finds a bigint host's hooks by endpoint id text and counts failures."""
    await stalled_queue(driver)
    hooks = PostgresHooks(driver.pool)
    hook_id = driver.ids.id("hook-ep-1")

    found = await hooks.hooks_covering(driver.ids.id("ep-1"), "lane-l")
    health = await hooks.record_failure(hook_id, at=T0, reason="test", disable_after=10)
    await hooks.record_success(hook_id)

    assert [hook_id] == [h.id for h in found]
    assert 1 == (health.consecutive_failures if health else None)
    assert 0 == await driver.pool.fetchval(
        "SELECT consecutive_failures FROM notify_hooks WHERE id = $1", int(hook_id)
    )
