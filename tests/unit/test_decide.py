"""The pure decisions: decide and its parts, charge_row and plan_tick, on plain values."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from stall_core import (
    HELD_RETRY_FRACTION,
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
    Reset,
    TodoRef,
    Wait,
    charge_row,
    charge_stamp,
    decide,
    effective_nudges,
    is_candidate,
    made_progress,
    next_due_at,
    next_sweep_in,
    plan_tick,
    refunded_row,
    starts_over,
    swept_recently,
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
    progress_at: datetime | None = None,
    no_work: bool = False,
) -> PairState:
    """A stalled, active, reachable pair unless told otherwise."""
    return PairState(
        endpoint_id=endpoint_id,
        queue=queue,
        oldest=None if no_work else (oldest if oldest is not None else todo()),
        endpoint_active=active,
        has_receiver=receiver,
        progress_at=progress_at,
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
    """A claim after the last nudge (not yet absorbed) resets the count: charged nudge 1 at once."""
    ledger = row(4, NOW - minutes(1))
    progressed = pair(progress_at=NOW - minutes(1) + timedelta(microseconds=1))

    assert True is made_progress(progressed, ledger)
    assert 0 == effective_nudges(progressed, ledger)
    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_claim_absorbed_at_the_nudge_instant_is_not_progress() -> None:
    """A claim the last nudge's charge absorbed (at its very instant) is not progress."""
    ledger = row(2, NOW - minutes(1))
    # The claim at NOW - 1 min committed before that charge, which absorbed it: the
    # ledger reports no unabsorbed claim, so the pair keeps backing off.
    same_instant = pair(progress_at=None)

    assert False is made_progress(same_instant, ledger)
    assert 2 == effective_nudges(same_instant, ledger)
    assert Wait(due_at=NOW - minutes(1) + POLICY.backoff[1]) == decide(
        same_instant, ledger, NOW, POLICY
    )


def test_claim_before_the_nudge_is_not_progress() -> None:
    """A claim older than the last nudge is not progress."""
    ledger = row(5, NOW - minutes(10))
    # The claim at T0 came before the last nudge, whose charge absorbed it.
    absorbed = pair(progress_at=None)

    assert Capped(nudges=5) == decide(absorbed, ledger, NOW, POLICY)


def test_progress_is_in_commit_order_not_by_timestamp() -> None:
    """An unabsorbed claim stamped before the last nudge is progress: it committed after."""
    ledger = row(4, NOW - minutes(1))
    # A claim whose transaction read the time before the charge but committed after it.
    late_commit = pair(progress_at=NOW - minutes(10))

    assert True is made_progress(late_commit, ledger)
    assert True is starts_over(late_commit, ledger)
    assert 0 == effective_nudges(late_commit, ledger)
    assert Charge(number=1, todo=todo()) == decide(late_commit, ledger, NOW, POLICY)


def test_an_progress_at_the_nudge_instant_is_progress() -> None:
    """An unabsorbed claim stamped at exactly last_nudged_at is progress: it committed after."""
    ledger = row(5, NOW - minutes(1))
    same_instant = pair(progress_at=NOW - minutes(1))

    assert True is made_progress(same_instant, ledger)
    assert Charge(number=1, todo=todo()) == decide(same_instant, ledger, NOW, POLICY)


def test_progress_lifts_a_capped_pair() -> None:
    """A capped pair with a claim after its last nudge is charged nudge 1 again."""
    ledger = row(5, T0 + minutes(3))
    progressed = pair(progress_at=T0 + minutes(4))

    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_progress_without_a_row_is_not_progress() -> None:
    """With no ledger row there is nothing to progress past; the count is zero."""
    claimed = pair(progress_at=T0)

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


# -- the charge stamp and refunds ----------------------------------------------------

US = timedelta(microseconds=1)


def charged(number: int, charged_at: datetime) -> Nudge:
    """A nudge of the default pair as its charge wrote it."""
    return Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=number, charged_at=charged_at)


def test_charge_stamp_takes_a_claim_later_than_now() -> None:
    """A claim stamped after now (committed before the charge looked) becomes the stamp."""
    assert NOW + US == charge_stamp(pair(progress_at=NOW + US), NOW)


def test_charge_stamp_is_now_for_an_earlier_claim() -> None:
    """A claim before now leaves the stamp at now."""
    assert NOW == charge_stamp(pair(progress_at=NOW - minutes(1)), NOW)


def test_charge_stamp_is_now_for_a_claim_at_now() -> None:
    """A claim at exactly now leaves the stamp at now."""
    assert NOW == charge_stamp(pair(progress_at=NOW), NOW)


def test_charge_stamp_is_now_without_a_claim() -> None:
    """A pair with no unabsorbed claim is stamped with now."""
    assert NOW == charge_stamp(pair(), NOW)


def test_a_progress_charge_is_stamped_with_a_claim_later_than_now() -> None:
    """A row's progress claim stamped after now is nudge 1, stamped with that claim."""
    progressed = pair(progress_at=NOW + US)
    rows = {("ep", "lane"): row(3, NOW - minutes(1))}

    [nudge] = plan_tick([progressed], rows, NOW, POLICY).charges

    assert NOW + US == charge_stamp(progressed, NOW)
    assert Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=1, charged_at=NOW + US) == (
        nudge
    )


def test_refunded_row_takes_back_its_own_charge() -> None:
    """The row a nudge's charge wrote (same count, same stamp) comes back one lower."""
    assert row(2, NOW) == refunded_row(row(3, NOW), charged(3, NOW))


def test_refunded_row_of_a_first_nudge_has_no_nudges() -> None:
    """Refunding nudge 1 leaves a row of 0 nudges, not no row."""
    assert row(0, NOW) == refunded_row(row(1, NOW), charged(1, NOW))


def test_refunded_row_keeps_the_stamp() -> None:
    """The refunded row keeps the charge's stamp as its pacing base."""
    refunded = refunded_row(row(1, NOW), charged(1, NOW))

    assert NOW == (refunded.last_nudged_at if refunded else None)


def test_refunded_row_never_undoes_a_later_charge() -> None:
    """After a later charge (next number, later stamp) the old nudge's refund is refused."""
    assert None is refunded_row(row(2, NOW + minutes(5)), charged(1, NOW))


def test_refunded_row_refuses_a_different_stamp() -> None:
    """Same count but another stamp (a charge after progress) is not this nudge's row."""
    assert None is refunded_row(row(1, NOW + US), charged(1, NOW))


def test_refunded_row_refuses_a_different_count() -> None:
    """Same stamp but another count is not this nudge's row."""
    assert None is refunded_row(row(2, NOW), charged(1, NOW))


def test_refunded_row_refuses_a_second_refund() -> None:
    """A nudge already refunded is not refunded again."""
    assert None is refunded_row(row(0, NOW), charged(1, NOW))


def test_refunded_row_of_a_missing_row_is_none() -> None:
    """A drained pair (row deleted) has nothing to refund: the row stays deleted."""
    assert None is refunded_row(None, charged(1, NOW))


def test_a_refunded_first_nudge_waits_the_first_step() -> None:
    """A row of 0 nudges waits until last_nudged_at + backoff[0]."""
    ledger = row(0, NOW - minutes(1))

    assert Wait(due_at=NOW - minutes(1) + POLICY.backoff[0]) == decide(pair(), ledger, NOW, POLICY)
    assert NOW - minutes(1) + POLICY.backoff[0] == next_due_at(ledger, POLICY)


def test_a_refunded_first_nudge_is_charged_number_one_when_due() -> None:
    """At last_nudged_at + backoff[0] a row of 0 nudges is charged nudge 1."""
    ledger = row(0, NOW - POLICY.backoff[0])

    assert Charge(number=1, todo=todo()) == decide(pair(), ledger, NOW, POLICY)
    assert Wait(due_at=NOW) == decide(pair(), ledger, NOW - US, POLICY)


def test_a_refunded_first_nudge_does_not_start_over() -> None:
    """A row of 0 nudges counts no nudge spent, yet the pair does not start over."""
    ledger = row(0, NOW - minutes(1))

    assert False is starts_over(pair(), ledger)
    assert 0 == effective_nudges(pair(), ledger)


def test_progress_after_a_refund_starts_over_at_once() -> None:
    """A claim after a refunded nudge's stamp is progress: nudge 1 at once, no wait."""
    ledger = row(0, NOW - minutes(1))
    progressed = pair(progress_at=NOW - minutes(1) + US)

    assert True is starts_over(progressed, ledger)
    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_starts_over_without_a_row() -> None:
    """A pair with no ledger row starts over."""
    assert True is starts_over(pair(), None)


def test_plan_tick_stamps_a_later_claim() -> None:
    """A charge of a pair claimed after now is stamped with that claim, not now."""
    claimed_later = pair(progress_at=NOW + US)

    [nudge] = plan_tick([claimed_later], {}, NOW, POLICY).charges

    assert Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=1, charged_at=NOW + US) == (
        nudge
    )


def test_a_claim_absorbed_by_a_charge_is_not_progress_again() -> None:
    """After a later-claim charge absorbed that claim, the next tick waits from the claim."""
    claimed_later = pair(progress_at=NOW + US)
    [nudge] = plan_tick([claimed_later], {}, NOW, POLICY).charges
    # The charge absorbed the claim: the next tick's view has no unabsorbed claim.
    absorbed = pair(progress_at=None)

    later = NOW + minutes(1)

    assert False is made_progress(absorbed, charge_row(nudge))
    assert Wait(due_at=NOW + US + POLICY.backoff[0]) == decide(
        absorbed, charge_row(nudge), later, POLICY
    )


def test_plan_tick_ranks_a_refunded_pair_with_the_least_nudged() -> None:
    """A refunded pair (0 nudges, due) ranks as count 0, ahead of a pair due its nudge 2."""
    policy = PacingPolicy(tick_limit=1)
    refunded = pair(endpoint_id="b")
    at_one = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    rows = {
        ("a", "lane"): row(1, NOW - minutes(10), endpoint_id="a"),
        ("b", "lane"): row(0, NOW - minutes(10), endpoint_id="b"),
    }

    plan = plan_tick([at_one, refunded], rows, NOW, policy)

    assert [("b", 1)] == [(n.endpoint_id, n.number) for n in plan.charges]
    assert 1 == plan.held_back
    assert () == plan.reset  # the pair held back made no progress: its row stays


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"active": False}, IdleReason.ENDPOINT_INACTIVE),
        ({"receiver": False}, IdleReason.NO_RECEIVER),
        ({"oldest": todo(NOW - minutes(1))}, IdleReason.FRESH),
    ],
)
def test_progress_that_is_not_charged_resets_the_row(
    state: dict[str, object], reason: IdleReason
) -> None:
    """A pair with progress that is no candidate loses its row: its next nudge is a first one."""
    ledger = row(4, NOW - minutes(5))
    progressed = pair(progress_at=NOW - minutes(1), **state)  # type: ignore[arg-type]

    assert Reset(reason=reason) == decide(progressed, ledger, NOW, POLICY)
    assert ((), ("ep", "lane")) == (
        plan_tick([progressed], {ledger.key: ledger}, NOW, POLICY).charges,
        plan_tick([progressed], {ledger.key: ledger}, NOW, POLICY).reset[0],
    )
    assert Idle(reason=reason) == decide(pair(**state), ledger, NOW, POLICY)  # type: ignore[arg-type]


def test_a_progressed_pair_held_back_by_the_tick_limit_is_reset() -> None:
    """Due at nudge 1 but beyond the tick limit: its row goes, so its claim is judged once."""
    policy = PacingPolicy(tick_limit=1)
    first = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    held = pair(endpoint_id="b", progress_at=NOW - minutes(1))
    rows = {("b", "lane"): row(4, NOW - minutes(2), endpoint_id="b")}

    plan = plan_tick([first, held], rows, NOW, policy)

    assert ([("a", 1)], (("b", "lane"),)) == (
        [(n.endpoint_id, n.number) for n in plan.charges],
        plan.reset,
    )


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
        lambda naive: pair(progress_at=naive),
        lambda naive: Nudge(endpoint_id="e", queue="q", todo=todo(), number=1, charged_at=naive),
    ],
    ids=[
        "todo.created_at",
        "row.last_nudged_at",
        "pair.progress_at",
        "nudge.charged_at",
    ],
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
    assert (("gone", "q"),) == plan.drained


def test_plan_tick_drains_are_drains_and_orphans_sorted() -> None:
    """Deletions hold drained pairs and orphan rows, sorted by key."""
    rows = {
        ("b", "q"): row(1, T0, endpoint_id="b", queue="q"),
        ("a", "q"): row(2, T0, endpoint_id="a", queue="q"),
        ("c", "q"): row(1, T0, endpoint_id="c", queue="q"),
    }
    board = [pair(endpoint_id="b", queue="q", no_work=True), pair(endpoint_id="c", queue="q")]

    plan = plan_tick(board, rows, NOW, POLICY)

    assert (("a", "q"), ("b", "q")) == plan.drained
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
    progressed_at_four = pair(endpoint_id="b", progress_at=NOW - minutes(1))
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

    assert ((), (), 0) == (plan.charges, plan.drained, plan.held_back)


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


@pytest.mark.parametrize(
    ("swept_ago", "wait"),
    [
        (None, timedelta(seconds=15)),  # no record: a whole interval
        (timedelta(0), timedelta(seconds=15)),  # this tick swept
        (timedelta(seconds=4), timedelta(seconds=11)),  # another instance swept 4 s ago
        (timedelta(seconds=15), timedelta(0)),  # due now
        (timedelta(minutes=5), timedelta(0)),  # long overdue: at once
        (-timedelta(minutes=5), timedelta(seconds=15)),  # a record from the future: capped
    ],
)
def test_a_looping_instance_waits_until_an_interval_after_the_fleet_swept(
    swept_ago: timedelta | None, wait: timedelta
) -> None:
    """next_sweep_in paces an instance by the fleet's record, between nothing and one interval."""
    swept_at = None if swept_ago is None else T0 - swept_ago

    assert wait == next_sweep_in(swept_at, T0, timedelta(seconds=15))


@pytest.mark.parametrize(
    ("swept_ago", "wait"),
    [
        (timedelta(seconds=15), timedelta(seconds=1.5)),  # due: the holder has not committed
        (timedelta(minutes=5), timedelta(seconds=1.5)),  # long overdue, held all the same
        (timedelta(seconds=4), timedelta(seconds=11)),  # swept 4 s ago: the record paces it
        (None, timedelta(seconds=15)),  # no record yet: a whole interval
    ],
)
def test_a_tick_skipped_while_a_sweep_is_due_looks_again_after_a_tenth_of_an_interval(
    swept_ago: timedelta | None, wait: timedelta
) -> None:
    """A tick held by another instance waits every / HELD_RETRY_FRACTION, never nothing."""
    swept_at = None if swept_ago is None else T0 - swept_ago

    assert 10 == HELD_RETRY_FRACTION
    assert wait == next_sweep_in(swept_at, T0, timedelta(seconds=15), skipped=True)


@pytest.mark.parametrize(
    ("swept_ago", "skips"),
    [
        (None, False),
        (timedelta(seconds=14), True),
        (timedelta(seconds=15), False),  # exactly an interval ago: sweep
        (-timedelta(seconds=1), False),  # a record from the future never holds a tick back
    ],
)
def test_a_tick_skips_only_while_the_fleet_swept_within_its_interval(
    swept_ago: timedelta | None, skips: bool
) -> None:
    """swept_recently: within [swept_at, swept_at + every), and never without ``every``."""
    swept_at = None if swept_ago is None else T0 - swept_ago

    assert skips is swept_recently(swept_at, T0, timedelta(seconds=15))
    assert False is swept_recently(swept_at, T0, None)
