"""The loop's one-step arrival and claim (unrecorded runs) against the methods (recorded runs).

An unrecorded run takes a todo whose creation wake starts its consumer in one
step; a recorded one goes through ``_arrive``, ``_create``, ``_wake`` and
``_claim`` for every event. Both must give the same result.
"""

from __future__ import annotations

import random
from datetime import timedelta

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stall_core import PacingPolicy
from stall_sim import Scenario, SimPolicy, simulate
from tests.support import examples
from tests.unit.sim_strategies import scenarios as sim_scenarios
from tests.unit.test_sim_rules import policies

boards = sim_scenarios(
    max_pairs=12,
    durations=[timedelta(hours=3), timedelta(hours=8)],
    latencies=[timedelta(microseconds=1), timedelta(seconds=1), timedelta(seconds=30)],
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=boards, pacing=st.one_of(st.none(), policies), seed=st.integers(0, 2**16))
def test_an_unrecorded_run_gives_what_a_recorded_one_does(
    scenario: Scenario, pacing: PacingPolicy | None, seed: int
) -> None:
    def go(record: bool) -> dict[str, object]:
        result = simulate(
            scenario,
            SimPolicy(name="random", pacing=pacing),
            workload=random.Random(f"{seed}:w"),
            chance=random.Random(f"{seed}:c"),
            record=record,
        )
        return attrs.asdict(attrs.evolve(result, nudge_log=(), trace=(), layout=()))

    assert go(record=True) == go(record=False)
