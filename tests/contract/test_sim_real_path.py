"""The simulator against the real path: a replay of a real sweep, and each fault flag.

Faithful replay: a board the real ``Sweeper`` ticked (the memory ledger, and
PostgreSQL as a DBA sets it up), its outcomes booked in the history as the
composition root books them, is exported with the history's record of each
charge: from Postgres by ``adapters.postgres.read_history`` as the sweeping
role (what ``simulate --replay --dsn`` reads), from memory in the same
records. The record equals the sweep's reports, and the spec's policy
replayed over it sends them again, in order. Faults: a receiver that fails
for a window, through the real ``HookDispatcher`` on loopback; a sweeper
that stops; creation wakes that never left.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from adapters.postgres import HISTORY_RETENTION, read_history
from stall_core import Nudge, PacingPolicy, Sweeper, TodoRef
from stall_sim import Consumer, ConsumerKind, Poisson, Scenario, SimPolicy, simulate
from stall_sim.faults import Delivery, Faults, ReceiverOutage, Window
from stall_sim.history import parse_records
from stall_sim.replay import compare_nudges, prepare, replay
from stall_testing import (
    INERT_HOOK_SECRET,
    T0,
    BoardDriver,
    FakeClock,
    MemoryDriver,
    Receiver,
    RecordingWake,
)
from tests import pg

TICK = timedelta(seconds=15)
SPAN = timedelta(hours=2)

#: (endpoint, queue, todo, created after the start, verified).
TODOS = [
    ("e1", "lane-a", "a1", timedelta(seconds=3), True),
    ("e1", "lane-a", "a2", timedelta(seconds=4), True),
    ("e1", "lane-a", "a3", timedelta(seconds=5), True),
    ("e1", "lane-d", "x1", timedelta(seconds=3), True),  # charged in lane-a's ticks
    ("e1", "lane-b", "b1", timedelta(minutes=1), True),
    ("e1", "lane-b", "b2", timedelta(minutes=50), True),
    ("e2", "lane-a", "c1", timedelta(minutes=4), True),
    ("e2", "lane-a", "c2", timedelta(minutes=4, seconds=30), False),
    ("e2", "lane-c", "d1", timedelta(minutes=10), True),
]
#: Pulls: a todo claimed at a known instant whatever was sent.
PULLS = {"c1": timedelta(minutes=30, seconds=7), "c2": timedelta(minutes=70)}
#: Pairs whose consumer claims the named todo this long after each nudge; the others are dead.
ANSWERS = {("e1", "lane-a"): timedelta(seconds=5), ("e1", "lane-b"): timedelta(seconds=9)}


async def run_board(driver: BoardDriver, start: datetime = T0) -> list[Nudge]:
    """Run the script from ``start`` with a real Sweeper every tick; the nudges, in order.

    Each nudge's outcome is booked in the board's history, as ``stall-nudge sweep`` books it.
    """
    await driver.add_endpoint("e1")
    await driver.add_endpoint("e2")
    await driver.add_hook("h1", endpoint_id="e1")
    await driver.add_hook("h2", endpoint_id="e2", queues=["lane-a"])
    events: list[tuple[datetime, int, Callable[[], Any]]] = []
    for endpoint_id, queue, todo_id, after, verified in TODOS:

        async def create(
            e: str = endpoint_id,
            q: str = queue,
            t: str = todo_id,
            at: datetime = start + after,
            ok: bool = verified,
        ) -> None:
            await driver.add_delivery(f"d-{t}", endpoint_id=e, verified=ok, received_at=at)
            await driver.create_todo(t, endpoint_id=e, queue=q, created_at=at, delivery_id=f"d-{t}")

        events.append((start + after, 0, create))
    for todo_id, after in PULLS.items():

        async def pull(t: str = todo_id, at: datetime = start + after) -> None:
            await driver.claim(t, owner="pull", at=at)

        events.append((start + after, 1, pull))
    sent: list[Nudge] = []
    wake = RecordingWake()
    sweeper = Sweeper(
        ledger=driver.ledger, wake=wake, policy=PacingPolicy(), history=driver.operated
    )
    now = start
    while now <= start + SPAN:
        due = sorted((e for e in events if e[0] <= now), key=lambda e: (e[0], e[1]))
        events = [e for e in events if e[0] > now]
        for at, _, act in due:
            driver.clock.set(at)
            await act()
        driver.clock.set(now)
        report = await sweeper.tick()
        await sweeper.settle()
        sent.extend(report.charged)
        for nudge in report.charged:
            delay = ANSWERS.get(nudge.key)
            if delay is not None:

                async def answer(t: str = nudge.todo.id, at: datetime = now + delay) -> None:
                    await driver.claim(t, owner="consumer", at=at)

                events.append((now + delay, 1, answer))
        now += TICK
    assert len(sent) >= 6  # the script exercises backoff, progress and a dead pair
    assert len({n.charged_at for n in sent}) < len(sent)  # and ticks charging two pairs
    assert (wake.sent, wake.lost) == (sent, [])  # every nudge reached its receiver
    return sent


def memory_history(board: MemoryBoard) -> list[dict[str, Any]]:
    """The memory board's history in the records ``read_history`` yields from Postgres.

    Its nudges are the board's history of charges, as Postgres's are its history table's.
    """
    records: list[dict[str, Any]] = [
        {"record": "window", "start": T0, "end": T0 + SPAN, "nudges": True}
    ]
    verified = {todo_id: ok for _, _, todo_id, _, ok in TODOS}
    for todo in board.todos.values():
        records.append(
            {
                "record": "todo",
                "id": todo.id,
                "endpoint_id": todo.endpoint_id,
                "queue": todo.queue,
                "created_at": todo.created_at,
                "claimed_at": todo.claimed_at,
                "state": todo.state,
                "verified": verified[todo.id],
            }
        )
    records += [
        {"record": "endpoint", "id": e.id, "state": e.state} for e in board.endpoints.values()
    ]
    records += [
        {
            "record": "hook",
            "id": h.id,
            "endpoint_id": h.endpoint_id,
            "queues": None if h.queues is None else list(h.queues),
            "enabled": h.enabled,
        }
        for h in board.hooks.values()
    ]
    records += [
        {
            "record": "nudge",
            "endpoint_id": e.endpoint_id,
            "queue": e.queue,
            "nudge": e.nudge,
            "todo_id": e.todo_id,
            "charged_at": e.at,
            "outcome": e.outcome,
        }
        for e in board.history_entries
        if e.event == "charged"
    ]
    return records


def reported(sent: list[Nudge]) -> list[dict[str, Any]]:
    """The sweep's reports as the history's nudge records: each charge, delivered."""
    return [
        {
            "record": "nudge",
            "endpoint_id": n.endpoint_id,
            "queue": n.queue,
            "nudge": n.number,
            "todo_id": n.todo.id,
            "charged_at": n.charged_at,
            "outcome": "delivered",
        }
        for n in sent
    ]


def replayed(records: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], Any, Any]:
    """The default policy's nudges replaying ``records``, held to plan_tick on every tick."""
    prepared = prepare(parse_records(list(enumerate(records, 1)), source="board"), tick=TICK)
    result = replay(prepared, SimPolicy.default(), chance=random.Random(1), record=True, check=True)
    return [row(n) for n in result.nudge_log], prepared, result


def row(nudge: Nudge) -> tuple[Any, ...]:
    return (nudge.charged_at, nudge.endpoint_id, nudge.queue, nudge.todo.id, nudge.number)


def assert_faithful(records: list[dict[str, Any]], sent: list[Nudge]) -> None:
    """The history records the sweep's charges, and replaying it sends them again, in order."""
    assert [r for r in records if r["record"] == "nudge"] == reported(sent)

    nudges, prepared, result = replayed(records)

    assert [row(n) for n in sent] == nudges
    assert prepared.claims_by_wake[1] > 0  # claims that answered nudges were re-timed
    match = compare_nudges(prepared, result)
    assert match is not None
    assert (len(sent), len(sent), 0) == (match.recorded, match.reproduced, match.unrecorded)


async def test_a_replay_of_the_memory_board_sends_the_sweeps_nudges() -> None:
    """The memory board's history, replayed with the spec's policy, gives its nudges in order."""
    driver = MemoryDriver(FakeClock(T0))
    sent = await run_board(driver)

    assert_faithful(memory_history(driver.board), sent)


@pytest.mark.postgres
@pytest.mark.parametrize("site", pg.SETUPS, indirect=True)
async def test_a_replay_of_postgres_read_as_the_sweeping_role_sends_the_sweeps_nudges(
    site: pg.Site,
) -> None:
    """PostgreSQL's history, read read-only by the sweeping role, replays to the same nudges.

    Every record, nudges included, is the reader's: the charges come from stall_nudge.history.
    """
    async with site.driver(FakeClock(T0)) as driver:
        sent = await run_board(driver)
        async with driver.sweeper.acquire() as conn:
            records = await read_history(conn, since=SPAN, until=T0 + SPAN)

    assert {"record": "window", "start": T0, "end": T0 + SPAN, "nudges": True} == records[0]
    assert_faithful(records, sent)


@pytest.mark.postgres
async def test_a_window_past_the_history_s_retention_is_not_said_to_hold_every_nudge(
    site: pg.Site,
) -> None:
    """Charges older than the retention may be pruned: a window reaching back past it is not
    said to hold every nudge, unless an older charge is left (the tick prunes oldest first)."""
    past = HISTORY_RETENTION + timedelta(days=1)
    async with site.driver(FakeClock(T0)) as driver:
        await run_board(driver)
        async with driver.sweeper.acquire() as conn:
            before_any = await read_history(conn, since=SPAN + past, until=T0 + SPAN)
            after_some = await read_history(conn, since=past, until=T0 + SPAN + past)

    assert False is before_any[0]["nudges"]
    assert True is after_some[0]["nudges"]


# -- faults --------------------------------------------------------------------------

#: The dispatcher's numbers, shrunk: retries in milliseconds of real time while the
#: ledger's clock stands still, so the simulator's are microseconds.
REAL_DELIVERY = DeliveryPolicy(
    retry_delays=(timedelta(milliseconds=1), timedelta(milliseconds=1)),
    timeout=timedelta(seconds=2),
    disable_after=5,
)
SIM_DELIVERY = Delivery(
    retry_delays=(timedelta(microseconds=1), timedelta(microseconds=1)),
    timeout=timedelta(microseconds=1),
    disable_after=5,
)
OUTAGES = (
    ReceiverOutage(endpoint_id="e0", window=Window(start=timedelta(0), end=timedelta(minutes=12))),
    ReceiverOutage(endpoint_id="e2", window=Window(start=timedelta(0), end=timedelta(hours=9))),
)


async def test_a_receiver_outage_refunds_and_disables_as_the_dispatcher_does() -> None:
    """A hook down for a window: the real dispatcher's refunds and disables are the simulator's."""
    scenario = Scenario(
        pairs=3,
        queues_per_endpoint=1,
        duration=timedelta(hours=2),
        arrivals=Poisson(per_hour=0.0),
        backlog=1,
        consumer=Consumer(kind=ConsumerKind.DEAD),
        start=T0,
    )
    simulated = simulate(
        scenario,
        SimPolicy.default(),
        workload=random.Random(1),
        chance=random.Random(2),
        record=True,
        faults=Faults(receiver_outages=OUTAGES, delivery=SIM_DELIVERY),
    )

    clock = FakeClock(T0)
    board = MemoryBoard(clock=clock)
    receiver = Receiver(clock=clock)
    await receiver.start()
    down = {o.endpoint_id: o.window for o in OUTAGES}
    for index in range(3):
        endpoint_id = f"e{index}"
        board.add_endpoint(endpoint_id)
        board.add_hook(
            f"h-{endpoint_id}",
            endpoint_id=endpoint_id,
            url=receiver.url(endpoint_id, INERT_HOOK_SECRET),
            secret=INERT_HOOK_SECRET,
        )
    charged: list[Nudge] = []
    async with HookDispatcher(
        hooks=MemoryHooks(board), policy=REAL_DELIVERY, clock=clock
    ) as dispatcher:

        def route() -> None:
            for endpoint_id, window in down.items():
                up = not window.start <= clock() - T0 < window.end
                receiver.route(endpoint_id, 204 if up else 503)

        route()
        for index in range(3):
            todo = board.create_todo(
                f"t{index}", endpoint_id=f"e{index}", queue="q0", created_at=T0
            )
            await dispatcher.notify(
                endpoint_id=f"e{index}",
                queue="q0",
                todo=TodoRef(id=todo.id, created_at=T0),
                reason="created",
            )
        await dispatcher.settle()
        sweeper = Sweeper(ledger=board, wake=dispatcher, policy=PacingPolicy())
        for k in range(scenario.ticks):
            clock.set(T0 + k * scenario.tick)
            route()
            report = await sweeper.tick()
            await dispatcher.settle()
            await sweeper.settle()
            charged.extend(report.charged)
        disabled = sum(not hook.enabled for hook in board.hooks.values())
    await receiver.stop()

    assert [(n.charged_at, n.endpoint_id, n.number) for n in charged] == [
        (n.charged_at, n.endpoint_id, n.number) for n in simulated.nudge_log
    ]
    assert (sweeper.refunded, disabled) == (simulated.refunds, simulated.hooks_disabled)
    assert simulated.refunds >= 4  # the case shows both
    assert 1 == simulated.hooks_disabled


async def ticked_memory(
    scenario: Scenario, result: Any, policy: PacingPolicy, skip: Callable[[datetime], bool]
) -> list[tuple[Any, ...]]:
    """A simulated run's host events on a memory board, the real Sweeper on each tick run."""
    from tests.unit.test_sim_faithful import apply

    clock = FakeClock(scenario.start)
    board = MemoryBoard(clock=clock)
    for (endpoint_id, queue), receiver in result.layout:
        if endpoint_id not in board.endpoints:
            board.add_endpoint(endpoint_id)
        if receiver:
            board.add_hook(
                f"h-{endpoint_id}-{queue}",
                endpoint_id=endpoint_id,
                url="http://x",
                secret="s",
                queues=[queue],
            )
    wake = RecordingWake()
    sweeper = Sweeper(ledger=board, wake=wake, policy=policy)
    events, at = list(result.trace), 0
    for k in range(scenario.ticks):
        clock.now = scenario.start + k * scenario.tick
        while at < len(events) and events[at].at <= clock.now:
            apply(board, events[at])
            at += 1
        if not skip(clock.now):
            await sweeper.tick()
    await sweeper.settle()
    return [row(n) for n in wake.sent]


@pytest.mark.parametrize(
    "faults",
    [
        Faults(sweeper_outages=(Window(start=timedelta(minutes=20), end=timedelta(hours=2)),)),
        Faults(lost_creation_wakes=0.6),
    ],
    ids=["sweeper-outage", "lost-creation-wakes"],
)
async def test_a_sweeper_outage_and_lost_creation_wakes_nudge_as_the_real_sweep(
    faults: Faults,
) -> None:
    """The simulator's run with the fault, its host events on the memory board: the same nudges."""
    scenario = Scenario(
        pairs=6,
        duration=timedelta(hours=5),
        arrivals=Poisson(per_hour=1.5),
        backlog=1,
        consumer=Consumer(service=timedelta(minutes=1)),
        wake_loss=0.3,
        start=T0,
    )
    policy = PacingPolicy()
    result = simulate(
        scenario,
        SimPolicy(name="default", pacing=policy),
        workload=random.Random("real:w"),
        chance=random.Random("real:c"),
        record=True,
        check=True,
        faults=faults,
    )
    plain = simulate(
        scenario,
        SimPolicy(name="default", pacing=policy),
        workload=random.Random("real:w"),
        chance=random.Random("real:c"),
    )
    windows = [(T0 + w.start, T0 + w.end) for w in faults.sweeper_outages]

    real = await ticked_memory(
        scenario, result, policy, lambda now: any(s <= now < e for s, e in windows)
    )

    assert [row(n) for n in result.nudge_log] == real
    assert plain.nudges != result.nudges  # the fault changed the run
    if faults.lost_creation_wakes:
        assert result.creation_wakes_dropped > 0
    else:
        charged = [n.charged_at for n in result.nudge_log]
        assert not any(s <= at < e for at in charged for s, e in windows)
