"""Differential tests: the memory board and Postgres agree, and `status` agrees with the sweep.

Hypothesis draws a sequence of host verbs, clock moves and sweeps; the same
sequence is applied to a MemoryBoard and to Postgres, and after every step
the two ledgers must hold identical rows and every sweep must charge the
same nudges (pair, todo, number, title) and delete the same rows. Before
each sweep, Postgres' `status` is asked too: the sweep must charge exactly
the pairs it calls due, the first tick_limit of them in charge order, and
no other. Each example starts from empty tables in one database cloned for
the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import asyncpg
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from adapters.memory import MemoryBoard
from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy, PairKey, Verdict
from stall_testing import MemoryDriver, PostgresDriver
from tests import pg
from tests.support import T0, FakeClock

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()
ENDPOINTS = ("ep-a", "ep-b", "ep-c")
QUEUES = ("lane-l", "quarantine", "ünïcødé-队列", "ops")
#: One hook per endpoint covering every queue, and a second one on ep-a for "ops" only.
HOOKS = (*(f"hook-{e}" for e in ENDPOINTS), "hook-ep-a-ops")
HOOK_ENDPOINT = {**{f"hook-{e}": e for e in ENDPOINTS}, "hook-ep-a-ops": "ep-a"}
GATES = ("verified", "unverified", "none")

US = timedelta(microseconds=1)
#: The instants the schedule turns on, and one microsecond either side.
BOUNDARIES = sorted(
    {
        edge + nudge
        for edge in (POLICY.threshold, *POLICY.backoff)
        for nudge in (-US, timedelta(0), US)
    }
    | {timedelta(0), US}
)

#: A clock move: onto a schedule boundary (or a microsecond off it), or any whole second.
STEP = st.sampled_from(BOUNDARIES) | st.integers(min_value=0, max_value=8 * 3600).map(
    lambda s: timedelta(seconds=s)
)
#: Every verb with its arguments; "tick" is a clock move followed by a sweep, the reaper's beat.
ARGS: dict[str, st.SearchStrategy[tuple[object, ...]]] = {
    "create": st.tuples(
        st.sampled_from(ENDPOINTS),
        st.sampled_from(QUEUES),
        st.sampled_from(GATES),
        # created_at = now - age: fresh, either side of the threshold, or long stalled.
        st.sampled_from([timedelta(0), *BOUNDARIES[2:5], timedelta(minutes=10)]),
    ),
    "claim": st.tuples(st.integers(min_value=0, max_value=50)),
    "complete": st.tuples(st.integers(min_value=0, max_value=50)),
    "requeue": st.tuples(st.integers(min_value=0, max_value=50)),
    "endpoint": st.tuples(
        st.sampled_from(ENDPOINTS), st.sampled_from(["active", "active", "paused", "disabled"])
    ),
    "hook_enabled": st.tuples(st.sampled_from(HOOKS), st.booleans()),
    "hook_queues": st.tuples(
        st.sampled_from(HOOKS),
        st.none() | st.lists(st.sampled_from(QUEUES), unique=True, max_size=3),
    ),
    "advance": st.tuples(STEP),
    "tick": st.tuples(STEP),
    "sweep": st.just(()),
    # Jump to one of the instants the schedule turns on (or a microsecond off it), then sweep.
    "edge": st.tuples(st.integers(min_value=0, max_value=50), st.sampled_from([-US, US * 0, US])),
}
#: How often each verb is drawn: mostly work, time and sweeps; now and then a config change.
WEIGHTS = {"create": 4, "claim": 2, "complete": 1, "requeue": 1, "endpoint": 1}
WEIGHTS |= {"hook_enabled": 1, "hook_queues": 1, "advance": 2, "tick": 4, "edge": 3, "sweep": 2}
OPS = st.lists(
    st.sampled_from([kind for kind, weight in WEIGHTS.items() for _ in range(weight)]).flatmap(
        lambda kind: ARGS[kind].map(lambda args: (kind, *args))
    ),
    min_size=20,
    max_size=80,
)


async def setup(driver: MemoryDriver | PostgresDriver) -> None:
    """Three active endpoints, their hooks, one verified and one unverified delivery each."""
    for endpoint in ENDPOINTS:
        await driver.add_endpoint(endpoint)
        for gate in ("verified", "unverified"):
            await driver.add_delivery(
                f"{gate}-{endpoint}",
                endpoint_id=endpoint,
                verified=gate == "verified",
                received_at=T0,
            )
    for hook in HOOKS:
        queues = ["ops"] if hook == "hook-ep-a-ops" else None
        await driver.add_hook(hook, endpoint_id=HOOK_ENDPOINT[hook], queues=queues)


Driver = MemoryDriver | PostgresDriver


#: The ops that end in a sweep (after moving the clock, for "tick" and "edge").
SWEEPS = ("sweep", "tick", "edge")


def moved(op: tuple[object, ...], board: MemoryBoard, now: datetime) -> datetime:
    """The clock after ``op``: a step forward, a jump to a coming edge, or unchanged."""
    kind, *args = op
    if kind in ("advance", "tick"):
        (delta,) = args
        assert isinstance(delta, timedelta)
        return now + delta
    if kind == "edge" and (coming := edges(board, now)):
        index, offset = args
        assert isinstance(offset, timedelta)
        return max(now, coming[int(str(index)) % len(coming)] + offset)
    return now


def edges(board: MemoryBoard, now: datetime) -> list[datetime]:
    """The coming instants where a todo crosses the threshold or a ledger row's backoff ends."""
    instants = {
        t.created_at + POLICY.threshold for t in board.todos.values() if t.state == "pending"
    }
    instants |= {
        row.last_nudged_at + POLICY.delay_before(row.nudges + 1)
        for row in board.ledger.values()
        if row.nudges < POLICY.cap
    }
    return sorted(i for i in instants if i >= now)


Verb = Callable[[Driver], Awaitable[None]]


def resolve(op: tuple[object, ...], board: MemoryBoard, now: datetime, todo_id: str) -> Verb | None:
    """The host verb ``op`` stands for on the board as it is now; None when it has no target."""
    kind, *args = op
    if kind == "create":
        endpoint, queue, gate, age = args
        assert isinstance(age, timedelta)
        delivery = None if gate == "none" else f"{gate}-{endpoint}"
        return lambda d: d.create_todo(
            todo_id,
            endpoint_id=str(endpoint),
            queue=str(queue),
            created_at=now - age,
            delivery_id=delivery,
            title=f"{gate} work {todo_id}",
        )
    if kind in ("claim", "complete", "requeue"):
        (index,) = args
        needs = "pending" if kind == "claim" else "claimed"
        targets = sorted(t.id for t in board.todos.values() if t.state == needs)
        if not targets:
            return None
        target = targets[int(str(index)) % len(targets)]
        if kind == "claim":
            return lambda d: d.claim(target, owner="consumer", at=now)
        return (
            (lambda d: d.complete(target)) if kind == "complete" else (lambda d: d.requeue(target))
        )
    if kind == "endpoint":
        endpoint, state = args
        return lambda d: d.set_endpoint_state(str(endpoint), str(state))
    if kind == "hook_enabled":
        hook, enabled = args
        return lambda d: d.set_hook_enabled(str(hook), bool(enabled))
    if kind == "hook_queues":
        hook, queues = args
        assert queues is None or isinstance(queues, list)
        return lambda d: d.set_hook_queues(str(hook), queues)
    raise AssertionError(f"unknown op {op!r}")


async def replay(pool: asyncpg.Pool, ops: list[tuple[object, ...]]) -> None:
    """Apply ``ops`` to a fresh memory board and to Postgres, comparing after every step."""
    await pool.execute(
        "DELETE FROM queue_stall_nudges; DELETE FROM stall_nudge_claims;"
        " DELETE FROM notify_hooks; DELETE FROM todos; DELETE FROM deliveries;"
        " DELETE FROM endpoints"
    )
    clock = FakeClock(T0)
    memory_driver = MemoryDriver(clock)
    board = memory_driver.board
    backends: tuple[Driver, Driver] = (memory_driver, PostgresDriver(pool, clock))
    for driver in backends:
        await setup(driver)
    now = T0
    numbers: list[int] = []
    deleted = 0
    for step, op in enumerate(ops):
        note(f"step {step}, now = T0 + {now - T0}: {op!r}")
        now = moved(op, board, now)
        clock.set(now)
        if op[0] in SWEEPS:
            due = await due_by_status(PostgresLedger(pool, clock=clock))
            memory, postgres = [await d.ledger.charge_due(policy=POLICY) for d in backends]
            assert memory == postgres, f"step {step}: the sweeps differ"
            assert due[: POLICY.tick_limit] == [n.key for n in postgres.charged], (
                f"step {step}: status called {due} due"
            )
            numbers.extend(n.number for n in memory.charged)
            deleted += len(memory.deleted)
        elif op[0] != "advance" and (verb := resolve(op, board, now, f"t{step}")) is not None:
            for driver in backends:
                await verb(driver)
        memory_rows, postgres_rows = [await d.ledger_rows() for d in backends]
        assert memory_rows == postgres_rows, f"step {step}: the ledger rows differ"
    event(f"highest nudge number charged: {max(numbers, default=0)}")
    event("some ledger row drained" if deleted else "no ledger row drained")


async def due_by_status(ledger: PostgresLedger) -> list[PairKey]:
    """The pairs `status` calls due, in the order a tick charges them (plan_tick's)."""
    now, statuses = await ledger.status(policy=POLICY)
    due = []
    for s in statuses:
        if s.verdict is Verdict.DUE:
            assert s.oldest_age is not None  # a due pair has work
            due.append((s.nudges or 0, now - s.oldest_age, s.endpoint_id, s.queue))
    return [(endpoint_id, queue) for *_, endpoint_id, queue in sorted(due)]


def test_memory_and_postgres_agree_on_every_wake_and_ledger_row(
    pg_server: str, pg_template: str
) -> None:
    """Random host verbs, clock moves and sweeps: both ledgers wake and record identically."""
    name = pg.unique_name("stall_diff")
    with asyncio.Runner() as runner:
        runner.run(pg.create_database(pg_server, name, template=pg_template))
        try:
            pool = runner.run(open_pool(pg.with_database(pg_server, name)))

            @settings(max_examples=60, deadline=None)
            @given(ops=OPS)
            def agree(ops: list[tuple[object, ...]]) -> None:
                runner.run(replay(pool, ops))

            try:
                agree()
            finally:
                runner.run(pool.close())
        finally:
            runner.run(pg.drop_database(pg_server, name))


async def open_pool(dsn: str) -> asyncpg.Pool:
    """One connection; commits need not wait for the disk in a throwaway database."""
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=1, server_settings={"synchronous_commit": "off"}
    )
