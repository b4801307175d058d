"""The pure decisions: decide and its parts, charge_row and plan_tick, on plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
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
    charge_order,
    charge_row,
    charge_stamp,
    decide,
    effective_nudges,
    has_departed,
    is_candidate,
    is_due,
    latest_claim,
    made_progress,
    next_due_at,
    next_sweep_in,
    plan_tick,
    readable,
    refunded_row,
    reset_row,
    starts_over,
    swept_recently,
    work_of,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
NOW = T0 + minutes(30)
US = timedelta(microseconds=1)


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
    claimed: datetime | None = None,
    departed: bool = False,
    no_work: bool = False,
) -> PairState:
    """A stalled, active, reachable pair unless told otherwise; ``claimed`` is its latest claim."""
    return PairState(
        endpoint_id=endpoint_id,
        queue=queue,
        oldest=None if no_work else (oldest if oldest is not None else todo()),
        endpoint_active=active,
        has_receiver=receiver,
        latest_claim=claimed,
        named_departed=departed,
    )


def row(
    nudges: int,
    last_nudged_at: datetime,
    *,
    endpoint_id: str = "ep",
    queue: str = "lane",
    named: str | None = "t1",
    progressed_at: datetime | None = None,
) -> LedgerRow:
    """A ledger row of the default pair, naming t1 (None: a row an older build charged)."""
    return LedgerRow(
        endpoint_id=endpoint_id,
        queue=queue,
        nudges=nudges,
        last_nudged_at=last_nudged_at,
        named_todo=named,
        progressed_at=progressed_at,
    )


def charged(number: int, charged_at: datetime) -> Nudge:
    """A nudge of the default pair naming t1, as its charge wrote it."""
    return Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=number, charged_at=charged_at)


# -- candidacy ----------------------------------------------------------------


def test_threshold_is_strict() -> None:
    """A todo created exactly the threshold ago is fresh; a microsecond older is stalled."""
    at_threshold = pair(oldest=todo(NOW - POLICY.threshold))
    past_threshold = pair(oldest=todo(NOW - POLICY.threshold - US))

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

    assert Drain() == decide(drained, row(POLICY.cap, T0), NOW, POLICY)


def test_no_work_drains_a_row_with_progress() -> None:
    """A drained pair's row is deleted, not reset, whatever progress it shows or kept."""
    progressed = pair(no_work=True, claimed=NOW, departed=True)

    assert Drain() == decide(progressed, row(2, T0, progressed_at=T0 + minutes(1)), NOW, POLICY)


# -- pacing ---------------------------------------------------------------------


def test_wait_names_the_due_time() -> None:
    """A candidate inside its backoff waits until last nudge + the next step."""
    ledger = row(2, NOW - minutes(1))

    assert Wait(due_at=NOW - minutes(1) + POLICY.backoff[1]) == decide(pair(), ledger, NOW, POLICY)


def test_charge_exactly_at_due_time() -> None:
    """At the due instant itself the next nudge is charged."""
    ledger = row(1, NOW - POLICY.backoff[0])

    assert Charge(number=2, todo=todo()) == decide(pair(), ledger, NOW, POLICY)
    assert Wait(due_at=NOW) == decide(pair(), ledger, NOW - US, POLICY)


def test_capped_after_cap_nudges() -> None:
    """After cap nudges without progress the pair is capped, however long it waits."""
    ledger = row(POLICY.cap, T0)

    assert Capped(nudges=POLICY.cap) == decide(pair(), ledger, T0 + timedelta(days=30), POLICY)


def test_next_due_at() -> None:
    """next_due_at is last nudge + the next step, and None once capped."""
    assert T0 + POLICY.backoff[0] == next_due_at(row(1, T0), POLICY)
    assert T0 + POLICY.backoff[-1] == next_due_at(row(POLICY.cap - 1, T0), POLICY)
    assert None is next_due_at(row(POLICY.cap, T0), POLICY)
    assert None is next_due_at(row(POLICY.cap + 4, T0), POLICY)


def test_next_due_at_with_a_longer_cap_repeats_the_last_step() -> None:
    """A policy whose cap outruns the schedule keeps the last step."""
    policy = PacingPolicy(cap=len(POLICY.backoff) + 4)

    assert T0 + POLICY.backoff[-1] == next_due_at(row(len(POLICY.backoff) + 2, T0), policy)


def test_charge_row() -> None:
    """A committed charge leaves a row with its number, its stamp and the todo it named."""
    nudge = Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=3, charged_at=NOW)

    assert row(3, NOW, named="t1") == charge_row(nudge)


def test_charge_row_answers_the_progress_a_reset_kept() -> None:
    """A charge's row keeps no progress: the nudge it records answered it."""
    nudge = Nudge(endpoint_id="ep", queue="lane", todo=todo(todo_id="t2"), number=1, charged_at=NOW)

    assert (None, "t2") == (charge_row(nudge).progressed_at, charge_row(nudge).named_todo)


def test_is_due_is_a_charge_decision() -> None:
    """is_due holds where decide charges (no row, progress, a step over) and nowhere else."""
    waiting = row(2, NOW - minutes(1))

    assert [True, True, True, False, False, False] == [
        is_due(pair(), None, NOW, POLICY),
        is_due(pair(claimed=NOW), waiting, NOW, POLICY),
        is_due(pair(), row(1, NOW - POLICY.backoff[0]), NOW, POLICY),
        is_due(pair(), waiting, NOW, POLICY),
        is_due(pair(), row(POLICY.cap, T0), NOW, POLICY),
        is_due(pair(active=False), None, NOW, POLICY),
    ]


def test_charge_order_is_spent_then_oldest_work_then_ids() -> None:
    """charge_order sorts by nudges spent, then the oldest work, then endpoint_id and queue."""
    keys = [
        charge_order(1, todo(T0 - minutes(9)), "a", "q"),
        charge_order(0, todo(T0), "b", "q"),
        charge_order(0, todo(T0), "a", "z"),
        charge_order(0, todo(T0 - US), "z", "z"),
    ]

    assert (0, T0, "b", "q") == keys[1]
    assert [keys[3], keys[2], keys[1], keys[0]] == sorted(keys)


# -- progress, read two ways ----------------------------------------------------------


def test_latest_claim_is_the_latest_stamp_of_any_todo() -> None:
    """latest_claim is the latest claimed_at among the pair's todos, never-claimed ones aside."""
    assert NOW == latest_claim([T0, None, NOW, NOW - US])


def test_latest_claim_of_todos_never_claimed_is_none() -> None:
    """With no claimed_at among the pair's todos (or no todos) there is no latest claim."""
    assert (None, None) == (latest_claim([None, None]), latest_claim([]))


@pytest.mark.parametrize("after", [US, minutes(1), timedelta(days=1)], ids=["1us", "1m", "1d"])
def test_a_claim_stamped_after_the_last_nudge_is_progress(after: timedelta) -> None:
    """A claim stamped after the row's last nudge is progress: nudge 1 again, at once."""
    ledger = row(POLICY.cap - 1, NOW - minutes(1))
    claimed = pair(claimed=ledger.last_nudged_at + after)

    assert True is made_progress(claimed, ledger)
    assert 0 == effective_nudges(claimed, ledger)
    assert Charge(number=1, todo=todo()) == decide(claimed, ledger, NOW, POLICY)


@pytest.mark.parametrize("before", [timedelta(0), US, minutes(10)], ids=["at", "1us", "10m"])
def test_a_claim_stamped_at_or_before_the_last_nudge_is_not_progress(before: timedelta) -> None:
    """A claim stamped at or before the last nudge is not progress: the pair keeps backing off."""
    ledger = row(2, NOW - minutes(1))
    claimed = pair(claimed=ledger.last_nudged_at - before)

    assert False is made_progress(claimed, ledger)
    assert 2 == effective_nudges(claimed, ledger)
    assert Wait(due_at=ledger.last_nudged_at + POLICY.backoff[1]) == decide(
        claimed, ledger, NOW, POLICY
    )


def test_a_claim_before_the_last_nudge_leaves_a_capped_pair_capped() -> None:
    """A capped pair whose latest claim is older than its last nudge stays capped."""
    ledger = row(POLICY.cap, NOW - minutes(10))

    assert Capped(nudges=POLICY.cap) == decide(pair(claimed=T0), ledger, NOW, POLICY)


def test_progress_lifts_a_capped_pair() -> None:
    """A capped pair with a claim after its last nudge is charged nudge 1 again."""
    ledger = row(POLICY.cap, T0 + minutes(3))
    progressed = pair(claimed=T0 + minutes(4))

    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_the_named_todo_departed_is_progress() -> None:
    """The todo the last nudge named no longer pending is progress, though no stamp says so."""
    ledger = row(POLICY.cap, NOW - minutes(1))
    # t1 was claimed by a host whose clock is behind, or deleted, or moved: t2 is the work now.
    departed = pair(oldest=todo(todo_id="t2"), claimed=NOW - minutes(10), departed=True)

    assert True is made_progress(departed, ledger)
    assert Charge(number=1, todo=todo(todo_id="t2")) == decide(departed, ledger, NOW, POLICY)


def test_the_named_todo_still_pending_is_not_progress() -> None:
    """With the named todo still pending and no later claim, a capped pair stays capped."""
    ledger = row(POLICY.cap, NOW - minutes(1))
    stays = pair(claimed=NOW - minutes(10), departed=False)

    assert False is made_progress(stays, ledger)
    assert Capped(nudges=POLICY.cap) == decide(stays, ledger, NOW, POLICY)


def test_a_claim_that_spanned_the_charge_is_progress_only_on_the_named_todo() -> None:
    """A claim stamped before the charge it committed after counts if it took the named todo."""
    ledger = row(2, NOW - minutes(1))
    spanned = NOW - minutes(1) - US

    assert True is made_progress(pair(claimed=spanned, departed=True), ledger)
    assert False is made_progress(pair(claimed=spanned, departed=False), ledger)


@pytest.mark.parametrize("pending", [(), ("t2",), ("t2", "t3")], ids=repr)
def test_has_departed_when_the_named_todo_is_not_pending_in_the_pair(
    pending: tuple[str, ...],
) -> None:
    """A named todo absent from the pair's pending ids (claimed, done, deleted, moved) departed."""
    assert True is has_departed(row(1, T0, named="t1"), pending)


@pytest.mark.parametrize("pending", [("t1",), ("t1", "t2")], ids=repr)
def test_has_not_departed_while_the_named_todo_is_pending(pending: tuple[str, ...]) -> None:
    """A named todo still among the pair's pending ids has not departed."""
    assert False is has_departed(row(1, T0, named="t1"), pending)


def test_nothing_departs_without_a_row() -> None:
    """With no ledger row there is no named todo to depart."""
    assert False is has_departed(None, set())


def test_a_change_of_gate_is_not_a_departure() -> None:
    """The named todo failing the gate now is still pending: no departure, no progress."""
    ledger = row(2, NOW - minutes(1), named="t1")
    # t1's delivery is no longer verified: t1 stays pending (so among the pending ids) but
    # the work is t2 now.
    still_pending = has_departed(ledger, {"t1", "t2"})
    regated = pair(oldest=todo(todo_id="t2"), departed=still_pending)

    assert False is still_pending
    assert False is made_progress(regated, ledger)
    assert Wait(due_at=ledger.last_nudged_at + POLICY.backoff[1]) == decide(
        regated, ledger, NOW, POLICY
    )


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"active": False}, IdleReason.ENDPOINT_INACTIVE),
        ({"receiver": False}, IdleReason.NO_RECEIVER),
    ],
)
def test_a_change_of_endpoint_or_hooks_is_not_progress(
    state: dict[str, bool], reason: IdleReason
) -> None:
    """An endpoint paused or a hook gone leaves the row as it is (idle), and back again it waits."""
    ledger = row(2, NOW - minutes(1))

    assert Idle(reason=reason) == decide(pair(**state), ledger, NOW, POLICY)  # type: ignore[arg-type]
    assert False is made_progress(pair(**state), ledger)  # type: ignore[arg-type]
    assert isinstance(decide(pair(), ledger, NOW, POLICY), Wait)


def test_progress_without_a_row_is_not_progress() -> None:
    """With no ledger row there is nothing to progress past; the count is zero."""
    claimed = pair(claimed=T0, departed=True)

    assert False is made_progress(claimed, None)
    assert 0 == effective_nudges(claimed, None)


# -- rows an older build charged -------------------------------------------------------


@pytest.mark.parametrize("pending", [(), ("t1",), ("t2",)], ids=repr)
def test_an_old_build_row_never_departs(pending: tuple[str, ...]) -> None:
    """A row that names no todo (an older build charged it) never departs, whatever is pending."""
    assert False is has_departed(row(2, T0, named=None), pending)


@pytest.mark.parametrize(
    ("claim_after", "progressed"),
    [(US, True), (minutes(5), True), (timedelta(0), False), (-minutes(1), False)],
    ids=["1us after", "5m after", "at", "1m before"],
)
def test_an_old_build_row_reads_progress_by_timestamps_alone(
    claim_after: timedelta, progressed: bool
) -> None:
    """An old-build row's progress is a claim stamped after its last nudge, and only that."""
    legacy = row(POLICY.cap, NOW - minutes(10), named=None)
    state = pair(claimed=legacy.last_nudged_at + claim_after, departed=has_departed(legacy, set()))

    assert progressed is made_progress(state, legacy)
    assert (Charge(number=1, todo=todo()) if progressed else Capped(nudges=POLICY.cap)) == (
        decide(state, legacy, NOW, POLICY)
    )


def test_an_old_build_row_is_charged_a_row_that_names_its_todo() -> None:
    """The first charge of an old-build row writes a row naming the todo it woke."""
    legacy = row(1, NOW - POLICY.backoff[0], named=None)

    [nudge] = plan_tick([pair()], {legacy.key: legacy}, NOW, POLICY).charges

    assert row(2, NOW, named="t1") == charge_row(nudge)


# -- progress a reset keeps ------------------------------------------------------------


def test_reset_row_keeps_the_stamp_and_the_named_todo_and_spends_nothing() -> None:
    """reset_row sets the count to 0 and keeps the progress at now; stamp and named todo stay."""
    ledger = row(4, NOW - minutes(30), named="t7")

    assert row(0, NOW - minutes(30), named="t7", progressed_at=NOW) == reset_row(ledger, NOW)


def test_reset_row_keeps_progress_already_kept() -> None:
    """A row that already keeps progress keeps its first progressed_at through another reset."""
    kept = row(0, T0, progressed_at=NOW - minutes(5))

    assert kept == reset_row(kept, NOW)


def test_progress_kept_by_a_reset_counts_with_nothing_else_in_sight() -> None:
    """A row keeping progress starts over though no claim is later and its named todo is pending."""
    kept = row(0, NOW - minutes(10), progressed_at=NOW - minutes(5))

    assert True is made_progress(pair(), kept)
    assert True is starts_over(pair(), kept)
    assert Charge(number=1, todo=todo()) == decide(pair(), kept, NOW, POLICY)


def test_progress_kept_by_a_reset_counts_until_a_charge_answers_it() -> None:
    """The charge that answers kept progress consumes it: the same pair then backs off."""
    kept = row(0, NOW - minutes(10), progressed_at=NOW - minutes(5))

    [nudge] = plan_tick([pair()], {kept.key: kept}, NOW, POLICY).charges
    answered = charge_row(nudge)

    assert (1, NOW) == (nudge.number, nudge.charged_at)
    assert False is made_progress(pair(), answered)
    assert Wait(due_at=NOW + POLICY.backoff[0]) == decide(pair(), answered, NOW + US, POLICY)


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"active": False}, IdleReason.ENDPOINT_INACTIVE),
        ({"receiver": False}, IdleReason.NO_RECEIVER),
        ({"oldest": todo(NOW - minutes(1))}, IdleReason.FRESH),
    ],
)
def test_progress_kept_by_a_reset_outlasts_ticks_that_cannot_charge(
    state: dict[str, object], reason: IdleReason
) -> None:
    """A row keeping progress is reset again while not a candidate, its first progress kept."""
    kept = row(0, NOW - minutes(10), progressed_at=NOW - minutes(5))
    idle = pair(**state)  # type: ignore[arg-type]

    plan = plan_tick([idle], {kept.key: kept}, NOW, POLICY)

    assert Reset(reason=reason) == decide(idle, kept, NOW, POLICY)
    assert ((), (kept.key,)) == (plan.charges, plan.reset)
    assert kept == reset_row(kept, NOW)


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
    """A pair with progress that is no candidate keeps its row reset; without progress, idle."""
    ledger = row(POLICY.cap - 1, NOW - minutes(5))
    progressed = pair(claimed=NOW - minutes(1), **state)  # type: ignore[arg-type]

    plan = plan_tick([progressed], {ledger.key: ledger}, NOW, POLICY)

    assert Reset(reason=reason) == decide(progressed, ledger, NOW, POLICY)
    assert ((), (), (ledger.key,)) == (plan.charges, plan.drained, plan.reset)
    assert Idle(reason=reason) == decide(pair(**state), ledger, NOW, POLICY)  # type: ignore[arg-type]
    assert () == plan_tick([pair(**state)], {ledger.key: ledger}, NOW, POLICY).reset  # type: ignore[arg-type]


def test_a_reset_row_is_charged_nudge_one_once_the_pair_is_a_candidate_again() -> None:
    """Progress seen while paused is kept by the reset and answered by nudge 1 on resuming."""
    ledger = row(POLICY.cap, NOW - minutes(30))
    # The named todo was claimed and done while the endpoint was paused.
    paused = pair(active=False, oldest=todo(todo_id="t2"), departed=True)

    kept = reset_row(ledger, NOW)
    resumed = pair(oldest=todo(todo_id="t2"), departed=True)
    later = NOW + minutes(1)
    [nudge] = plan_tick([resumed], {kept.key: kept}, later, POLICY).charges

    assert (kept.key,) == plan_tick([paused], {ledger.key: ledger}, NOW, POLICY).reset
    assert (1, later, "t2") == (nudge.number, nudge.charged_at, nudge.todo.id)
    assert False is made_progress(pair(oldest=todo(todo_id="t2")), charge_row(nudge))


# -- the charge stamp: a claim ahead of now is consumed once -----------------------------


def test_charge_stamp_takes_a_claim_later_than_now() -> None:
    """A claim stamped after now (a host clock ahead) becomes the stamp."""
    assert NOW + US == charge_stamp(pair(claimed=NOW + US), NOW)


def test_charge_stamp_is_now_for_an_earlier_claim() -> None:
    """A claim before now leaves the stamp at now."""
    assert NOW == charge_stamp(pair(claimed=NOW - minutes(1)), NOW)


def test_charge_stamp_is_now_for_a_claim_at_now() -> None:
    """A claim at exactly now leaves the stamp at now."""
    assert NOW == charge_stamp(pair(claimed=NOW), NOW)


def test_charge_stamp_is_now_without_a_claim() -> None:
    """A pair never claimed is stamped with now."""
    assert NOW == charge_stamp(pair(), NOW)


def test_a_progress_charge_is_stamped_with_a_claim_later_than_now() -> None:
    """A row's progress claim stamped after now is nudge 1, stamped with that claim."""
    progressed = pair(claimed=NOW + US)
    rows = {("ep", "lane"): row(3, NOW - minutes(1))}

    [nudge] = plan_tick([progressed], rows, NOW, POLICY).charges

    assert Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=1, charged_at=NOW + US) == (
        nudge
    )


def test_plan_tick_stamps_a_later_claim() -> None:
    """A first charge of a pair claimed after now is stamped with that claim, not now."""
    claimed_later = pair(claimed=NOW + US)

    [nudge] = plan_tick([claimed_later], {}, NOW, POLICY).charges

    assert Nudge(endpoint_id="ep", queue="lane", todo=todo(), number=1, charged_at=NOW + US) == (
        nudge
    )


def test_a_claim_stamped_ahead_of_now_is_consumed_by_the_charge() -> None:
    """The same claim ahead of now is not progress after the charge; the backoff runs from it."""
    ahead = NOW + minutes(10)
    ledger = row(3, NOW - minutes(30))
    claimed = pair(claimed=ahead)

    [nudge] = plan_tick([claimed], {ledger.key: ledger}, NOW, POLICY).charges
    answered = charge_row(nudge)

    assert (1, ahead) == (nudge.number, nudge.charged_at)
    assert False is made_progress(claimed, answered)
    assert Wait(due_at=ahead + POLICY.backoff[0]) == decide(
        claimed, answered, NOW + minutes(1), POLICY
    )
    # Stamped with now instead, the same claim would be progress again.
    assert True is made_progress(claimed, attrs.evolve(answered, last_nudged_at=NOW))


def test_a_claim_stamped_ahead_of_now_counts_once_across_a_reset() -> None:
    """A claim ahead of now seen while paused is kept by the reset, then consumed by one charge."""
    ahead = NOW + minutes(10)
    ledger = row(2, NOW - minutes(30))
    paused = pair(active=False, claimed=ahead)

    plan = plan_tick([paused], {ledger.key: ledger}, NOW, POLICY)
    kept = reset_row(ledger, NOW)
    resumed = pair(claimed=ahead)
    [nudge] = plan_tick([resumed], {kept.key: kept}, NOW + minutes(1), POLICY).charges
    answered = charge_row(nudge)
    after = plan_tick([resumed], {answered.key: answered}, NOW + minutes(2), POLICY)

    assert ((), (ledger.key,)) == (plan.charges, plan.reset)
    assert (1, ahead) == (nudge.number, nudge.charged_at)
    assert False is made_progress(resumed, answered)
    assert ((), ()) == (after.charges, after.reset)


def test_a_claim_consumed_by_a_charge_is_not_progress_again() -> None:
    """After a later-claim charge consumed that claim, the same history waits from the claim."""
    claimed_later = pair(claimed=NOW + US)
    [nudge] = plan_tick([claimed_later], {}, NOW, POLICY).charges

    later = NOW + minutes(1)

    assert False is made_progress(claimed_later, charge_row(nudge))
    assert Wait(due_at=NOW + US + POLICY.backoff[0]) == decide(
        claimed_later, charge_row(nudge), later, POLICY
    )


# -- refunds ----------------------------------------------------------------------------


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
    assert None is refunded_row(row(2, NOW + POLICY.backoff[0]), charged(1, NOW))


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


@pytest.mark.parametrize("number", [1, 3])
def test_refunded_row_refuses_a_reset_row(number: int) -> None:
    """A row reset since a nudge's charge (count 0, progress kept) is not refunded by it."""
    nudge = charged(number, NOW)
    written = charge_row(nudge)

    assert row(number - 1, NOW) == refunded_row(written, nudge)
    assert None is refunded_row(reset_row(written, NOW + minutes(1)), nudge)


# Charges pinned to one claim stamped ahead of the clock share (number, stamp): the
# todo each names is what tells them apart.


def test_a_late_refund_never_undoes_a_later_charge_pinned_to_the_same_claim() -> None:
    """Two nudge-1 charges pinned to one claim ahead: the first one's refund spares the next."""
    ahead = NOW + minutes(30)
    ledger = row(1, NOW - minutes(5))
    [first] = plan_tick([pair(claimed=ahead)], {ledger.key: ledger}, NOW, POLICY).charges
    # Then t1, the todo it named, departs (claimed on a clock behind): progress again.
    moved_on = pair(oldest=todo(todo_id="t2"), claimed=ahead, departed=True)
    written = {ledger.key: charge_row(first)}
    [second] = plan_tick([moved_on], written, NOW + minutes(1), POLICY).charges

    assert None is refunded_row(charge_row(second), first)


def test_a_late_refund_never_undoes_a_charge_after_a_reset_pinned_to_the_same_claim() -> None:
    """A charge, a reset, a charge again at one claim ahead: the first's refund spares the last."""
    ahead = NOW + minutes(30)
    ledger = row(1, NOW - minutes(5))
    [first] = plan_tick([pair(claimed=ahead)], {ledger.key: ledger}, NOW, POLICY).charges
    # The named todo departs while the endpoint is paused: the next tick resets the row,
    # and the one after, the endpoint resumed, charges nudge 1 again.
    kept = reset_row(charge_row(first), NOW + minutes(1))
    resumed = pair(oldest=todo(todo_id="t2"), claimed=ahead, departed=True)
    [again] = plan_tick([resumed], {kept.key: kept}, NOW + minutes(2), POLICY).charges

    assert None is refunded_row(charge_row(again), first)


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
    """A row of 0 nudges with no progress kept counts no nudge spent, yet does not start over."""
    ledger = row(0, NOW - minutes(1))

    assert False is starts_over(pair(), ledger)
    assert 0 == effective_nudges(pair(), ledger)


def test_progress_after_a_refund_starts_over_at_once() -> None:
    """A claim after a refunded nudge's stamp is progress: nudge 1 at once, no wait."""
    ledger = row(0, NOW - minutes(1))
    progressed = pair(claimed=NOW - minutes(1) + US)

    assert True is starts_over(progressed, ledger)
    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW, POLICY)


def test_starts_over_without_a_row() -> None:
    """A pair with no ledger row starts over."""
    assert True is starts_over(pair(), None)


# -- the tick limit and resets -----------------------------------------------------------


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
    ("progress", "ledger"),
    [
        ({"claimed": NOW - minutes(1)}, row(4, NOW - minutes(2), endpoint_id="b")),
        ({"departed": True}, row(4, NOW - minutes(2), endpoint_id="b")),
        ({}, row(0, NOW - minutes(2), endpoint_id="b", progressed_at=NOW - minutes(1))),
    ],
    ids=["claim", "departure", "kept"],
)
def test_a_progressed_pair_held_back_by_the_tick_limit_is_reset(
    progress: dict[str, object], ledger: LedgerRow
) -> None:
    """Due at nudge 1 but beyond the tick limit, a pair's row is reset and charged first next."""
    policy = PacingPolicy(tick_limit=1)
    first = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    held = pair(endpoint_id="b", **progress)  # type: ignore[arg-type]
    rows = {ledger.key: ledger}

    plan = plan_tick([first, held], rows, NOW, policy)
    rows = {n.key: charge_row(n) for n in plan.charges} | {
        key: reset_row(rows[key], NOW) for key in plan.reset
    }
    then = NOW + policy.backoff[0]
    # What showed the progress may be gone by then (a todo deleted or unstamped): the row keeps it.
    after = plan_tick([first, pair(endpoint_id="b")], rows, then, policy)

    assert ([("a", 1)], (("b", "lane"),), 1) == (
        [(n.endpoint_id, n.number) for n in plan.charges],
        plan.reset,
        plan.held_back,
    )
    assert [("b", 1)] == [(n.endpoint_id, n.number) for n in after.charges]


def test_a_pair_held_back_without_a_row_is_not_reset() -> None:
    """A first nudge held back by the tick limit has no row to reset: it is simply due next tick."""
    policy = PacingPolicy(tick_limit=1)
    board = [pair(endpoint_id="a", oldest=todo(T0 - US)), pair(endpoint_id="b", claimed=NOW)]

    plan = plan_tick(board, {}, NOW, policy)

    assert ([("a", 1)], (), 1) == (
        [(n.endpoint_id, n.number) for n in plan.charges],
        plan.reset,
        plan.held_back,
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
        lambda naive: row(0, T0, progressed_at=naive),
        lambda naive: pair(claimed=naive),
        lambda naive: Nudge(endpoint_id="e", queue="q", todo=todo(), number=1, charged_at=naive),
    ],
    ids=[
        "todo.created_at",
        "row.last_nudged_at",
        "row.progressed_at",
        "pair.latest_claim",
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
    progressed_at_four = pair(endpoint_id="b", claimed=NOW - minutes(1))
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
    board = [pair(endpoint_id=f"ep{i}") for i in range(POLICY.tick_limit + 3)]
    board.append(pair(endpoint_id="waiting"))
    board.append(pair(endpoint_id="fresh", oldest=todo(NOW)))
    rows = {("waiting", "lane"): row(1, NOW, endpoint_id="waiting")}

    plan = plan_tick(board, rows, NOW, POLICY)

    assert POLICY.tick_limit == len(plan.charges)
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


def test_the_work_is_the_oldest_pending_todo_ties_by_id_in_code_point_order() -> None:
    """work_of: the earliest created_at, then the smaller id by code point ('B' < 'a')."""
    early, later = T0, T0 + timedelta(seconds=1)
    todos = [
        TodoRef(id="a", created_at=early),
        TodoRef(id="B", created_at=early),
        TodoRef(id="0", created_at=later),
    ]

    assert TodoRef(id="B", created_at=early) == work_of(todos)
    assert work_of([]) is None


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (datetime.min.replace(tzinfo=UTC), False),
        (datetime.min.replace(tzinfo=UTC) + timedelta(microseconds=1), True),
        (T0, True),
        (datetime.max.replace(tzinfo=UTC) - timedelta(microseconds=1), True),
        (datetime.max.replace(tzinfo=UTC), False),
        (datetime(1, 1, 1, 4, tzinfo=timezone(timedelta(hours=5))), False),
    ],
)
def test_readable_excludes_the_ends_a_driver_writes_as_infinities(
    at: datetime, expected: bool
) -> None:
    """The two ends of a Python datetime's range stand for the infinities: not readable."""
    assert expected == readable(at)


def test_work_is_the_oldest_todo_created_at_a_readable_instant() -> None:
    """A todo created at an end of the range is not work; the next oldest is."""
    first = datetime.min.replace(tzinfo=UTC)
    todos = [TodoRef(id="odd", created_at=first), TodoRef(id="ok", created_at=T0)]

    assert TodoRef(id="ok", created_at=T0) == work_of(todos)


def test_latest_claim_skips_a_claim_stamped_at_an_end_of_the_range() -> None:
    """A claim stamped at an end of the range is not read; the latest readable one is."""
    last = datetime.max.replace(tzinfo=UTC)

    assert T0 == latest_claim([T0, last, None])


def test_next_due_at_past_the_range_is_its_last_instant() -> None:
    """A backoff that would end past year 9999 ends at the range's last instant, never raises."""
    late = datetime(9999, 12, 31, 23, 58, tzinfo=UTC)

    assert datetime.max.replace(tzinfo=UTC) == next_due_at(row(1, late), POLICY)
