"""Hypothesis properties of plan_tick on generated boards: the tick is decide, pair by pair.

Each property holds plan_tick to the per-pair rules on random pairs and
rows: charges are the first tick_limit Charge decisions in charge order,
clears and resets are exactly the Clear and Reset decisions (and orphan
rows, and progress held back), and a charge consumes the progress it
answers, so each claim and departure counts once. Histories over time are
the contract suite's (on memory and PostgreSQL) and the differential tests'.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from stall_core import (
    QUARANTINE_QUEUE,
    Charge,
    Clear,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    Reset,
    TodoRef,
    charge_row,
    decide,
    effective_nudges,
    made_progress,
    plan_tick,
    refunded_row,
    reset_row,
    work_of,
)
from tests.support import T0, examples, minutes

US = timedelta(microseconds=1)


def d6_key(nudge: Nudge) -> tuple[int, datetime, str, str]:
    """The charge order: effective count, oldest pending todo, endpoint_id, queue."""
    return (nudge.number - 1, nudge.todo.created_at, nudge.endpoint_id, nudge.queue)


# -- strategies ------------------------------------------------------------------------

steps = st.lists(
    st.sampled_from([minutes(1), minutes(5), minutes(20), timedelta(hours=1)]),
    min_size=1,
    max_size=4,
).map(lambda xs: tuple(sorted(xs)))

policies = st.one_of(
    st.just(PacingPolicy()),
    st.builds(
        PacingPolicy,
        threshold=st.sampled_from([timedelta(seconds=30), minutes(2)]),
        backoff=steps,
        cap=st.integers(1, 3),
        tick_limit=st.integers(1, 4),
    ),
)

# Instants near NOW, often exactly on a threshold or backoff boundary, some ahead of it.
NOW = T0
instants = st.one_of(
    st.sampled_from(
        [
            timedelta(0),
            -timedelta(seconds=30),
            -minutes(2),
            -minutes(2) - US,
            -minutes(5),
            -minutes(20),
            -timedelta(hours=1),
            US,
        ]
    ),
    st.integers(-600, 10).map(minutes),
).map(lambda d: NOW + d)
mostly = st.sampled_from([True, True, True, False])
rarely = st.sampled_from([False, False, False, True])
keys = st.tuples(
    st.sampled_from(["a", "B", "é", "b", "A"]), st.sampled_from(["q", "Q", QUARANTINE_QUEUE])
)

Board = tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy]


@st.composite
def boards(draw: st.DrawFn) -> Board:
    """A board of distinct pairs, rows for some of them (and some orphans), now and a policy.

    Rows name a todo or (an older build's) none, and some keep progress a reset saw. Each
    pair's work is what ``work_of`` finds among its pending todos (none in quarantine).
    """
    pair_keys = draw(st.lists(keys, unique=True, max_size=12))
    oldest = st.lists(st.builds(TodoRef, id=st.just("t"), created_at=instants), max_size=1)
    pairs = [
        PairState(
            endpoint_id=ep,
            queue=q,
            oldest=work_of(draw(oldest), endpoint_id=ep, queue=q),
            endpoint_active=draw(mostly),
            has_receiver=draw(mostly),
            latest_claim=draw(st.none() | instants),
            named_departed=draw(rarely),
        )
        for ep, q in pair_keys
    ]
    row_keys = draw(st.lists(keys, unique=True, max_size=12))
    # 0 is a refunded first nudge, or a reset.
    rows = {
        (ep, q): LedgerRow(
            endpoint_id=ep,
            queue=q,
            nudges=draw(st.integers(0, 6)),
            last_nudged_at=draw(instants),
            named_todo=draw(st.sampled_from([f"{ep}/{q}", f"{ep}/{q}", "gone", None])),
            progressed_at=draw(st.none() | st.none() | instants),
        )
        for ep, q in row_keys
    }
    return pairs, rows, NOW, draw(policies)


# -- plan_tick on generated values ---------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_charges_the_first_charge_decisions_in_d6_order(board: Board) -> None:
    """Charges are the first tick_limit Charge decisions in charge order, held_back the rest.

    Each is stamped now.
    """
    pairs, rows, now, policy = board
    decisions = {p.key: (p, decide(p, rows.get(p.key), now, policy)) for p in pairs}
    wanted = sorted(
        (
            Nudge(
                endpoint_id=p.endpoint_id,
                queue=p.queue,
                todo=d.todo,
                number=d.number,
                charged_at=now,
            )
            for p, d in decisions.values()
            if isinstance(d, Charge)
        ),
        key=d6_key,
    )

    plan = plan_tick(pairs, rows, now, policy)

    assert tuple(wanted[: policy.tick_limit]) == plan.charges
    assert sorted(plan.charges, key=d6_key) == list(plan.charges)
    assert len(wanted) - len(plan.charges) == plan.held_back
    assert len(plan.charges) <= policy.tick_limit


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_clears_are_clear_decisions_and_orphans(board: Board) -> None:
    """Deletions are the Clear decisions plus rows with no pair, sorted, never also charged."""
    pairs, rows, now, policy = board
    present = {p.key for p in pairs}
    clears = {p.key for p in pairs if isinstance(decide(p, rows.get(p.key), now, policy), Clear)}

    plan = plan_tick(pairs, rows, now, policy)

    assert sorted(clears | (rows.keys() - present)) == list(plan.cleared)
    assert set() == {n.key for n in plan.charges} & set(plan.cleared)


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_resets_exactly_the_rows_with_progress_it_does_not_charge(board: Board) -> None:
    """Resets are the Reset decisions and the held-back pairs with progress: rows, never charged."""
    pairs, rows, now, policy = board
    plan = plan_tick(pairs, rows, now, policy)
    charged = {n.key for n in plan.charges}
    wanted = {
        p.key
        for p in pairs
        if isinstance(decide(p, rows.get(p.key), now, policy), Reset)
        or (
            p.key not in charged
            and isinstance(decide(p, rows.get(p.key), now, policy), Charge)
            and made_progress(p, rows.get(p.key))
        )
    }

    assert sorted(wanted) == list(plan.reset)
    assert set(plan.reset) <= rows.keys()
    assert set() == set(plan.reset) & (charged | set(plan.cleared))


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_never_charges_a_non_candidate(board: Board) -> None:
    """Every charge is of a stalled, active, reachable, non-quarantine pair, numbered within cap."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    plan = plan_tick(pairs, rows, now, policy)

    for nudge in plan.charges:
        pair = by_key[nudge.key]
        assert QUARANTINE_QUEUE != pair.queue
        assert (True, True) == (pair.endpoint_active, pair.has_receiver)
        assert pair.oldest == nudge.todo
        assert nudge.todo.created_at < now - policy.threshold
        assert 1 <= nudge.number <= policy.cap


@settings(max_examples=examples(150), deadline=None)
@given(boards(), st.sampled_from([timedelta(0), US, minutes(1), timedelta(days=2)]))
def test_a_charge_consumes_the_progress_it_answers(board: Board, later: timedelta) -> None:
    """With the history a charge saw, its row shows no progress: nudge N counts N, never 1 again."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    for nudge in plan_tick(pairs, rows, now, policy).charges:
        written = charge_row(nudge)
        # The claims the charging tick read are not new to the next one; the named todo is
        # the pair's oldest pending todo, so not departed.
        seen = attrs.evolve(by_key[nudge.key], latest_claim=None, named_departed=False)

        assert False is made_progress(seen, written)
        assert nudge.number == effective_nudges(seen, written)
        assert Charge(number=1, todo=nudge.todo) != decide(seen, written, now + later, policy)


@settings(max_examples=examples(150), deadline=None)
@given(boards(), st.integers(1, 6), instants)
def test_a_reset_row_keeps_its_progress_and_refuses_every_refund(
    board: Board, number: int, charged_at: datetime
) -> None:
    """A reset row keeps its stamp and named todo, counts 0, shows progress and refunds nothing."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    for key in plan_tick(pairs, rows, now, policy).reset:
        kept = reset_row(rows[key], now)
        nudge = Nudge(
            endpoint_id=key[0],
            queue=key[1],
            todo=TodoRef(id="t", created_at=T0),
            number=number,
            charged_at=rows[key].last_nudged_at if number % 2 else charged_at,
        )

        assert (0, rows[key].last_nudged_at, rows[key].named_todo) == (
            kept.nudges,
            kept.last_nudged_at,
            kept.named_todo,
        )
        assert (rows[key].progressed_at or now) == kept.progressed_at
        # Whatever shows it now may be gone by the next tick: the row alone keeps it.
        quiet = attrs.evolve(by_key[key], latest_claim=None, named_departed=False)
        assert True is made_progress(quiet, kept)
        assert None is refunded_row(kept, nudge)
