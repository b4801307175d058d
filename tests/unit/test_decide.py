"""The pure decisions: decide and its parts, charge_row and plan_tick, on plain values."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from stall_core import (
    QUARANTINE_QUEUE,
    Capped,
    Charge,
    Drain,
    Idle,
    IdleReason,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    TodoRef,
    Wait,
    charge_row,
    decide,
    effective_nudges,
    is_candidate,
    made_progress,
    next_due_at,
    plan_tick,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
NOW = T0 + minutes(30)


def todo(created_at: datetime = T0, todo_id: str = "t1", title: str | None = None) -> TodoRef:
    """A gate-passing todo reference."""
    return TodoRef(id=todo_id, created_at=created_at, title=title)


def pair(
    *,
    endpoint_id: str = "ep",
    queue: str = "lane",
    oldest: TodoRef | None = None,
    active: bool = True,
    receiver: bool = True,
    last_claimed_at: datetime | None = None,
    no_work: bool = False,
) -> PairState:
    """A stalled, active, reachable pair unless told otherwise."""
    return PairState(
        endpoint_id=endpoint_id,
        queue=queue,
        oldest=None if no_work else (oldest if oldest is not None else todo()),
        endpoint_active=active,
        has_receiver=receiver,
        last_claimed_at=last_claimed_at,
    )


def row(
    nudges: int, last_nudged_at: datetime, *, endpoint_id: str = "ep", queue: str = "lane"
) -> LedgerRow:
    """A ledger row of the default pair."""
    return LedgerRow(
        endpoint_id=endpoint_id, queue=queue, nudges=nudges, last_nudged_at=last_nudged_at
    )


# -- candidacy ----------------------------------------------------------------


def test_threshold_is_strict() -> None:
    """A todo created exactly the threshold ago is fresh; a microsecond older is stalled."""
    at_threshold = pair(oldest=todo(NOW - POLICY.threshold))
    past_threshold = pair(oldest=todo(NOW - POLICY.threshold - timedelta(microseconds=1)))

    assert False is is_candidate(at_threshold, NOW, POLICY)
    assert Idle(reason=IdleReason.FRESH) == decide(at_threshold, None, NOW, POLICY)
    assert True is is_candidate(past_threshold, NOW, POLICY)


def test_fresh_work_is_not_a_stalled_queue() -> None:
    """Fresh work is not a stalled queue: a todo seconds old is idle, with or without a row."""
    fresh = pair(oldest=todo(NOW - timedelta(seconds=5)))

    assert Idle(reason=IdleReason.FRESH) == decide(fresh, None, NOW, POLICY)
    assert Idle(reason=IdleReason.FRESH) == decide(fresh, row(2, T0), NOW, POLICY)


def test_stalled_pair_without_row_is_charged_first_nudge() -> None:
    """A stalled pair with no ledger row is charged nudge 1 naming its oldest todo."""
    ref = todo(title="work")

    assert Charge(number=1, todo=ref) == decide(pair(oldest=ref), None, NOW, POLICY)


def test_quarantine_is_not_pending_work() -> None:
    """Nudging does not wake a quarantined queue: quarantine work counts as no work."""
    held = pair(queue=QUARANTINE_QUEUE, oldest=todo(T0 - timedelta(days=365)))

    assert False is is_candidate(held, NOW, POLICY)
    assert Idle(reason=IdleReason.NO_WORK) == decide(held, None, NOW, POLICY)
    assert Drain() == decide(held, row(1, T0, queue=QUARANTINE_QUEUE), NOW, POLICY)


def test_inactive_endpoint_is_idle_and_keeps_its_row() -> None:
    """An inactive endpoint is idle, and its ledger row is left as it is (not drained)."""
    paused = pair(active=False)

    assert Idle(reason=IdleReason.ENDPOINT_INACTIVE) == decide(paused, None, NOW, POLICY)
    assert Idle(reason=IdleReason.ENDPOINT_INACTIVE) == decide(paused, row(3, T0), NOW, POLICY)


def test_a_queue_with_no_receiver_is_not_charged() -> None:
    """A queue with no receiver is not charged: idle, whatever its row says."""
    hookless = pair(receiver=False)

    assert False is is_candidate(hookless, NOW, POLICY)
    assert Idle(reason=IdleReason.NO_RECEIVER) == decide(hookless, None, NOW, POLICY)
    assert Idle(reason=IdleReason.NO_RECEIVER) == decide(hookless, row(1, T0), NOW, POLICY)


def test_no_work_without_a_row_is_idle_not_drain() -> None:
    """Drain is for a ledger row only: a pair with no work and no row is idle."""
    assert Idle(reason=IdleReason.NO_WORK) == decide(pair(no_work=True), None, NOW, POLICY)
    assert Drain() == decide(pair(no_work=True), row(2, T0), NOW, POLICY)


def test_no_work_drains_even_when_inactive_or_hookless() -> None:
    """A row whose pair has no work is deleted even if the endpoint is paused or hookless."""
    drained = pair(no_work=True, active=False, receiver=False)

    assert Drain() == decide(drained, row(5, T0), NOW, POLICY)


# -- pacing ---------------------------------------------------------------------


def test_wait_names_the_due_time() -> None:
    """A candidate inside its backoff waits until last nudge + the next step."""
    ledger = row(2, NOW - minutes(1))

    assert Wait(due_at=NOW - minutes(1) + minutes(20)) == decide(pair(), ledger, NOW, POLICY)


def test_charge_exactly_at_due_time() -> None:
    """At the due instant itself the next nudge is charged."""
    ledger = row(1, NOW - minutes(5))

    assert Charge(number=2, todo=todo()) == decide(pair(), ledger, NOW, POLICY)
    assert Wait(due_at=NOW) == decide(pair(), ledger, NOW - timedelta(microseconds=1), POLICY)


def test_capped_after_cap_nudges() -> None:
    """After cap nudges without progress the pair is capped, however long it waits."""
    ledger = row(5, T0)

    assert Capped(nudges=5) == decide(pair(), ledger, T0 + timedelta(days=30), POLICY)


def test_claim_after_the_nudge_is_progress() -> None:
    """A claim strictly after the last nudge resets the count: charged nudge 1 at once."""
    ledger = row(4, NOW - minutes(1))
    progressed = pair(last_claimed_at=NOW - minutes(1) + timedelta(microseconds=1))

    assert True is made_progress(progressed, ledger)
    assert 0 == effective_nudges(progressed, ledger)
    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_claim_at_the_nudge_instant_is_not_progress() -> None:
    """A claim at exactly last_nudged_at is not progress: the pair keeps backing off."""
    ledger = row(2, NOW - minutes(1))
    same_instant = pair(last_claimed_at=NOW - minutes(1))

    assert False is made_progress(same_instant, ledger)
    assert 2 == effective_nudges(same_instant, ledger)
    assert isinstance(decide(same_instant, ledger, NOW, POLICY), Wait)


def test_claim_before_the_nudge_is_not_progress() -> None:
    """A claim older than the last nudge is not progress."""
    ledger = row(5, NOW - minutes(10))

    assert Capped(nudges=5) == decide(pair(last_claimed_at=T0), ledger, NOW, POLICY)


def test_progress_lifts_a_capped_pair() -> None:
    """A capped pair with a claim after its last nudge is charged nudge 1 again."""
    ledger = row(5, T0 + minutes(3))
    progressed = pair(last_claimed_at=T0 + minutes(4))

    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_progress_without_a_row_is_not_progress() -> None:
    """With no ledger row there is nothing to progress past; the count is zero."""
    claimed = pair(last_claimed_at=T0)

    assert False is made_progress(claimed, None)
    assert 0 == effective_nudges(claimed, None)


def test_next_due_at() -> None:
    """next_due_at is last nudge + the next step, and None once capped."""
    assert T0 + minutes(5) == next_due_at(row(1, T0), POLICY)
    assert T0 + timedelta(hours=6) == next_due_at(row(4, T0), POLICY)
    assert None is next_due_at(row(5, T0), POLICY)
    assert None is next_due_at(row(9, T0), POLICY)


def test_next_due_at_with_a_longer_cap_repeats_the_last_step() -> None:
    """A policy whose cap outruns the schedule keeps the last step."""
    policy = PacingPolicy(cap=8)

    assert T0 + timedelta(hours=6) == next_due_at(row(6, T0), policy)


def test_charge_row() -> None:
    """A committed charge leaves a row with its number and charge time."""
    nudge = Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=3, charged_at=NOW)

    assert row(3, NOW) == charge_row(nudge)


# -- invalid inputs ---------------------------------------------------------------


def test_row_of_another_pair_raises() -> None:
    """A ledger row belonging to another pair is refused, naming both keys."""
    with pytest.raises(ValueError, match="does not belong") as info:
        decide(pair(), row(1, T0, queue="other"), NOW, POLICY)

    assert "'other'" in str(info.value)


def test_naive_now_raises() -> None:
    """A naive now is refused by decide and plan_tick."""
    naive = datetime(2026, 10, 15, 9, 30)

    with pytest.raises(ValueError, match="now must be timezone-aware"):
        decide(pair(), None, naive, POLICY)
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        plan_tick([pair()], {}, naive, POLICY)


@pytest.mark.parametrize(
    "build",
    [
        lambda naive: TodoRef(id="t", created_at=naive),
        lambda naive: row(1, naive),
        lambda naive: pair(last_claimed_at=naive),
        lambda naive: Nudge(endpoint_id="e", queue="q", todo=todo(), number=1, charged_at=naive),
    ],
    ids=["todo.created_at", "row.last_nudged_at", "pair.last_claimed_at", "nudge.charged_at"],
)
def test_naive_instants_in_values_raise(build: object) -> None:
    """Every instant in a core value must be timezone-aware."""
    with pytest.raises(ValueError, match="timezone-aware"):
        build(datetime(2026, 10, 15, 9, 0))  # type: ignore[operator]


def test_non_datetime_instant_raises_type_error() -> None:
    """A string where an instant belongs raises TypeError naming the field."""
    with pytest.raises(TypeError, match="created_at"):
        TodoRef(id="t", created_at="2026-10-15T09:00:00Z")  # type: ignore[arg-type]


def test_other_time_zones_compare_correctly() -> None:
    """An aware now in another zone is the same instant as in UTC."""
    exactly_threshold = (T0 + POLICY.threshold).astimezone(timezone(timedelta(hours=2)))

    assert Idle(reason=IdleReason.FRESH) == decide(pair(), None, exactly_threshold, POLICY)


# -- plan_tick --------------------------------------------------------------------


def test_plan_tick_duplicate_pairs_raise() -> None:
    """The same pair twice in one board is refused."""
    with pytest.raises(ValueError, match="appears twice"):
        plan_tick([pair(), pair()], {}, NOW, POLICY)


def test_plan_tick_deletes_orphan_rows() -> None:
    """A ledger row whose pair is absent from the board is deleted."""
    rows = {("gone", "q"): row(3, T0, endpoint_id="gone", queue="q")}

    plan = plan_tick([], rows, NOW, POLICY)

    assert () == plan.charges
    assert (("gone", "q"),) == plan.deletions


def test_plan_tick_deletions_are_drains_and_orphans_sorted() -> None:
    """Deletions hold drained pairs and orphan rows, sorted by key."""
    rows = {
        ("b", "q"): row(1, T0, endpoint_id="b", queue="q"),
        ("a", "q"): row(2, T0, endpoint_id="a", queue="q"),
        ("c", "q"): row(1, T0, endpoint_id="c", queue="q"),
    }
    board = [pair(endpoint_id="b", queue="q", no_work=True), pair(endpoint_id="c", queue="q")]

    plan = plan_tick(board, rows, NOW, POLICY)

    assert (("a", "q"), ("b", "q")) == plan.deletions
    assert [("c", "q")] == [n.key for n in plan.charges]


def test_plan_tick_charges_carry_now_and_number() -> None:
    """Each planned nudge is stamped with now, its number and the named todo."""
    ref = todo(title="x")
    rows = {("ep", "lane"): row(1, NOW - minutes(6))}

    [nudge] = plan_tick([pair(oldest=ref)], rows, NOW, POLICY).charges

    assert Nudge(endpoint_id="ep", queue="lane", todo=ref, number=2, charged_at=NOW) == nudge


def test_plan_tick_orders_by_effective_count_first() -> None:
    """Least-nudged first: a progressed pair (effective 0) goes before a fresher-row pair at 1."""
    policy = PacingPolicy(tick_limit=1)
    old_at_one = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    progressed_at_four = pair(endpoint_id="b", last_claimed_at=NOW - minutes(1))
    rows = {
        ("a", "lane"): row(1, NOW - minutes(10), endpoint_id="a"),
        ("b", "lane"): row(4, NOW - minutes(2), endpoint_id="b"),
    }

    plan = plan_tick([old_at_one, progressed_at_four], rows, NOW, policy)

    assert [("b", 1)] == [(n.endpoint_id, n.number) for n in plan.charges]
    assert 1 == plan.held_back


def test_plan_tick_orders_by_oldest_work_then_ids() -> None:
    """Among equal counts, the oldest pending todo goes first, then endpoint_id, then queue."""
    board = [
        pair(endpoint_id="b", queue="q", oldest=todo(T0)),
        pair(endpoint_id="a", queue="z", oldest=todo(T0)),
        pair(endpoint_id="a", queue="m", oldest=todo(T0)),
        pair(endpoint_id="z", queue="q", oldest=todo(T0 - minutes(1))),
        pair(endpoint_id="c", queue="q", oldest=todo(T0 + minutes(1))),
    ]

    plan = plan_tick(board, {}, NOW, POLICY)

    assert [("z", "q"), ("a", "m"), ("a", "z"), ("b", "q")] == [n.key for n in plan.charges]
    assert 1 == plan.held_back


def test_plan_tick_orders_ids_by_code_point() -> None:
    """Ties break by code point (Postgres "C" collation): upper before lower, ASCII before é."""
    names = ["é", "e", "E", "z", "Z", "ä"]
    board = [pair(endpoint_id="ep", queue=q) for q in names]

    plan = plan_tick(board, {}, NOW, PacingPolicy(tick_limit=len(names)))

    assert ["E", "Z", "e", "z", "ä", "é"] == [n.queue for n in plan.charges]


def test_plan_tick_endpoint_before_queue_by_code_point() -> None:
    """endpoint_id decides before queue, each by code point."""
    board = [
        pair(endpoint_id="ép", queue="a"),
        pair(endpoint_id="ep", queue="z"),
        pair(endpoint_id="Ep", queue="zz"),
    ]

    plan = plan_tick(board, {}, NOW, POLICY)

    assert [("Ep", "zz"), ("ep", "z"), ("ép", "a")] == [n.key for n in plan.charges]


def test_plan_tick_held_back_counts_due_pairs_beyond_the_limit() -> None:
    """held_back counts the due pairs the tick limit left out, not waiting or idle ones."""
    board = [pair(endpoint_id=f"ep{i}") for i in range(7)]
    board.append(pair(endpoint_id="waiting"))
    board.append(pair(endpoint_id="fresh", oldest=todo(NOW)))
    rows = {("waiting", "lane"): row(1, NOW, endpoint_id="waiting")}

    plan = plan_tick(board, rows, NOW, POLICY)

    assert 4 == len(plan.charges)
    assert 3 == plan.held_back


def test_plan_tick_nothing_due_holds_nothing_back() -> None:
    """With nothing due, the plan is empty and nothing is held back."""
    plan = plan_tick([pair(receiver=False)], {}, NOW, POLICY)

    assert ((), (), 0) == (plan.charges, plan.deletions, plan.held_back)


def test_plan_tick_accepts_any_iterable_of_pairs() -> None:
    """plan_tick takes a generator of pairs as well as a list."""
    plan = plan_tick((pair(endpoint_id=e) for e in "ab"), {}, NOW, POLICY)

    assert ["a", "b"] == [n.endpoint_id for n in plan.charges]


def test_plan_tick_does_not_mutate_its_rows() -> None:
    """plan_tick only plans: the rows mapping it was given is unchanged."""
    rows = {("ep", "lane"): row(1, T0), ("gone", "q"): row(1, T0, endpoint_id="gone", queue="q")}
    before = dict(rows)

    plan_tick([pair()], rows, NOW, POLICY)

    assert before == rows


def test_a_deep_backlog_costs_one_wake() -> None:
    """A deep backlog costs one wake: one pair is one charge, whatever its depth."""
    plan = plan_tick([pair(oldest=todo(T0, "oldest-of-five"))], {}, NOW, POLICY)

    assert ["oldest-of-five"] == [n.todo.id for n in plan.charges]
