"""The simulator's results on small cases one can check by hand."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import timedelta

import pytest

from stall_sim import (
    UNCAPPED,
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

NO_ARRIVALS = Poisson(per_hour=0.0)


class Scripted:
    """A RandomSource whose random() returns the given values, then 0.99 forever."""

    def __init__(self, values: Iterable[float] = ()) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0) if self.values else 0.99

    def expovariate(self, lambd: float, /) -> float:
        return 1 / lambd


def run(
    scenario: Scenario, policy: SimPolicy | None = None, *, chance: Iterable[float] = ()
) -> SimResult:
    return simulate(
        scenario,
        policy or SimPolicy.default(),
        workload=random.Random(7),
        chance=Scripted(chance),
        record=True,
    )


def backlog_only(**kwargs: object) -> Scenario:
    fields: dict[str, object] = {
        "pairs": 1,
        "duration": timedelta(hours=1),
        "arrivals": NO_ARRIVALS,
        "backlog": 1,
    }
    fields.update(kwargs)
    return Scenario(**fields)  # type: ignore[arg-type]


def test_dead_consumer_spends_exactly_cap_nudges_per_pair() -> None:
    """A dead consumer gets cap nudges per pair, then silence, with its work still pending."""
    scenario = backlog_only(
        pairs=3, duration=timedelta(days=2), consumer=Consumer(kind=ConsumerKind.DEAD)
    )

    result = run(scenario)

    assert 3 * 5 == result.nudges
    assert 3 == result.capped_pairs
    assert 3 == result.pending
    assert 0 == result.claims


def test_edge_only_sends_no_nudges() -> None:
    """The edge-only baseline sends one creation wake per todo and nothing else."""
    scenario = Scenario(
        pairs=20,
        duration=timedelta(hours=12),
        arrivals=Poisson(per_hour=2.0),
        consumer=Consumer(kind=ConsumerKind.DEAD),
    )

    result = run(scenario, SimPolicy.edge_only())

    assert 0 == result.nudges
    assert result.todos == result.creation_wakes == result.wakes_sent
    assert 0 == result.max_started_in_tick


def test_a_lost_creation_wake_is_recovered_at_the_first_stalled_tick() -> None:
    """With the creation wake lost, nudge 1 at 135 s starts the consumer, which claims 1 s later."""
    scenario = backlog_only(wake_loss=0.5)

    result = run(scenario, chance=[0.1])  # the first draw loses the creation wake

    assert 1 == result.wakes_lost
    assert 1 == result.nudges
    assert 1 == result.claims
    assert 136.0 == result.wait.max
    assert 0 == result.pending


def test_a_lost_creation_wake_stays_pending_without_nudges() -> None:
    """Edge-only never recovers the lost wake: the todo is still pending at the end."""
    scenario = backlog_only(wake_loss=0.5)

    result = run(scenario, SimPolicy.edge_only(), chance=[0.1])

    assert 0 == result.claims
    assert 1 == result.pending
    assert 3600.0 == result.oldest_pending_s


def test_the_reported_case_drains_a_backlog_at_the_short_cadence() -> None:
    """Three todos, one-shot consumer: the creation wake claims one, then two nudges numbered 1."""
    scenario = backlog_only(backlog=3)

    result = run(scenario)

    claims = [e.at - scenario.start for e in result.trace if isinstance(e, Claimed)]

    assert [(135, 1), (150, 1)] == [
        ((n.charged_at - scenario.start).seconds, n.number) for n in result.nudge_log
    ]
    assert [timedelta(seconds=s) for s in (1, 136, 151)] == claims
    assert 0 == result.pending


def test_the_tick_limit_starts_at_most_four_consumers_per_tick() -> None:
    """Ten pairs stalled at once: 4, 4, then 2 first nudges on three ticks, two holding back."""
    scenario = backlog_only(pairs=10, consumer=Consumer(kind=ConsumerKind.DEAD))

    result = run(scenario)
    first = [n for n in result.nudge_log if n.number == 1]
    ticks = sorted({n.charged_at for n in first})
    per_tick = [sum(1 for n in first if n.charged_at == at) for at in ticks]

    assert 4 == result.max_started_in_tick
    assert [4, 4, 2] == per_tick
    assert 2 == result.held_back_ticks  # later nudges stay staggered: no pile-up


def test_fixed_repeat_never_stops() -> None:
    """fixed-5m nudges a dead pair every five minutes from the first stalled tick, uncapped."""
    policy = SimPolicy.fixed(timedelta(minutes=5))

    result = run(backlog_only(consumer=Consumer(kind=ConsumerKind.DEAD)), policy)

    assert ("fixed-5m", UNCAPPED) == (policy.name, policy.pacing and policy.pacing.cap)
    assert 12 == result.nudges  # 135 s, then every 300 s up to 3600 s
    assert 0 == result.capped_pairs


def test_unverified_work_is_never_nudged() -> None:
    """Only unverified todos: no nudge fires, and they stay pending for pull."""
    scenario = backlog_only(
        pairs=4, unverified_share=1.0, consumer=Consumer(kind=ConsumerKind.DEAD)
    )

    result = run(scenario)

    assert 0 == result.nudges
    assert 4 == result.pending


def test_hookless_pairs_get_no_wake_at_all() -> None:
    """A pair no hook covers gets neither creation wakes nor nudges."""
    scenario = backlog_only(pairs=4, hookless_share=1.0)

    result = run(scenario)

    assert (0, 0, 4) == (result.wakes_sent, result.claims, result.pending)


def test_batch_consumer_claims_up_to_its_batch() -> None:
    """A batch consumer claims 4 of a 5-todo burst on its creation wake, the last on a nudge."""
    scenario = backlog_only(backlog=5, consumer=Consumer(kind=ConsumerKind.BATCH, batch=4))

    result = run(scenario)

    assert 5 == result.claims
    assert 1 == result.nudges


def test_flaky_consumer_that_never_claims_is_capped() -> None:
    """A flaky consumer with claim probability 0 behaves like a dead one."""
    scenario = backlog_only(
        duration=timedelta(days=1),
        consumer=Consumer(kind=ConsumerKind.FLAKY, claim_probability=0.0),
    )

    result = run(scenario)

    assert (5, 1, 0) == (result.nudges, result.capped_pairs, result.claims)


def test_runs_are_deterministic_and_policies_share_the_workload() -> None:
    """Equal seeds give equal results, and every policy sees the same todos."""
    scenario = Scenario(
        pairs=30,
        duration=timedelta(hours=6),
        arrivals=Bursts(per_hour=0.5, size=3),
        unverified_share=0.2,
        wake_loss=0.1,
    )

    def go(policy: SimPolicy) -> SimResult:
        return simulate(
            scenario, policy, workload=random.Random(3), chance=random.Random(4), record=True
        )

    first, again = go(SimPolicy.default()), go(SimPolicy.default())
    edge = go(SimPolicy.edge_only())

    assert first == again
    assert [e for e in first.trace if isinstance(e, Created)] == [
        e for e in edge.trace if isinstance(e, Created)
    ]


def test_backlog_samples_span_the_run() -> None:
    """The backlog series starts at 0 s with the initial backlog and ends at the run's end."""
    result = run(backlog_only(pairs=2, backlog=3, consumer=Consumer(kind=ConsumerKind.DEAD)))

    assert (0.0, 6) == result.backlog[0]
    assert (3600.0, 6) == result.backlog[-1]
    assert 400 == len(result.backlog)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: backlog_only(pairs=0), "pairs must be >= 1"),
        (lambda: backlog_only(wake_loss=1.5), "wake_loss must be between 0 and 1"),
        (lambda: backlog_only(duration=timedelta(seconds=1)), "at least one tick"),
        (lambda: Consumer(latency=timedelta(0)), "latency must be at least"),
        (lambda: Poisson(per_hour=-1.0), "per_hour must be a finite rate"),
    ],
)
def test_bad_parameters_are_refused(build: object, message: str) -> None:
    """Impossible scenarios raise ValueError naming the parameter."""
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_nudges_and_consumer_starts_are_sampled_over_time() -> None:
    """The cumulative nudge and start series share the backlog's instants and end at the totals."""
    scenario = backlog_only(
        pairs=3, duration=timedelta(days=1), consumer=Consumer(kind=ConsumerKind.DEAD)
    )

    result = run(scenario)
    nudges = [n for _, n in result.nudges_over_time]
    started = [n for _, n in result.started_over_time]

    assert [t for t, _ in result.backlog] == [t for t, _ in result.nudges_over_time]
    assert [t for t, _ in result.backlog] == [t for t, _ in result.started_over_time]
    assert (15, 18) == (nudges[-1], started[-1])  # a dead consumer starts on every wake
    assert (15, 18) == (result.nudges, result.consumers_started)
    assert sorted(nudges) == nudges
    assert sorted(started) == started


def test_a_busy_consumer_is_not_started_again() -> None:
    """Wakes ignored by a running consumer do not count as starts."""
    result = run(backlog_only(backlog=3))

    assert 3 == result.creation_wakes
    assert 3 == result.consumers_started  # the first creation wake, then two nudges


#: (policy, todos, nudges, lost, claims, pending, capped, max started, held-back ticks,
#: charged ticks, wait p50, p99, max) from the simulator before its rewrite as a package.
BEFORE_THE_REWRITE = [
    ("default", 16919, 1881, 1840, 16917, 2, 0, 2, 0, 1838, 1.0, 281.200064, 1634.218518),
    (
        "edge-only",
        16919,
        0,
        1685,
        15192,
        1727,
        0,
        0,
        0,
        0,
        27550.731271,
        89315.352416,
        116110.966232,
    ),
    ("fixed-5m", 16919, 1881, 1840, 16917, 2, 0, 2, 0, 1839, 1.0, 323.778461, 734.218518),
]


def test_results_are_those_of_the_simulator_before_its_rewrite() -> None:
    """100 pairs, a week, 10% of wakes lost (docs/architecture.md, "Pacing"): numbers as before."""
    scenario = Scenario(pairs=100, duration=timedelta(days=7), wake_loss=0.1)
    policies = [SimPolicy.default(), SimPolicy.edge_only(), SimPolicy.fixed(timedelta(minutes=5))]

    results = [
        simulate(
            scenario,
            policy,
            workload=random.Random("1:workload"),
            chance=random.Random("1:chance"),
        )
        for policy in policies
    ]

    assert BEFORE_THE_REWRITE == [
        (
            r.policy,
            r.todos,
            r.nudges,
            r.wakes_lost,
            r.claims,
            r.pending,
            r.capped_pairs,
            r.max_started_in_tick,
            r.held_back_ticks,
            r.charged_ticks,
            r.wait.p50,
            r.wait.p99,
            r.wait.max,
        )
        for r in results
    ]


class EveryHour:
    """A workload RandomSource: arrivals exactly one hour apart, no other randomness."""

    def random(self) -> float:
        return 0.99

    def expovariate(self, lambd: float, /) -> float:
        return 3_600_000_000.0  # microseconds


def tied_run(scenario: Scenario, policy: SimPolicy, chance: Iterable[float]) -> SimResult:
    return simulate(scenario, policy, workload=EveryHour(), chance=Scripted(chance), record=True)


def test_a_claim_woken_before_the_arrival_was_drawn_comes_first_at_their_instant() -> None:
    """At one instant a pair's claim precedes its arrival if the claim's wake came first.

    The backlog's creation wake (at 0) starts the consumer before the first
    arrival is drawn; both land at 1 h. The claim takes the backlog todo and
    keeps the consumer busy, so the arrival's creation wake is ignored.
    """
    scenario = backlog_only(
        arrivals=Poisson(per_hour=1.0), consumer=Consumer(latency=timedelta(hours=1))
    )

    result = tied_run(scenario, SimPolicy.edge_only(), chance=[])

    hour = scenario.start + timedelta(hours=1)
    assert [("claimed", "t000000000"), ("created", "t000000001")] == [
        ("created" if isinstance(e, Created) else "claimed", e.todo_id)
        for e in result.trace
        if e.at == hour
    ]
    assert 1 == result.consumers_started


def test_an_arrival_drawn_before_the_claim_was_woken_comes_first_at_their_instant() -> None:
    """At one instant a pair's arrival precedes its claim if the arrival was drawn first.

    The first todo (1 h) loses its creation wake; nudge 1 at 1 h 2 min 15 s
    starts the consumer, which claims at 2 h, when the second arrival (drawn
    at 1 h) lands too. The arrival runs first, and its wake finds the
    consumer's wait for its claim just over, so it starts it again.
    """
    scenario = Scenario(
        pairs=1,
        duration=timedelta(hours=2),
        arrivals=Poisson(per_hour=1.0),
        wake_loss=0.5,
        consumer=Consumer(latency=timedelta(hours=2) - timedelta(hours=1, seconds=135)),
    )

    result = tied_run(scenario, SimPolicy.default(), chance=[0.1])  # the first wake is lost

    two_hours = scenario.start + timedelta(hours=2)
    assert [("created", "t000000001"), ("claimed", "t000000000")] == [
        ("created" if isinstance(e, Created) else "claimed", e.todo_id)
        for e in result.trace
        if e.at == two_hours
    ]
    assert timedelta(hours=1, seconds=135) == result.nudge_log[0].charged_at - scenario.start
    assert 2 == result.consumers_started
