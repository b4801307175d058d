"""The simulator's nudges are the real Sweeper's nudges on the memory board."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.memory import MemoryBoard
from stall_core import Nudge, PacingPolicy, Sweeper
from stall_sim import (
    Bursts,
    Claimed,
    Consumer,
    ConsumerKind,
    Created,
    Poisson,
    Scenario,
    SimPolicy,
    SimResult,
    simulate,
)
from stall_testing import RecordingWake
from tests.support import examples

from .sim_strategies import scenarios as sim_scenarios

#: (time, endpoint, queue, todo, nudge number): what the faithfulness test compares.
NudgeRow = tuple[datetime, str, str, str, int]


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def replay(scenario: Scenario, result: SimResult, policy: PacingPolicy) -> list[NudgeRow]:
    """Apply the run's host events to a MemoryBoard and tick the real Sweeper on every tick.

    The board's clock is the ledger's time; the simulator's lost wakes are
    lost past the receiver (it answered), so the replay's wakes all reach one.
    """
    clock = _Clock(scenario.start)
    board = MemoryBoard(clock=clock)
    hooked: dict[str, list[str]] = {}
    for (endpoint_id, queue), receiver in result.layout:
        if endpoint_id not in hooked:
            board.add_endpoint(endpoint_id)
            hooked[endpoint_id] = []
        if receiver:
            hooked[endpoint_id].append(queue)
    for endpoint_id, queues in hooked.items():
        if queues:
            board.add_hook(
                f"h-{endpoint_id}",
                endpoint_id=endpoint_id,
                url="http://x",
                secret="s",
                queues=queues,
            )
    wake = RecordingWake()
    sweeper = Sweeper(ledger=board, wake=wake, policy=policy)
    events = list(result.trace)
    at = 0
    for k in range(scenario.ticks):
        clock.now = scenario.start + k * scenario.tick
        while at < len(events) and events[at].at <= clock.now:
            apply(board, events[at])
            at += 1
        await sweeper.tick()
    await sweeper.settle()
    return [_row(nudge) for nudge in wake.sent]


def apply(board: MemoryBoard, event: Created | Claimed) -> None:
    """Apply one recorded host event to the board."""
    if isinstance(event, Created):
        board.add_delivery(
            f"d-{event.todo_id}",
            endpoint_id=event.endpoint_id,
            verified=event.verified,
            received_at=event.at,
        )
        board.create_todo(
            event.todo_id,
            endpoint_id=event.endpoint_id,
            queue=event.queue,
            created_at=event.at,
            delivery_id=f"d-{event.todo_id}",
        )
    else:
        board.claim(event.todo_id, owner="sim", at=event.at)
        board.complete(event.todo_id)


def _row(nudge: Nudge) -> NudgeRow:
    return (nudge.charged_at, nudge.endpoint_id, nudge.queue, nudge.todo.id, nudge.number)


_TIGHT = PacingPolicy(backoff=(timedelta(minutes=3), timedelta(minutes=10)), cap=3, tick_limit=2)

CASES = {
    "default-one-shot-lossy": (
        PacingPolicy(),
        Scenario(
            pairs=12,
            duration=timedelta(hours=8),
            arrivals=Bursts(per_hour=0.5, size=3),
            backlog=2,
            unverified_share=0.2,
            hookless_share=0.15,
            wake_loss=0.3,
            consumer=Consumer(service=timedelta(minutes=2)),
        ),
    ),
    "tight-limit-flaky": (
        _TIGHT,
        Scenario(
            pairs=10,
            duration=timedelta(hours=6),
            tick=timedelta(seconds=20),
            arrivals=Poisson(per_hour=2.0),
            unverified_share=0.3,
            wake_loss=0.2,
            consumer=Consumer(kind=ConsumerKind.FLAKY, claim_probability=0.4),
        ),
    ),
    "fixed-dead-held-back": (
        SimPolicy.fixed(timedelta(minutes=5)).pacing,
        Scenario(
            pairs=9,
            duration=timedelta(hours=2),
            arrivals=Poisson(per_hour=1.0),
            backlog=1,
            consumer=Consumer(kind=ConsumerKind.DEAD),
        ),
    ),
    "batch-bursts": (
        PacingPolicy(tick_limit=1),
        Scenario(
            pairs=8,
            duration=timedelta(hours=6),
            arrivals=Bursts(per_hour=1.0, size=5),
            wake_loss=0.5,
            consumer=Consumer(kind=ConsumerKind.BATCH, batch=2, service=timedelta(minutes=1)),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_simulated_nudges_equal_the_sweepers(case: str) -> None:
    """Replaying a simulated run on the memory board gives the same nudges, in order."""
    policy, scenario = CASES[case]
    assert policy is not None
    result = simulate(
        scenario,
        SimPolicy(name=case, pacing=policy),
        workload=random.Random(f"{case}:w"),
        chance=random.Random(f"{case}:c"),
        record=True,
    )
    simulated = [_row(nudge) for nudge in result.nudge_log]

    replayed = await replay(scenario, result, policy)

    assert replayed == simulated
    assert len(simulated) > 5


def test_held_back_case_is_held_back() -> None:
    """The dead-consumer case really exercises the tick limit, so ordering is compared."""
    policy, scenario = CASES["fixed-dead-held-back"]
    result = simulate(
        scenario,
        SimPolicy(name="fixed", pacing=policy),
        workload=random.Random("fixed-dead-held-back:w"),
        chance=random.Random("fixed-dead-held-back:c"),
    )

    assert result.held_back_ticks > 0


scenarios = sim_scenarios(
    max_pairs=9,
    durations=[timedelta(hours=2), timedelta(hours=5)],
    latencies=[timedelta(seconds=1), timedelta(seconds=30), timedelta(minutes=3)],
)
pacings = st.builds(
    PacingPolicy,
    threshold=st.sampled_from([timedelta(seconds=10), timedelta(minutes=2)]),
    backoff=st.sampled_from(
        [
            (timedelta(minutes=1),),
            (timedelta(minutes=3), timedelta(minutes=10)),
            PacingPolicy().backoff,
        ]
    ),
    cap=st.integers(1, 4),
    tick_limit=st.integers(1, 3),
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios, policy=pacings, seed=st.integers(0, 2**16))
def test_random_runs_replay_to_the_same_nudges(
    scenario: Scenario, policy: PacingPolicy, seed: int
) -> None:
    """On random small scenarios and policies, the real Sweeper charges what the simulator did.

    This pins the run's fast path end to end: which tick it looks at a pair
    on, the held-back order, and skipping looks a claim on its way makes moot.
    """
    result = simulate(
        scenario,
        SimPolicy(name="random", pacing=policy),
        workload=random.Random(f"{seed}:w"),
        chance=random.Random(f"{seed}:c"),
        record=True,
    )

    replayed = asyncio.run(replay(scenario, result, policy))

    assert replayed == [_row(nudge) for nudge in result.nudge_log]
