"""Fault flags on the engine: the dispatcher's retry timing, and every tick held to plan_tick."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from adapters.http import DeliveryPolicy
from stall_sim import Consumer, ConsumerKind, Poisson, Scenario, SimPolicy, simulate
from stall_sim.faults import Delivery, Faults, Hang, ReceiverOutage, Window, delivery_outcome

REAL = DeliveryPolicy()
DELIVERY = Delivery(
    retry_delays=REAL.retry_delays, timeout=REAL.timeout, disable_after=REAL.disable_after
)
S = 1_000_000  # microseconds in a second


@pytest.mark.parametrize(
    ("down_s", "mode", "outcome"),
    [
        ((0, 60), Hang.FAIL, (False, 35 * S)),  # attempts at 0, 5 s, 35 s: the last fails
        ((0, 60), Hang.HANG, (False, 65 * S)),  # 0-10 s, 15-25 s, 55-65 s: each times out
        ((0, 3), Hang.FAIL, (True, 5 * S)),  # the first retry is outside the window
        ((0, 12), Hang.FAIL, (True, 35 * S)),
        ((0, 12), Hang.HANG, (True, 15 * S)),
        ((60, 70), Hang.FAIL, (True, 0)),  # up when sent
    ],
)
def test_a_delivery_retries_as_the_dispatcher_does(
    down_s: tuple[int, int], mode: Hang, outcome: tuple[bool, int]
) -> None:
    """Attempt 1 at once, retries 5 s and 30 s after the last attempt ended (DeliveryPolicy)."""
    down = [(down_s[0] * S, down_s[1] * S, mode)]

    assert outcome == delivery_outcome(0, down, DELIVERY)


SCENARIO = Scenario(
    pairs=9,
    queues_per_endpoint=3,
    duration=timedelta(hours=8),
    arrivals=Poisson(per_hour=1.0),
    backlog=1,
    wake_loss=0.2,
    consumer=Consumer(service=timedelta(minutes=1)),
)
CASES = {
    "fail-then-recover": Faults(
        receiver_outages=(
            ReceiverOutage(
                endpoint_id="e0", window=Window(start=timedelta(0), end=timedelta(minutes=6))
            ),
        ),
        delivery=DELIVERY,
    ),
    "hang-until-disabled": Faults(
        receiver_outages=(
            ReceiverOutage(
                endpoint_id="e1",
                window=Window(start=timedelta(minutes=30), end=timedelta(hours=8)),
                mode=Hang.HANG,
            ),
        ),
        delivery=DELIVERY,
    ),
    "sweeper-down": Faults(
        sweeper_outages=(
            Window(start=timedelta(hours=1), end=timedelta(hours=2)),
            Window(start=timedelta(hours=1, minutes=30), end=timedelta(hours=3)),
        )
    ),
    "lost-creation-wakes": Faults(lost_creation_wakes=0.5),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("consumer", [ConsumerKind.ONE_SHOT, ConsumerKind.DEAD])
def test_a_run_with_faults_is_held_to_plan_tick(case: str, consumer: ConsumerKind) -> None:
    """Refunds, disabled hooks and skipped ticks: every tick still charges what plan_tick does."""
    scenario = Scenario(
        pairs=SCENARIO.pairs,
        queues_per_endpoint=SCENARIO.queues_per_endpoint,
        duration=SCENARIO.duration,
        arrivals=SCENARIO.arrivals,
        backlog=SCENARIO.backlog,
        wake_loss=SCENARIO.wake_loss,
        consumer=Consumer(kind=consumer, service=timedelta(minutes=1)),
    )

    result = simulate(
        scenario,
        SimPolicy.default(),
        workload=random.Random(f"{case}:w"),
        chance=random.Random(f"{case}:c"),
        check=True,
        faults=CASES[case],
    )

    if case == "hang-until-disabled":
        assert (1, True) == (result.hooks_disabled, result.refunds > 0)
    elif case == "fail-then-recover":
        assert (0, True) == (result.hooks_disabled, result.refunds > 0)
    elif case == "lost-creation-wakes":
        assert result.creation_wakes_dropped > 0


def test_no_tick_charges_while_the_sweeper_is_down() -> None:
    """A sweeper outage charges nothing inside its window; what fell due is charged after it."""
    faults = Faults(sweeper_outages=(Window(start=timedelta(hours=1), end=timedelta(hours=3)),))
    result = simulate(
        SCENARIO,
        SimPolicy.fixed(timedelta(minutes=5)),
        workload=random.Random(1),
        chance=random.Random(2),
        record=True,
        faults=faults,
    )
    hours = [(n.charged_at - SCENARIO.start) / timedelta(hours=1) for n in result.nudge_log]

    assert [] == [h for h in hours if 1 <= h < 3]
    assert 3.0 in hours


def test_no_faults_changes_nothing() -> None:
    """The default Faults() gives the very run simulate gives without faults."""
    runs = [
        simulate(
            SCENARIO,
            SimPolicy.default(),
            workload=random.Random(5),
            chance=random.Random(6),
            faults=faults,
        )
        for faults in (None, Faults())
    ]

    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: Window(start=timedelta(hours=2), end=timedelta(hours=1)), "must end after"),
        (lambda: Window(start=timedelta(hours=-1), end=timedelta(hours=1)), "before the run"),
        (lambda: Faults(lost_creation_wakes=1.5), "between 0 and 1"),
        (
            lambda: Faults(
                receiver_outages=(
                    ReceiverOutage(
                        endpoint_id="e0", window=Window(start=timedelta(0), end=timedelta(1))
                    ),
                )
            ),
            "needs the dispatcher's Delivery",
        ),
    ],
)
def test_a_bad_fault_is_refused(build: object, error: str) -> None:
    """Windows must be forward and inside the run; a receiver outage needs delivery numbers."""
    with pytest.raises(ValueError, match=error):
        build()  # type: ignore[operator]
