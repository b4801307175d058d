"""The simulator's fast path, pinned to the core's own rules on random inputs.

The run decides with plain integers: which tick a pair acts on, in what
order held-back pairs wait, which nudge number a charge is. Each rule test
states one restatement and checks it against decide, is_candidate,
effective_nudges or plan_tick; the board tests run whole random scenarios
with ``check=True``, where every tick plan_tick over the whole board must
charge and clear exactly what the run did.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stall_core import (
    Capped,
    Charge,
    LedgerRow,
    PacingPolicy,
    PairState,
    TodoRef,
    Wait,
    decide,
    effective_nudges,
    is_candidate,
    made_progress,
    plan_tick,
)
from stall_sim import (
    Consumer,
    ConsumerKind,
    Scenario,
    SimPolicy,
    SimResult,
    simulate,
)
from stall_sim import run as sim_run
from stall_sim.board import SimPair, todo_id
from stall_sim.rules import (
    ChargeOrder,
    DueTicks,
    Timeline,
    first_stalled_tick,
    has_unconsumed_claim,
    nudges_spent,
)
from stall_sim.scenario import pair_keys
from stall_sim.sweep import DuePairs
from tests.support import examples

from .sim_strategies import scenarios as sim_scenarios

START = datetime(2026, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)

tick_lengths = st.one_of(
    st.sampled_from([15_000_000, 20_000_000, 60_000_000, 7_500_000]),
    st.integers(1, 90_000_000),
)
thresholds = st.one_of(
    st.sampled_from([120_000_000, 30_000_000, 15_000_000]), st.integers(1, 600_000_000)
)
policies = st.builds(
    PacingPolicy,
    threshold=thresholds.map(lambda us: us * US),
    backoff=st.lists(st.integers(1, 30_000_000_000), min_size=1, max_size=4).map(
        lambda steps: tuple(step * US for step in sorted(steps))
    ),
    cap=st.integers(1, 6),
    tick_limit=st.integers(1, 5),
)


def timeline(tick_us: int) -> Timeline:
    return Timeline(start=START, tick_us=tick_us, end_us=10**15)


def pair_state(created_us: int, claim_at: datetime | None = None) -> PairState:
    return PairState(
        endpoint_id="e",
        queue="q",
        oldest=TodoRef(id="t", created_at=START + created_us * US),
        endpoint_active=True,
        has_receiver=True,
        latest_claim=claim_at,
    )


@settings(max_examples=examples(300), deadline=None)
@given(created_us=st.integers(0, 10**12), threshold_us=thresholds, tick_us=tick_lengths)
def test_first_stalled_tick_is_the_first_tick_is_candidate_holds(
    created_us: int, threshold_us: int, tick_us: int
) -> None:
    """first_stalled_tick is the first tick where is_candidate (the strict threshold) is True."""
    policy = PacingPolicy(threshold=threshold_us * US)
    tick = first_stalled_tick(created_us, threshold_us, tick_us)
    pair = pair_state(created_us)

    def at(k: int) -> datetime:
        return timeline(tick_us).instant(k * tick_us)

    assert (True, False) == (
        is_candidate(pair, at(tick), policy),
        is_candidate(pair, at(tick - 1), policy),
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    policy=policies,
    tick_us=tick_lengths,
    nudges=st.integers(0, 7),
    charged_us=st.integers(0, 10**12),
)
def test_due_ticks_are_the_first_ticks_decide_charges(
    policy: PacingPolicy, tick_us: int, nudges: int, charged_us: int
) -> None:
    """DueTicks gives the first tick decide() charges a stalled pair; None once capped.

    The same DueTicks answers a second row of that count too: a row's wait
    depends on its count only.
    """
    line = timeline(tick_us)
    due_ticks = DueTicks(policy=policy, timeline=line)
    pair = pair_state(created_us=-(10**13))  # stalled at every tick looked at

    for charged in (charged_us, charged_us // 3 + 17):
        row = LedgerRow(
            endpoint_id="e", queue="q", nudges=nudges, last_nudged_at=line.instant(charged)
        )
        tick = due_ticks.first_due_tick(nudges, charged)

        def decision(k: int, row: LedgerRow = row) -> object:
            return decide(pair, row, line.instant(k * tick_us), policy)

        if tick is None:
            assert Capped(nudges=nudges) == decision(0)
        else:
            assert Charge(number=nudges + 1, todo=pair.oldest) == decision(tick)  # type: ignore[arg-type]
            assert isinstance(decision(tick - 1), Wait)


@settings(max_examples=examples(300), deadline=None)
@given(
    has_row=st.booleans(),
    nudges=st.integers(0, 7),
    charged_us=st.integers(0, 10**9),
    last_claim_us=st.integers(-1, 10**9),
)
def test_progress_and_nudges_spent_agree_with_the_core(
    has_row: bool, nudges: int, charged_us: int, last_claim_us: int
) -> None:
    """The run's progress test and spent count match made_progress and effective_nudges.

    The run's claims are never lost and stamped when they happen: one later
    than the row's charge is new, and the run hands plan_tick it as the
    pair's latest new claim.
    """
    row = LedgerRow(endpoint_id="e", queue="q", nudges=nudges, last_nudged_at=START)
    progressed = has_unconsumed_claim(last_claim_us, charged_us if has_row else None)
    new = START + last_claim_us * US if last_claim_us > charged_us else None
    pair = pair_state(0, new)

    assert (last_claim_us > charged_us and has_row) == progressed
    assert progressed == made_progress(pair, row if has_row else None)
    assert effective_nudges(pair, row if has_row else None) == nudges_spent(
        nudges if has_row else None, progressed
    )


@settings(max_examples=examples(200), deadline=None)
@given(pairs=st.integers(1, 3000), queues_per_endpoint=st.integers(1, 40))
def test_pair_index_order_is_code_point_order(pairs: int, queues_per_endpoint: int) -> None:
    """The layout's (endpoint_id, queue) keys sort as pair indexes do (plan_tick's tie-break)."""
    keys = pair_keys(pairs, queues_per_endpoint)

    assert sorted(keys) == keys
    assert len(set(keys)) == pairs


@settings(max_examples=examples(300), deadline=None)
@given(at_us=st.integers(0, 10**13), tick_us=tick_lengths)
def test_tick_at_or_after_is_the_first_sweep_that_sees_an_event(at_us: int, tick_us: int) -> None:
    """An event at a tick's instant is seen by that tick's sweep; one between ticks by the next."""
    tick = timeline(tick_us).tick_at_or_after(at_us)

    assert (tick - 1) * tick_us < at_us <= tick * tick_us


# -- the held-back order ---------------------------------------------------------------------


@st.composite
def held_boards(draw: st.DrawFn) -> tuple[list[tuple[int, int, int]], int, int, int]:
    """Due pairs as (pair index, nudges spent, oldest creation µs), the board size and a limit."""
    pairs = draw(st.integers(1, 60))
    queues_per_endpoint = draw(st.integers(1, 7))
    indexes = draw(st.lists(st.integers(0, pairs - 1), unique=True, min_size=1, max_size=pairs))
    due = [
        (index, draw(st.integers(0, 3)), draw(st.sampled_from([0, 5, 5, 1_000_000, 7])))
        for index in indexes
    ]
    return due, pairs, queues_per_endpoint, draw(st.integers(1, 6))


@settings(max_examples=examples(300), deadline=None)
@given(board=held_boards(), churn=st.lists(st.integers(0, 59), max_size=30))
def test_due_pairs_take_what_plan_tick_charges(
    board: tuple[list[tuple[int, int, int]], int, int, int], churn: list[int]
) -> None:
    """DuePairs gives up what plan_tick would charge, in its order, after drops and re-holds."""
    due, pairs, queues_per_endpoint, limit = board
    keys = pair_keys(pairs, queues_per_endpoint)
    end_us = 2_000_000
    now = START + timedelta(hours=3)
    policy = PacingPolicy(backoff=(timedelta(minutes=1),), cap=10, tick_limit=limit)
    order = ChargeOrder(pairs=pairs, end_us=end_us)
    held = DuePairs(order=order)
    sims: dict[int, SimPair] = {}
    for index, spent, created_us in due:
        sim = SimPair(index, *keys[index], True)
        sim.sendable = [index]
        sims[index] = sim
        held.add(sim, spent, created_us)
    for index in churn:  # drop some and hold them again, leaving stale entries behind
        if index in sims and sims[index].held_rank is not None:
            held.drop(sims[index])
            spent, created_us = next((s, c) for i, s, c in due if i == index)
            held.add(sims[index], spent, created_us)
    everyone = [sims.get(i) or SimPair(i, *keys[i], True) for i in range(pairs)]

    taken = held.take(limit, everyone)

    states, rows = [], {}
    for index, spent, created_us in due:
        endpoint_id, queue = keys[index]
        states.append(
            PairState(
                endpoint_id=endpoint_id,
                queue=queue,
                oldest=TodoRef(id=todo_id(index), created_at=START + created_us * US),
                endpoint_active=True,
                has_receiver=True,
            )
        )
        if spent:
            rows[keys[index]] = LedgerRow(
                endpoint_id=endpoint_id, queue=queue, nudges=spent, last_nudged_at=START
            )
    plan = plan_tick(states, rows, now, policy)
    assert [(n.key, n.number) for n in plan.charges] == [
        (pair.key, spent + 1) for spent, pair in taken
    ]
    assert len(due) - len(taken) == held.count


@settings(max_examples=examples(200), deadline=None)
@given(
    spent=st.integers(0, 10**6),
    created_us=st.integers(0, 10**12),
    index=st.integers(0, 10**5),
    pairs_extra=st.integers(1, 10**5),
)
def test_charge_order_round_trips(
    spent: int, created_us: int, index: int, pairs_extra: int
) -> None:
    """A rank gives back the pair and the nudges spent it was made from."""
    order = ChargeOrder(pairs=index + pairs_extra, end_us=created_us + pairs_extra)

    rank = order.rank(spent, created_us, index)

    assert (index, spent) == (order.pair_index(rank), order.spent(rank))


# -- whole boards: the fast path against plan_tick on every tick -----------------------------

boards = sim_scenarios(
    max_pairs=12,
    durations=[timedelta(hours=3), timedelta(hours=8)],
    latencies=[timedelta(microseconds=1), timedelta(seconds=1), timedelta(seconds=30)],
)


def checked_and_plain(scenario: Scenario, pacing: PacingPolicy, seed: int) -> list[SimResult]:
    """The run with ``check=True`` (plan_tick every tick), then the same run without it."""
    return [
        simulate(
            scenario,
            SimPolicy(name="random", pacing=pacing),
            workload=random.Random(f"{seed}:w"),
            chance=random.Random(f"{seed}:c"),
            check=check,
        )
        for check in (True, False)
    ]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=boards, pacing=policies, seed=st.integers(0, 2**16))
def test_the_fast_path_charges_and_clears_what_plan_tick_does_on_every_tick(
    scenario: Scenario, pacing: PacingPolicy, seed: int
) -> None:
    """On random boards, plan_tick over the whole board agrees with the run on every tick.

    The checked run raises on the first tick where plan_tick would charge
    other pairs, numbers, todos or stamps, or clear other rows; checking
    changes nothing in the result.
    """
    checked, plain = checked_and_plain(scenario, pacing, seed)

    assert attrs.asdict(plain) == attrs.asdict(checked)


def test_the_check_catches_a_fast_path_that_strays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Positive control: a fast path that forgets the nudges spent fails the check."""
    scenario = Scenario(
        pairs=2, duration=timedelta(hours=2), backlog=1, consumer=Consumer(kind=ConsumerKind.DEAD)
    )
    monkeypatch.setattr(sim_run, "nudges_spent", lambda row_nudges, progressed: 0)

    with pytest.raises(AssertionError, match="plan_tick did"):
        checked_and_plain(scenario, PacingPolicy(), seed=1)
