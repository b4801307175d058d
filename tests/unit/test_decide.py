"""The core's rules on plain values: the predicates, decide and its parts, and plan_tick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from stall_core import (
    CLAIMS_LOOKBACK,
    FULL_PASS_INTERVAL,
    HELD_RETRY_FRACTION,
    NAMES_MAX_BYTES,
    QUARANTINE_QUEUE,
    Capped,
    Charge,
    Clear,
    Decision,
    Idle,
    IdleReason,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    Reset,
    TodoRef,
    Wait,
    capped,
    charge_order,
    charge_row,
    claims_read,
    claims_window,
    covers,
    decide,
    effective_nudges,
    endpoint_active,
    full_pass_due,
    has_departed,
    has_receiver,
    is_candidate,
    is_due,
    is_quarantine,
    is_receiver,
    latest_claim,
    made_progress,
    names_fit,
    next_due_at,
    next_sweep_in,
    passes_gate,
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
FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)


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


def charged(number: int, charged_at: datetime, todo_id: str = "t1") -> Nudge:
    """A nudge of the default pair, as its charge wrote it."""
    return Nudge(
        endpoint_id="ep",
        queue="lane",
        todo=todo(todo_id=todo_id),
        number=number,
        charged_at=charged_at,
    )


def charges(
    pairs: list[PairState], rows: dict[tuple[str, str], LedgerRow], at: datetime
) -> list[tuple[str, int, str, datetime]]:
    """plan_tick's charges at ``at`` as (endpoint, number, named todo, stamp)."""
    plan = plan_tick(pairs, rows, at, POLICY)
    return [(n.endpoint_id, n.number, n.todo.id, n.charged_at) for n in plan.charges]


# -- the host's rules -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("delivery_id", "verified", "passes"),
    [(None, None, True), ("d", True, True), ("d", False, False), ("d", None, False)],
    ids=["no delivery", "verified", "unverified", "delivery row missing"],
)
def test_passes_gate(delivery_id: str | None, verified: bool | None, passes: bool) -> None:
    """The sender gate: no delivery or a verified one; a missing delivery row fails closed."""
    assert passes is passes_gate(delivery_id, verified)


@pytest.mark.parametrize(
    ("hook", "covered"),
    [
        (("ep", None), True),
        (("ep", ("lane", "x")), True),
        (("ep", ("x",)), False),
        (("ep", ()), False),
        (("other", None), False),
    ],
    ids=["all queues", "listed", "not listed", "empty filter", "another endpoint"],
)
def test_covers_reads_the_endpoint_and_the_queue_filter(
    hook: tuple[str, tuple[str, ...] | None], covered: bool
) -> None:
    """A hook covers its own endpoint's queues: all of them (NULL), or those its filter lists."""
    endpoint, queues = hook

    assert covered is covers(endpoint, queues, "ep", "lane")
    assert covered is is_receiver(True, endpoint, queues, "ep", "lane")
    assert False is is_receiver(False, endpoint, queues, "ep", "lane")


def test_a_receiver_is_an_enabled_covering_hook() -> None:
    """has_receiver needs one hook both enabled and covering; none, or a disabled one, is not."""
    assert True is has_receiver([(False, "ep", None), (True, "ep", ("lane",))], "ep", "lane")
    assert False is has_receiver([(False, "ep", None), (True, "ep", ("x",))], "ep", "lane")
    assert False is has_receiver([], "ep", "lane")


@pytest.mark.parametrize(
    ("state", "active"), [("active", True), ("paused", False), ("disabled", False), (None, False)]
)
def test_only_an_active_endpoint_is_nudged(state: str | None, active: bool) -> None:
    """endpoint_active: the state 'active'; a paused, disabled or missing endpoint is not."""
    assert active is endpoint_active(state)


def test_the_quarantine_queue_is_never_work() -> None:
    """Quarantine holds deliveries back: its oldest todo is no work, other queues' is."""
    held = [todo(T0 - timedelta(days=365))]

    assert (True, False) == (is_quarantine(QUARANTINE_QUEUE), is_quarantine("lane"))
    assert None is work_of(held, endpoint_id="ep", queue=QUARANTINE_QUEUE)
    assert held[0] == work_of(held, endpoint_id="ep", queue="lane")


@pytest.mark.parametrize(
    ("endpoint_id", "queue", "fit"),
    [
        ("e" * 1000, "q" * 1000, True),
        ("e" * 1000, "q" * 1001, False),
        ("é" * 500, "q" * 1000, True),  # 1,000 bytes of UTF-8
        ("é" * 500, "q" * 1001, False),
        ("队" * 666, "q" * 2, True),  # 1,998 bytes and 2
        ("队" * 666, "q" * 3, False),
    ],
    ids=["2000 ASCII", "2001 ASCII", "2000 two-byte", "2001 two-byte", "2000 three-byte", "2001"],
)
def test_names_fit_counts_bytes_of_utf8(endpoint_id: str, queue: str, fit: bool) -> None:
    """A pair's names fit when endpoint id and queue take at most 2,000 bytes of UTF-8 together."""
    assert 2000 == NAMES_MAX_BYTES
    assert fit is names_fit(endpoint_id, queue)
    assert (todo() if fit else None) == work_of([todo()], endpoint_id=endpoint_id, queue=queue)


def test_the_work_is_the_oldest_readable_todo_ties_by_id_in_code_point_order() -> None:
    """work_of: the earliest readable created_at, then the smaller id by code point ('B' < 'a')."""
    todos = [
        TodoRef(id="odd", created_at=FIRST),
        TodoRef(id="a", created_at=T0),
        TodoRef(id="B", created_at=T0),
        TodoRef(id="0", created_at=T0 + US),
    ]

    assert TodoRef(id="B", created_at=T0) == work_of(todos, endpoint_id="ep", queue="lane")
    assert None is work_of([], endpoint_id="ep", queue="lane")


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (FIRST, False),
        (FIRST + US, True),
        (LAST - US, True),
        (LAST, False),
        (datetime(1, 1, 1, 4, tzinfo=timezone(timedelta(hours=5))), False),
    ],
)
def test_readable_excludes_the_ends_a_driver_writes_as_infinities(
    at: datetime, expected: bool
) -> None:
    """The two ends of a Python datetime's range stand for the infinities: not readable."""
    assert expected == readable(at)


def test_claims_read_are_claimed_todos_with_readable_stamps_in_the_window() -> None:
    """Pending (requeued) todos, unreadable stamps and stamps at or before the window: not read."""
    todos = [
        ("a", "done", T0),
        ("b", "claimed", None),
        ("c", "pending", NOW + minutes(1)),  # requeued: pending again, not a claim
        ("d", "claimed", NOW),
        ("e", "failed", NOW - US),
        ("f", "done", LAST),
    ]

    assert {("a", T0), ("d", NOW), ("e", NOW - US)} == claims_read(todos, T0 - US)
    assert set() == claims_read(todos, NOW)
    assert NOW == latest_claim(todos, T0 - US, set())
    assert None is latest_claim(todos, T0 - US, {("a", T0), ("d", NOW), ("e", NOW - US)})
    assert None is latest_claim([], FIRST, set())


@pytest.mark.parametrize(
    ("judged_at", "window"),
    [
        (NOW - minutes(5), NOW - minutes(6)),
        (None, NOW - minutes(1)),
        (NOW + minutes(5), NOW - minutes(1)),  # a tick later than now: a clock gone back
        (FIRST + US, FIRST + US),  # never the first instant: PostgreSQL's -infinity
    ],
    ids=["last tick", "no tick yet", "tick ahead", "range's start"],
)
def test_claims_window_starts_a_lookback_before_the_last_tick(
    judged_at: datetime | None, window: datetime
) -> None:
    """The window starts CLAIMS_LOOKBACK before the last judging tick, or before now."""
    assert minutes(1) == CLAIMS_LOOKBACK
    assert window == claims_window(judged_at, NOW)


@pytest.mark.parametrize(
    ("ledger", "pending", "departed"),
    [
        (row(1, T0), (), True),
        (row(1, T0), ("t2", "t3"), True),
        (row(1, T0), ("t1", "t2"), False),
        (row(1, T0, named=None), (), False),  # an older build's row names no todo
        (None, (), False),
    ],
    ids=["gone", "others pending", "still pending", "old build row", "no row"],
)
def test_has_departed_when_the_named_todo_is_not_pending_in_the_pair(
    ledger: LedgerRow | None, pending: tuple[str, ...], departed: bool
) -> None:
    """The named todo absent from the pending ids (claimed, done, deleted, moved) departed."""
    assert departed is has_departed(ledger, pending)


# -- candidacy --------------------------------------------------------------------------


def test_threshold_is_strict() -> None:
    """Exactly the threshold old is fresh, with or without a row; a microsecond older is due."""
    at_threshold = pair(oldest=todo(NOW - POLICY.threshold))
    past_threshold = pair(oldest=todo(NOW - POLICY.threshold - US, title="work"))

    assert False is is_candidate(at_threshold, NOW, POLICY)
    assert Idle(reason=IdleReason.FRESH) == decide(at_threshold, row(2, T0), NOW, POLICY)
    assert True is is_candidate(past_threshold, NOW, POLICY)
    assert Charge(number=1, todo=past_threshold.oldest) == decide(  # type: ignore[arg-type]
        past_threshold, None, NOW, POLICY
    )


@pytest.mark.parametrize(
    ("state", "ledger", "decision"),
    [
        (pair(active=False), row(3, T0), Idle(reason=IdleReason.ENDPOINT_INACTIVE)),
        (pair(receiver=False), row(1, T0), Idle(reason=IdleReason.NO_RECEIVER)),
        (pair(no_work=True), None, Idle(reason=IdleReason.NO_WORK)),
        (pair(no_work=True), row(2, T0), Clear()),
        (pair(no_work=True, active=False, receiver=False), row(POLICY.cap, T0), Clear()),
        (
            pair(no_work=True, claimed=NOW, departed=True),
            row(2, T0, progressed_at=T0 + minutes(1)),
            Clear(),
        ),
    ],
    ids=["inactive", "no receiver", "no work", "row, no work", "row, idle", "row with progress"],
)
def test_a_pair_that_is_no_candidate_keeps_its_row_unless_it_has_no_work(
    state: PairState, ledger: LedgerRow | None, decision: Decision
) -> None:
    """Idle pairs keep their rows as they are; a row whose pair has no work is cleared."""
    assert decision == decide(state, ledger, NOW, POLICY)


# -- pacing -------------------------------------------------------------------------------


def test_a_candidate_waits_its_step_is_charged_at_its_end_and_falls_silent_at_the_cap() -> None:
    """Wait until last nudge + the next step, charge at that instant, capped after cap nudges."""
    ledger = row(1, NOW - POLICY.backoff[0])

    assert Wait(due_at=NOW) == decide(pair(), ledger, NOW - US, POLICY)
    assert Charge(number=2, todo=todo()) == decide(pair(), ledger, NOW, POLICY)
    assert Capped(nudges=POLICY.cap) == decide(
        pair(), row(POLICY.cap, T0), T0 + timedelta(days=30), POLICY
    )


def test_next_due_at_is_the_next_step_after_the_last_nudge_until_capped() -> None:
    """next_due_at is last nudge + the next step; None once ``capped``; the range's end at most."""
    late = datetime(9999, 12, 31, 23, 58, tzinfo=UTC)

    assert T0 + POLICY.backoff[1] == next_due_at(row(2, T0), POLICY)
    assert [False, True, True] == [capped(n, POLICY) for n in (4, 5, 9)]
    assert None is next_due_at(row(POLICY.cap, T0), POLICY)
    assert LAST == next_due_at(row(1, late), POLICY)


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


def test_charge_row_records_the_charge_and_answers_kept_progress() -> None:
    """A committed charge leaves its number, stamp and named todo, and keeps no progress."""
    nudge = charged(3, NOW, todo_id="t2")

    assert row(3, NOW, named="t2") == charge_row(nudge)


def test_charge_order_is_spent_then_oldest_work_then_ids_by_code_point() -> None:
    """charge_order sorts by nudges spent, then the oldest work, then endpoint_id, then queue."""
    keys = [
        charge_order(1, todo(T0 - minutes(9)), "a", "q"),
        charge_order(0, todo(T0), "b", "q"),
        charge_order(0, todo(T0), "a", "z"),
        charge_order(0, todo(T0), "a", "Z"),
        charge_order(0, todo(T0), "é", "a"),
        charge_order(0, todo(T0 - US), "z", "z"),
    ]

    assert (0, T0, "b", "q") == keys[1]
    assert [keys[5], keys[3], keys[2], keys[1], keys[4], keys[0]] == sorted(keys)


# -- progress, read two ways --------------------------------------------------------------


@pytest.mark.parametrize(
    "stamp",
    [NOW - minutes(20), NOW - minutes(2), NOW + timedelta(days=1)],
    ids=["before the last nudge", "just before", "ahead"],
)
def test_a_new_claim_is_progress_whatever_its_stamp(stamp: datetime) -> None:
    """A claim the last tick did not read is progress, whatever its stamp against the nudge's."""
    ledger = row(POLICY.cap, NOW - minutes(1))
    claimed = pair(claimed=stamp)

    assert (True, True, 0) == (
        made_progress(claimed, ledger),
        starts_over(claimed, ledger),
        effective_nudges(claimed, ledger),
    )
    assert Charge(number=1, todo=todo()) == decide(claimed, ledger, NOW, POLICY)


def test_a_claim_the_last_tick_read_is_not_new() -> None:
    """latest_claim leaves out what the last tick read (claims_read): counted then, not again."""
    since = NOW - minutes(2)
    charging_tick = [("t1", "claimed", NOW - minutes(1))]
    next_tick = [("t1", "done", NOW - minutes(1)), ("t2", "claimed", NOW - minutes(3))]

    read = claims_read(charging_tick, since)

    assert {("t1", NOW - minutes(1))} == read
    # t1 completed since: the same claim. t2 was claimed after that tick by a host clock
    # behind the ledger's, stamped outside the window: not read (the lookback's limit).
    assert None is latest_claim(next_tick, since, read)
    assert NOW - minutes(1) == latest_claim(next_tick, since, set())


def test_the_named_todo_departed_is_progress_though_no_stamp_says_so() -> None:
    """The named todo no longer pending is progress; still pending, a capped pair stays capped."""
    ledger = row(POLICY.cap, NOW - minutes(1))
    # t1 was claimed by a host whose clock is behind, or deleted, or moved: t2 is the work now.
    departed = pair(oldest=todo(todo_id="t2"), departed=True)
    stays = pair(departed=False)

    assert Charge(number=1, todo=todo(todo_id="t2")) == decide(departed, ledger, NOW, POLICY)
    assert Capped(nudges=POLICY.cap) == decide(stays, ledger, NOW, POLICY)


def test_a_change_of_gate_is_not_a_departure() -> None:
    """The named todo failing the gate now is still pending: no departure, no progress."""
    ledger = row(2, NOW - minutes(1), named="t1")
    # t1's delivery is no longer verified: t1 stays pending (so among the pending ids) but
    # the work is t2 now.
    regated = pair(oldest=todo(todo_id="t2"), departed=has_departed(ledger, {"t1", "t2"}))

    assert Wait(due_at=ledger.last_nudged_at + POLICY.backoff[1]) == decide(
        regated, ledger, NOW, POLICY
    )


def test_progress_without_a_row_is_not_progress() -> None:
    """With no ledger row there is nothing to progress past; the count is zero."""
    claimed = pair(claimed=T0, departed=True)

    assert (False, True, 0) == (
        made_progress(claimed, None),
        starts_over(claimed, None),
        effective_nudges(claimed, None),
    )


# -- progress a reset keeps ---------------------------------------------------------------


def test_reset_row_keeps_the_stamp_the_named_todo_and_the_first_progress() -> None:
    """reset_row: count 0, progress kept at now (or as first kept); stamp and named todo stay."""
    ledger = row(4, NOW - minutes(30), named="t7")
    kept = row(0, NOW - minutes(30), named="t7", progressed_at=NOW)

    assert kept == reset_row(ledger, NOW)
    assert kept == reset_row(kept, NOW + minutes(5))


def test_progress_kept_by_a_reset_counts_until_a_charge_answers_it() -> None:
    """A row keeping progress starts over with nothing else in sight; its charge consumes it."""
    kept = row(0, NOW - minutes(10), progressed_at=NOW - minutes(5))

    [nudge] = plan_tick([pair()], {kept.key: kept}, NOW, POLICY).charges
    answered = charge_row(nudge)

    assert (True, 1, NOW) == (made_progress(pair(), kept), nudge.number, nudge.charged_at)
    assert Wait(due_at=NOW + POLICY.backoff[0]) == decide(pair(), answered, NOW + US, POLICY)


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
    """Progress on a pair that is no candidate resets its row; without progress, idle."""
    ledger = row(POLICY.cap - 1, NOW - minutes(5))
    progressed = pair(claimed=NOW - minutes(1), **state)  # type: ignore[arg-type]

    plan = plan_tick([progressed], {ledger.key: ledger}, NOW, POLICY)

    assert Reset(reason=reason) == decide(progressed, ledger, NOW, POLICY)
    assert ((), (), (ledger.key,)) == (plan.charges, plan.cleared, plan.reset)
    assert Idle(reason=reason) == decide(pair(**state), ledger, NOW, POLICY)  # type: ignore[arg-type]


def test_progress_seen_while_paused_is_answered_by_nudge_one_on_resuming() -> None:
    """The named todo departs while paused: the reset keeps it, nudge 1 answers it on resuming."""
    ledger = row(POLICY.cap, NOW - minutes(30))
    paused = pair(active=False, oldest=todo(todo_id="t2"), departed=True)

    kept = reset_row(ledger, NOW)
    later = NOW + minutes(1)
    resumed = pair(oldest=todo(todo_id="t2"), departed=True)

    assert (kept.key,) == plan_tick([paused], {ledger.key: ledger}, NOW, POLICY).reset
    assert [("ep", 1, "t2", later)] == charges([resumed], {kept.key: kept}, later)


# -- the charge is stamped now; a claim counts once, whatever its stamp ----------------------


def test_plan_tick_stamps_a_charge_now_whatever_the_claims_say() -> None:
    """A charge is stamped now, even for a pair claimed ahead of now (a host clock ahead)."""
    [nudge] = plan_tick([pair(claimed=NOW + minutes(10))], {}, NOW, POLICY).charges

    assert row(1, NOW) == charge_row(nudge)


def test_a_claim_stamped_ahead_of_now_is_read_once() -> None:
    """A claim stamped ten minutes ahead stays in every window till then, but is new only once."""
    ahead = [("t9", "done", NOW + minutes(10))]
    first = claims_read(ahead, claims_window(None, NOW))

    assert NOW + minutes(10) == latest_claim(ahead, claims_window(None, NOW), set())
    for tick in range(1, 12):
        since = claims_window(NOW + minutes(tick - 1), NOW + minutes(tick))
        assert None is latest_claim(ahead, since, first)
        assert first == claims_read(ahead, since)


# -- refunds --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "nudge", "refunded"),
    [
        (row(3, NOW), charged(3, NOW), row(2, NOW)),
        (row(1, NOW), charged(1, NOW), row(0, NOW)),  # a row of 0 nudges, stamp kept
        (row(2, NOW + POLICY.backoff[0]), charged(1, NOW), None),  # a later charge
        (row(1, NOW + US), charged(1, NOW), None),  # another stamp: a charge after progress
        (row(2, NOW), charged(1, NOW), None),  # another count
        (row(1, NOW, named="t2"), charged(1, NOW), None),  # another todo: pinned to one claim
        (row(0, NOW), charged(1, NOW), None),  # refunded already
        (None, charged(1, NOW), None),  # cleared: the row stays deleted
        (reset_row(row(3, NOW), NOW + minutes(1)), charged(3, NOW), None),
    ],
    ids=[
        "own charge",
        "first nudge",
        "later charge",
        "other stamp",
        "other count",
        "other todo",
        "twice",
        "cleared",
        "reset since",
    ],
)
def test_refunded_row_takes_back_only_its_own_charge(
    written: LedgerRow | None, nudge: Nudge, refunded: LedgerRow | None
) -> None:
    """Compare-and-set: only the row the nudge's charge wrote comes back one lower."""
    assert refunded == refunded_row(written, nudge)


def test_a_refunded_first_nudge_waits_the_first_step_then_is_nudge_one_again() -> None:
    """A row of 0 nudges spends none, yet does not start over: nudge 1 after backoff[0]."""
    ledger = row(0, NOW - POLICY.backoff[0])
    progressed = pair(claimed=ledger.last_nudged_at + US)

    assert (False, 0) == (starts_over(pair(), ledger), effective_nudges(pair(), ledger))
    assert Wait(due_at=NOW) == decide(pair(), ledger, NOW - US, POLICY)
    assert Charge(number=1, todo=todo()) == decide(pair(), ledger, NOW, POLICY)
    assert Charge(number=1, todo=todo()) == decide(progressed, ledger, NOW - minutes(1), POLICY)


# -- plan_tick ---------------------------------------------------------------------------


def test_plan_tick_charges_at_most_the_tick_limit_in_charge_order() -> None:
    """Due pairs are charged in charge_order, tick_limit of them; held_back counts the rest."""
    board = [
        pair(endpoint_id="b", queue="q", oldest=todo(T0)),
        pair(endpoint_id="a", queue="z", oldest=todo(T0)),
        pair(endpoint_id="a", queue="m", oldest=todo(T0)),
        pair(endpoint_id="z", queue="q", oldest=todo(T0 - minutes(1))),
        pair(endpoint_id="c", queue="q", oldest=todo(T0 + minutes(1))),
        pair(endpoint_id="waiting"),
        pair(endpoint_id="fresh", oldest=todo(NOW)),
    ]
    rows = {("waiting", "lane"): row(1, NOW, endpoint_id="waiting")}

    plan = plan_tick(iter(board), rows, NOW, POLICY)

    assert [("z", "q"), ("a", "m"), ("a", "z"), ("b", "q")] == [n.key for n in plan.charges]
    assert 1 == plan.held_back


def test_plan_tick_ranks_a_refunded_or_progressed_pair_with_the_least_nudged() -> None:
    """A refunded pair (0 spent) and a progressed one (0) go before a pair due its nudge 2."""
    policy = PacingPolicy(tick_limit=2)
    at_one = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    refunded = pair(endpoint_id="b")
    progressed = pair(endpoint_id="c", claimed=NOW - minutes(1))
    rows = {
        ("a", "lane"): row(1, NOW - minutes(10), endpoint_id="a"),
        ("b", "lane"): row(0, NOW - minutes(10), endpoint_id="b"),
        ("c", "lane"): row(4, NOW - minutes(2), endpoint_id="c"),
    }

    plan = plan_tick([at_one, refunded, progressed], rows, NOW, policy)

    assert [("b", 1), ("c", 1)] == [(n.endpoint_id, n.number) for n in plan.charges]
    assert (1, ()) == (plan.held_back, plan.reset)  # the pair held back made no progress


@pytest.mark.parametrize(
    ("progress", "ledger"),
    [
        ({"claimed": NOW - minutes(1)}, row(4, NOW - minutes(2), endpoint_id="b")),
        ({"departed": True}, row(4, NOW - minutes(2), endpoint_id="b")),
        ({}, row(0, NOW - minutes(2), endpoint_id="b", progressed_at=NOW - minutes(1))),
        ({"claimed": NOW}, None),
    ],
    ids=["claim", "departure", "kept", "no row"],
)
def test_a_progressed_pair_held_back_by_the_tick_limit_is_reset_and_charged_first_next(
    progress: dict[str, object], ledger: LedgerRow | None
) -> None:
    """Beyond the tick limit, a pair's row keeps its progress (reset); without a row, nothing."""
    policy = PacingPolicy(tick_limit=1)
    first = pair(endpoint_id="a", oldest=todo(T0 - timedelta(days=1)))
    held = pair(endpoint_id="b", **progress)  # type: ignore[arg-type]
    rows = {} if ledger is None else {ledger.key: ledger}

    plan = plan_tick([first, held], rows, NOW, policy)
    rows = {n.key: charge_row(n) for n in plan.charges} | {
        key: reset_row(rows[key], NOW) for key in plan.reset
    }
    # What showed the progress may be gone by then (a todo deleted or unstamped): the row keeps it.
    after = plan_tick([first, pair(endpoint_id="b")], rows, NOW + policy.backoff[0], policy)

    assert ([("a", 1)], 1) == ([(n.endpoint_id, n.number) for n in plan.charges], plan.held_back)
    assert (() if ledger is None else (("b", "lane"),)) == plan.reset
    assert [("b", 1)] == [(n.endpoint_id, n.number) for n in after.charges]


def test_plan_tick_clears_rows_with_no_work_and_orphans_sorted_and_leaves_its_input() -> None:
    """Cleared: rows whose pair has no work or is absent, sorted by key; the rows are unchanged."""
    rows = {
        ("b", "q"): row(1, T0, endpoint_id="b", queue="q"),
        ("a", "q"): row(2, T0, endpoint_id="a", queue="q"),
        ("c", "q"): row(1, T0, endpoint_id="c", queue="q"),
    }
    before = dict(rows)
    board = [pair(endpoint_id="b", queue="q", no_work=True), pair(endpoint_id="c", queue="q")]

    plan = plan_tick(board, rows, NOW, POLICY)

    assert (("a", "q"), ("b", "q")) == plan.cleared
    assert [("c", "q")] == [n.key for n in plan.charges]
    assert before == rows


# -- invalid inputs -------------------------------------------------------------------------


def test_a_row_of_another_pair_or_a_pair_twice_is_refused() -> None:
    """A ledger row of another pair is refused naming both keys; so is one pair twice."""
    with pytest.raises(ValueError, match="does not belong") as info:
        decide(pair(), row(1, T0, queue="other"), NOW, POLICY)
    with pytest.raises(ValueError, match="appears twice"):
        plan_tick([pair(), pair()], {}, NOW, POLICY)

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


# -- when to tick ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("swept_ago", "wait", "held_wait"),
    [
        (None, timedelta(seconds=15), timedelta(seconds=15)),  # no record: a whole interval
        (timedelta(0), timedelta(seconds=15), timedelta(seconds=15)),  # this tick swept
        (timedelta(seconds=4), timedelta(seconds=11), timedelta(seconds=11)),  # 4 s ago
        (timedelta(seconds=15), timedelta(0), timedelta(seconds=1.5)),  # due now
        (timedelta(minutes=5), timedelta(0), timedelta(seconds=1.5)),  # long overdue
        (-timedelta(minutes=5), timedelta(seconds=15), timedelta(seconds=15)),  # from the future
    ],
)
def test_a_looping_instance_waits_until_an_interval_after_the_fleet_swept(
    swept_ago: timedelta | None, wait: timedelta, held_wait: timedelta
) -> None:
    """next_sweep_in: between nothing and an interval; a held tick due now waits a tenth."""
    swept_at = None if swept_ago is None else T0 - swept_ago
    every = timedelta(seconds=15)

    assert 10 == HELD_RETRY_FRACTION
    assert wait == next_sweep_in(swept_at, T0, every)
    assert held_wait == next_sweep_in(swept_at, T0, every, skipped=True)


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


def test_a_full_pass_comes_first_then_once_per_interval_and_after_the_clock_went_back() -> None:
    """full_pass_due: with no pass on record, at each five minutes, and before the last pass."""
    assert timedelta(minutes=5) == FULL_PASS_INTERVAL
    assert [True, False, False, True, True, True] == [
        full_pass_due(last, at)
        for last, at in [
            (None, T0),
            (T0, T0),
            (T0, T0 + FULL_PASS_INTERVAL - US),
            (T0, T0 + FULL_PASS_INTERVAL),
            (T0, T0 + FULL_PASS_INTERVAL * 9),
            (T0, T0 - US),  # a full pass is never wrong: a clock that went back asks for one
        ]
    ]


def test_a_full_pass_interval_must_be_positive_and_instants_aware() -> None:
    """Bad arguments name what is wrong."""
    with pytest.raises(ValueError, match="full-pass interval must be positive"):
        full_pass_due(T0, T0, timedelta(0))
    with pytest.raises(ValueError, match="now"):
        full_pass_due(T0, T0.replace(tzinfo=None))
