"""The in-memory board: host verbs, error handling, the sweep's view and atomic charges."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import attrs
import pytest

from adapters.memory import BoardError, MemoryBoard
from stall_core import LedgerRow, PacingPolicy, PairState, TodoRef, WakeError, made_progress
from stall_testing import RecordingWake
from tests.support import T0, FakeClock, minutes

POLICY = PacingPolicy()
KEY = ("ep", "lane")
US = timedelta(microseconds=1)


def add_hook(board: MemoryBoard, hook_id: str, endpoint_id: str, **kwargs: object) -> None:
    """Add a notify hook with a loopback URL and a dummy secret."""
    board.add_hook(
        hook_id,
        endpoint_id=endpoint_id,
        url="http://127.0.0.1:9/hook",
        secret="whsec_" + "A" * 32,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    """The board's clock, its time authority, at T0."""
    return FakeClock(T0)


@pytest.fixture(name="board")
def _board(clock: FakeClock) -> MemoryBoard:
    """Endpoint ep with a covering hook, a verified and an unverified delivery, one todo."""
    board = MemoryBoard(clock=clock)
    board.add_endpoint("ep")
    board.add_endpoint("other")
    add_hook(board, "h1", "ep")
    board.add_delivery("dv", endpoint_id="ep", verified=True, received_at=T0)
    board.add_delivery("du", endpoint_id="ep", verified=False, received_at=T0)
    board.add_delivery("do", endpoint_id="other", verified=True, received_at=T0)
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0, delivery_id="dv")
    return board


def snapshot(board: MemoryBoard) -> tuple[object, ...]:
    """Every table of the board, copied, for nothing-changed checks."""
    return (
        dict(board.endpoints),
        # Deliveries have no public view; a copy of the private table is enough here.
        dict(board._deliveries),
        dict(board.todos),
        dict(board.hooks),
        dict(board.ledger),
        board.rings,
    )


# -- errors name what was wrong and change nothing -----------------------------------

NAIVE = datetime(2026, 10, 15, 9, 0)

FAILING_VERBS: list[tuple[str, Callable[[MemoryBoard], object], type[Exception], str]] = [
    ("duplicate endpoint", lambda b: b.add_endpoint("ep"), BoardError, "endpoint 'ep'"),
    ("empty endpoint id", lambda b: b.add_endpoint(""), BoardError, "endpoint id"),
    ("bad endpoint state", lambda b: b.add_endpoint("new", state="gone"), BoardError, "'gone'"),
    (
        "unknown endpoint state",
        lambda b: b.set_endpoint_state("nope", "paused"),
        BoardError,
        "nope",
    ),
    ("bad state change", lambda b: b.set_endpoint_state("ep", "asleep"), BoardError, "'asleep'"),
    (
        "duplicate delivery",
        lambda b: b.add_delivery("dv", endpoint_id="ep", verified=True, received_at=T0),
        BoardError,
        "delivery 'dv'",
    ),
    (
        "delivery of unknown endpoint",
        lambda b: b.add_delivery("d9", endpoint_id="nope", verified=True, received_at=T0),
        BoardError,
        "endpoint 'nope'",
    ),
    (
        "naive delivery time",
        lambda b: b.add_delivery("d9", endpoint_id="ep", verified=True, received_at=NAIVE),
        ValueError,
        "received_at",
    ),
    ("duplicate hook", lambda b: add_hook(b, "h1", "ep"), BoardError, "hook 'h1'"),
    ("hook of unknown endpoint", lambda b: add_hook(b, "h9", "nope"), BoardError, "'nope'"),
    (
        "hook queues as a string",
        lambda b: add_hook(b, "h9", "ep", queues="lane"),
        BoardError,
        "not one string",
    ),
    ("unknown hook enabled", lambda b: b.set_hook_enabled("h9", False), BoardError, "'h9'"),
    ("unknown hook queues", lambda b: b.set_hook_queues("h9", None), BoardError, "'h9'"),
    (
        "hook filter as a string",
        lambda b: b.set_hook_queues("h1", "lane"),
        BoardError,
        "not one string",
    ),
    ("unknown hook delivery", lambda b: b.record_hook_delivery("h9", ok=True), BoardError, "'h9'"),
    (
        "duplicate todo",
        lambda b: b.create_todo("t1", endpoint_id="ep", queue="q", created_at=T0),
        BoardError,
        "todo 't1'",
    ),
    (
        "todo of unknown endpoint",
        lambda b: b.create_todo("t9", endpoint_id="nope", queue="q", created_at=T0),
        BoardError,
        "'nope'",
    ),
    (
        "todo of unknown delivery",
        lambda b: b.create_todo(
            "t9", endpoint_id="ep", queue="q", created_at=T0, delivery_id="d-nope"
        ),
        BoardError,
        "'d-nope'",
    ),
    (
        "delivery of another endpoint",
        lambda b: b.create_todo("t9", endpoint_id="ep", queue="q", created_at=T0, delivery_id="do"),
        BoardError,
        "belongs to endpoint 'other'",
    ),
    (
        "naive creation time",
        lambda b: b.create_todo("t9", endpoint_id="ep", queue="q", created_at=NAIVE),
        ValueError,
        "created_at",
    ),
    ("claim unknown todo", lambda b: b.claim("t9", owner="c", at=T0), BoardError, "'t9'"),
    ("claim naive time", lambda b: b.claim("t1", owner="c", at=NAIVE), ValueError, "at"),
    ("complete pending todo", lambda b: b.complete("t1"), BoardError, "pending, not claimed"),
    ("complete unknown todo", lambda b: b.complete("t9"), BoardError, "'t9'"),
    ("requeue pending todo", lambda b: b.requeue("t1"), BoardError, "pending, not claimed"),
    ("requeue unknown todo", lambda b: b.requeue("t9", unstamp=True), BoardError, "'t9'"),
    ("move unknown todo", lambda b: b.move_todo("t9", "q"), BoardError, "'t9'"),
    ("delete unknown todo", lambda b: b.delete_todo("t9"), BoardError, "'t9'"),
    (
        "verify unknown delivery",
        lambda b: b.set_delivery_verified("d9", True),
        BoardError,
        "'d9'",
    ),
    ("ring unknown todo", lambda b: b.ring("t9", at=T0), BoardError, "'t9'"),
    ("ring naive time", lambda b: b.ring("t1", at=NAIVE), ValueError, "at"),
]


@pytest.mark.parametrize(
    ("verb", "error", "named"),
    [(f, e, n) for _, f, e, n in FAILING_VERBS],
    ids=[name for name, *_ in FAILING_VERBS],
)
def test_failing_verbs_name_the_problem_and_change_nothing(
    board: MemoryBoard,
    verb: Callable[[MemoryBoard], object],
    error: type[Exception],
    named: str,
) -> None:
    """A verb that cannot apply raises naming what was wrong, and leaves every table as it was."""
    before = snapshot(board)

    with pytest.raises(error) as info:
        verb(board)

    assert named in str(info.value)
    assert before == snapshot(board)


def test_board_errors_are_value_errors() -> None:
    """BoardError is a ValueError, so callers may catch either."""
    assert issubclass(BoardError, ValueError)


def test_claiming_a_claimed_todo_is_refused(board: MemoryBoard) -> None:
    """A claimed todo cannot be claimed again; the first claim stands."""
    board.claim("t1", owner="first", at=T0 + minutes(1))

    with pytest.raises(BoardError, match="'t1' is claimed, not pending"):
        board.claim("t1", owner="second", at=T0 + minutes(2))

    assert ("first", T0 + minutes(1)) == (
        board.todos["t1"].claim_owner,
        board.todos["t1"].claimed_at,
    )


def test_done_todo_cannot_be_claimed_completed_or_requeued(board: MemoryBoard) -> None:
    """A done todo refuses claim, complete and requeue, each naming its state."""
    board.claim("t1", owner="c", at=T0)
    board.complete("t1")
    done = board.todos["t1"]

    verbs: list[Callable[[], object]] = [
        lambda: board.claim("t1", owner="c", at=T0),
        lambda: board.complete("t1"),
        lambda: board.requeue("t1"),
    ]
    for verb in verbs:
        with pytest.raises(BoardError, match="is done"):
            verb()

    assert done == board.todos["t1"]


# -- verbs that apply ---------------------------------------------------------------------


def test_new_todo_is_pending_with_its_columns(board: MemoryBoard) -> None:
    """create_todo stores a pending todo with zero counters and no claim."""
    todo = board.create_todo(
        "t2", endpoint_id="ep", queue="q", created_at=T0, delivery_id="du", title="hello"
    )

    assert todo == board.todos["t2"]
    assert ("pending", "hello", "du", None, 0, 0) == (
        todo.state,
        todo.title,
        todo.delivery_id,
        todo.claimed_at,
        todo.attempt,
        todo.ring_attempts,
    )


def test_claim_sets_claim_columns(board: MemoryBoard) -> None:
    """claim records the claim time, owner and lease."""
    todo = board.claim("t1", owner="c", at=T0 + minutes(1), lease=minutes(7))

    assert ("claimed", T0 + minutes(1), "c", T0 + minutes(8)) == (
        todo.state,
        todo.claimed_at,
        todo.claim_owner,
        todo.lease_expires_at,
    )


def test_complete_keeps_claimed_at(board: MemoryBoard) -> None:
    """complete marks done, clears the lease and keeps claimed_at (progress stays visible)."""
    board.claim("t1", owner="c", at=T0 + minutes(1))

    todo = board.complete("t1")

    assert ("done", T0 + minutes(1), None, None) == (
        todo.state,
        todo.claimed_at,
        todo.claim_owner,
        todo.lease_expires_at,
    )


def test_requeue_keeps_claimed_at_and_increments_attempt(board: MemoryBoard) -> None:
    """requeue returns the todo to pending, keeps claimed_at and adds one attempt."""
    board.claim("t1", owner="c", at=T0 + minutes(1))
    board.requeue("t1")
    board.claim("t1", owner="c", at=T0 + minutes(2))

    todo = board.requeue("t1")

    assert ("pending", T0 + minutes(2), None, None, 2) == (
        todo.state,
        todo.claimed_at,
        todo.claim_owner,
        todo.lease_expires_at,
        todo.attempt,
    )


def test_claim_next_picks_the_oldest_pending(board: MemoryBoard) -> None:
    """claim_next claims the oldest pending todo of the pair, ignoring the sender gate."""
    board.create_todo("young", endpoint_id="ep", queue="lane", created_at=T0 + minutes(5))
    board.create_todo(
        "old-unverified",
        endpoint_id="ep",
        queue="lane",
        created_at=T0 - minutes(5),
        delivery_id="du",
    )
    board.create_todo("elsewhere", endpoint_id="ep", queue="other", created_at=T0 - minutes(60))

    order = [board.claim_next("ep", "lane", owner="c", at=T0 + minutes(9)) for _ in range(4)]

    assert ["old-unverified", "t1", "young", None] == [t.id if t else None for t in order]


def test_claim_next_ties_break_by_id(board: MemoryBoard) -> None:
    """Two todos created at the same instant are claimed in id order."""
    board.create_todo("t0", endpoint_id="ep", queue="lane", created_at=T0)

    assert "t0" == board.claim_next("ep", "lane", owner="c", at=T0).id  # type: ignore[union-attr]


def test_claim_next_on_an_empty_pair_is_none(board: MemoryBoard) -> None:
    """claim_next returns None, changing nothing, when the pair has no pending todo."""
    before = snapshot(board)

    assert None is board.claim_next("ep", "empty", owner="c", at=T0)
    assert before == snapshot(board)


def test_endpoint_state_changes(board: MemoryBoard) -> None:
    """An endpoint can be paused, disabled and resumed."""
    assert ["paused", "disabled", "active"] == [
        board.set_endpoint_state("ep", s).state for s in ("paused", "disabled", "active")
    ]


def test_hooks_covering(board: MemoryBoard) -> None:
    """hooks_covering lists enabled hooks of the endpoint whose filter covers the queue, by id."""
    add_hook(board, "h0", "ep", queues=["lane", "x"])
    add_hook(board, "h2", "ep", queues=["x"])
    add_hook(board, "h3", "ep", enabled=False)
    add_hook(board, "h4", "other")

    assert ["h0", "h1"] == [h.id for h in board.hooks_covering("ep", "lane")]
    assert ["h0", "h1", "h2"] == [h.id for h in board.hooks_covering("ep", "x")]
    assert ["h4"] == [h.id for h in board.hooks_covering("other", "lane")]

    board.set_hook_queues("h1", ["y"])
    board.set_hook_enabled("h0", False)
    assert [] == list(board.hooks_covering("ep", "lane"))


def test_hook_filter_accepts_any_iterable(board: MemoryBoard) -> None:
    """A hook's queue filter may be any iterable of names, stored as a tuple; None is all."""
    assert ("a", "b") == board.set_hook_queues("h1", (q for q in "ab")).queues
    assert None is board.set_hook_queues("h1", None).queues


def test_empty_hook_filter_covers_nothing(board: MemoryBoard) -> None:
    """An empty queue filter covers no queue, unlike a NULL filter."""
    board.set_hook_queues("h1", [])

    assert () == board.hooks_covering("ep", "lane")


def test_record_hook_delivery_resets_on_success(board: MemoryBoard) -> None:
    """Failures count up one by one; a success resets the count to zero."""
    counts = [
        board.record_hook_delivery("h1", ok=ok).consecutive_failures
        for ok in (False, False, False, True, False)
    ]

    assert [1, 2, 3, 0, 1] == counts


def test_disable_then_enable_hook(board: MemoryBoard) -> None:
    """Disabling records when and why; enabling clears that and the failure count."""
    board.record_hook_delivery("h1", ok=False)

    disabled = board.set_hook_enabled("h1", False, at=T0, reason="10 failures")
    assert (False, T0, "10 failures", 1) == (
        disabled.enabled,
        disabled.disabled_at,
        disabled.disabled_reason,
        disabled.consecutive_failures,
    )

    enabled = board.set_hook_enabled("h1", True)
    assert (True, None, None, 0) == (
        enabled.enabled,
        enabled.disabled_at,
        enabled.disabled_reason,
        enabled.consecutive_failures,
    )


def test_ring_is_the_doorbell_path(board: MemoryBoard) -> None:
    """ring counts a ring on the todo and records it; it is the only verb that does."""
    board.ring("t1", at=T0 + minutes(1))

    assert (1, T0 + minutes(1)) == (
        board.todos["t1"].ring_attempts,
        board.todos["t1"].last_ringed_at,
    )
    assert ["t1"] == [r.todo_id for r in board.rings]


def test_gate_passes(board: MemoryBoard) -> None:
    """The sender gate passes verified and delivery-less todos, not unverified ones."""
    board.create_todo("op", endpoint_id="ep", queue="lane", created_at=T0)
    board.create_todo("u", endpoint_id="ep", queue="lane", created_at=T0, delivery_id="du")

    assert [True, True, False] == [board.gate_passes(board.todos[t]) for t in ("t1", "op", "u")]


def test_state_is_read_only(board: MemoryBoard) -> None:
    """The inspectable tables are read-only views."""
    with pytest.raises(TypeError):
        board.todos["x"] = board.todos["t1"]  # type: ignore[index]
    with pytest.raises(TypeError):
        board.ledger["ep", "lane"] = None  # type: ignore[index]


# -- the sweep's view -----------------------------------------------------------------------


def test_pair_states(board: MemoryBoard) -> None:
    """pair_states reports the oldest gated todo, activity, receivers and the latest claim."""
    board.create_todo(
        "u-old", endpoint_id="ep", queue="lane", created_at=T0 - minutes(9), delivery_id="du"
    )
    board.create_todo("claimed", endpoint_id="ep", queue="lane", created_at=T0 - minutes(9))
    board.claim("claimed", owner="c", at=T0 + minutes(3))
    board.create_todo("q", endpoint_id="other", queue="side", created_at=T0, title="x")
    board.set_endpoint_state("other", "paused")

    assert [
        PairState(
            endpoint_id="ep",
            queue="lane",
            oldest=TodoRef(id="t1", created_at=T0),
            endpoint_active=True,
            has_receiver=True,
            latest_claim=T0 + minutes(3),
            named_departed=False,
        ),
        PairState(
            endpoint_id="other",
            queue="side",
            oldest=TodoRef(id="q", created_at=T0, title="x"),
            endpoint_active=False,
            has_receiver=False,
            latest_claim=None,
            named_departed=False,
        ),
    ] == board.pair_states()


async def test_pair_states_include_ledger_rows_without_work(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A pair with a ledger row but no pending todo is still reported, with no oldest."""
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)
    board.claim("t1", owner="c", at=T0 + minutes(4))

    [state] = board.pair_states()

    assert (("ep", "lane"), None) == (state.key, state.oldest)


def test_only_unverified_work_has_no_oldest(board: MemoryBoard) -> None:
    """A pair whose only pending todos are unverified is reported with no oldest todo."""
    board.create_todo("u", endpoint_id="ep", queue="open", created_at=T0, delivery_id="du")

    states = {s.key: s for s in board.pair_states()}

    assert None is states["ep", "open"].oldest


# -- charge_due ------------------------------------------------------------------------------


async def test_charge_due_applies_the_plan(board: MemoryBoard, clock: FakeClock) -> None:
    """charge_due writes a row for each charge and returns the nudges, at the board's clock."""
    clock.set(T0 + minutes(3))
    outcome = await board.charge_due(policy=POLICY)

    assert [("ep", "lane", "t1", 1)] == [
        (n.endpoint_id, n.queue, n.todo.id, n.number) for n in outcome.charged
    ]
    assert 1 == board.ledger["ep", "lane"].nudges
    assert (T0 + minutes(3), False) == (outcome.now, outcome.skipped)
    assert [T0 + minutes(3)] == [n.charged_at for n in outcome.charged]


async def test_charge_due_deletes_drained_rows(board: MemoryBoard, clock: FakeClock) -> None:
    """A charged pair that is drained loses its row in the next charge."""
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)
    board.claim("t1", owner="c", at=T0 + minutes(4))
    board.complete("t1")

    clock.set(T0 + minutes(5))
    outcome = await board.charge_due(policy=POLICY)

    assert ((), (("ep", "lane"),)) == (outcome.charged, outcome.drained)
    assert {} == dict(board.ledger)


async def test_charge_due_never_changes_a_todo(board: MemoryBoard, clock: FakeClock) -> None:
    """A nudge spends no ring budget: charging leaves every todo identical and rings nothing."""
    board.ring("t1", at=T0 + minutes(1))
    before = dict(board.todos)

    clock.set(T0 + minutes(3))
    outcome = await board.charge_due(policy=POLICY)

    assert 1 == len(outcome.charged)
    assert before == dict(board.todos)
    assert 1 == len(board.rings)


async def test_concurrent_charges_never_double_charge(board: MemoryBoard, clock: FakeClock) -> None:
    """Many charge_due calls gathered at one instant charge each due pair exactly once."""
    for i in range(6):
        board.create_todo(f"x{i}", endpoint_id="ep", queue=f"q{i}", created_at=T0)

    clock.set(T0 + minutes(3))
    outcomes = await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(5)))

    keys = [n.key for outcome in outcomes for n in outcome.charged]
    assert 7 == len(keys)
    assert len(keys) == len(set(keys))
    assert [4, 3, 0, 0, 0] == [len(o.charged) for o in outcomes]
    assert {1} == {row.nudges for row in board.ledger.values()}


async def test_concurrent_sweeps_across_time_never_double_charge(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """Gathered sweeps at successive instants charge nudge 2 once, at its due time."""
    clock.set(T0 + minutes(3))
    await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(3)))

    clock.set(T0 + minutes(7))
    early = await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(3)))
    clock.set(T0 + minutes(8))
    due = await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(3)))

    assert 0 == sum(len(o.charged) for o in early)
    assert [2] == [n.number for o in due for n in o.charged]


async def test_charge_due_decides_at_the_board_clock(board: MemoryBoard, clock: FakeClock) -> None:
    """The board's clock is its time: before the threshold nothing is due, after it the pair is."""
    clock.set(T0 + POLICY.threshold)
    early = await board.charge_due(policy=POLICY)
    clock.advance(timedelta(microseconds=1))
    due = await board.charge_due(policy=POLICY)

    assert (T0 + POLICY.threshold, ()) == (early.now, early.charged)
    assert [1] == [n.number for n in due.charged]


async def test_a_naive_board_clock_fails_the_charge_and_writes_nothing() -> None:
    """A board clock returning a naive datetime makes charge_due raise naming clock(), unchanged."""
    board = MemoryBoard(clock=lambda: NAIVE + minutes(3))
    board.add_endpoint("ep")
    add_hook(board, "h1", "ep")
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0)

    with pytest.raises(ValueError, match=r"clock\(\)"):
        await board.charge_due(policy=POLICY)

    assert {} == dict(board.ledger)


# -- progress: read from the todos, two ways -----------------------------------------------


def add_second_todo(board: MemoryBoard, *, delivery_id: str | None = "dv") -> None:
    """Add t2 to ep/lane a microsecond after t1, so t1 stays the oldest and is the one named."""
    board.create_todo(
        "t2", endpoint_id="ep", queue="lane", created_at=T0 + US, delivery_id=delivery_id
    )


async def ticks(board: MemoryBoard, clock: FakeClock, *at: timedelta) -> list[object]:
    """Tick at each ``T0 + at``; ep/lane's charges as (offset, number, named todo, stamp)."""
    charged: list[object] = []
    for offset in at:
        clock.set(T0 + offset)
        outcome = await board.charge_due(policy=POLICY)
        charged += [
            (offset, n.number, n.todo.id, n.charged_at - T0)
            for n in outcome.charged
            if n.key == KEY
        ]
    return charged


def progressed(board: MemoryBoard) -> bool:
    """Whether ep/lane shows progress to the core, as the board reads it now."""
    states = {state.key: state for state in board.pair_states()}
    return made_progress(states[KEY], board.ledger.get(KEY))


@pytest.mark.parametrize("stamped", [-minutes(1), timedelta(0)], ids=["before", "at"])
async def test_claiming_the_named_todo_is_progress_whatever_its_stamp(
    board: MemoryBoard, clock: FakeClock, stamped: timedelta
) -> None:
    """The named todo claimed, stamped at or before the charge, departed: progress, once."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t1", owner="c", at=T0 + minutes(3) + stamped)

    assert True is progressed(board)
    # Without the departure, T0+4m would wait for nudge 2 at T0+8m; counted twice,
    # T0+9m-1us would charge nudge 1 again.
    assert [(minutes(4), 1, "t2", minutes(4)), (minutes(9), 2, "t2", minutes(9))] == await ticks(
        board, clock, minutes(4), minutes(9) - US, minutes(9)
    )


@pytest.mark.parametrize("stamped", [-minutes(1), timedelta(0)], ids=["before", "at"])
async def test_a_claim_of_another_todo_stamped_at_or_before_the_charge_is_not_progress(
    board: MemoryBoard, clock: FakeClock, stamped: timedelta
) -> None:
    """A todo the nudge did not name, claimed with a stamp at or before its charge: no progress."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t2", owner="c", at=T0 + minutes(3) + stamped)

    assert False is progressed(board)
    assert [(minutes(8), 2, "t1", minutes(8))] == await ticks(
        board, clock, minutes(4), minutes(8) - US, minutes(8)
    )


async def test_a_claim_of_another_todo_stamped_after_the_charge_is_progress(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A todo the nudge did not name, claimed with a stamp after its charge, is progress, once."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t2", owner="c", at=T0 + minutes(3) + US)

    assert [(minutes(4), 1, "t1", minutes(4)), (minutes(9), 2, "t1", minutes(9))] == await ticks(
        board, clock, minutes(4), minutes(9) - US, minutes(9)
    )


async def test_a_claim_of_another_todo_done_since_is_progress(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A todo the nudge did not name, claimed after its charge and done since, still shows it."""
    add_second_todo(board)
    board.create_todo("t3", endpoint_id="ep", queue="lane", created_at=T0 + 2 * US)
    await ticks(board, clock, minutes(3))
    board.claim("t3", owner="c", at=T0 + minutes(3) + US)
    board.complete("t3")

    assert [(minutes(4), 1, "t1", minutes(4))] == await ticks(board, clock, minutes(4))


async def test_a_pair_held_back_with_progress_is_reset_then_charged_first(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """Held back by the tick limit, a pair's progress is kept by a reset, though its claim goes."""
    policy = attrs.evolve(POLICY, tick_limit=1)
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t2", owner="c", at=T0 + minutes(3) + US)
    # A pair with older work, due at nudge 1 as lane is: it goes first.
    board.create_todo("x1", endpoint_id="ep", queue="early", created_at=T0 - minutes(10))
    clock.set(T0 + minutes(4))
    held = await board.charge_due(policy=policy)
    kept = board.ledger[KEY]
    board.delete_todo("t2")  # the claim's stamp goes with it
    clock.set(T0 + minutes(5))
    after = await board.charge_due(policy=policy)

    assert [("ep", "early")] == [n.key for n in held.charged]
    assert (0, T0 + minutes(4)) == (kept.nudges, kept.progressed_at)
    assert [(KEY, 1)] == [(n.key, n.number) for n in after.charged]


DEPARTURES: dict[str, Callable[[MemoryBoard], object]] = {
    "deleted": lambda b: b.delete_todo("t1"),
    "moved": lambda b: b.move_todo("t1", "elsewhere"),
    "claimed, stamped behind": lambda b: b.claim("t1", owner="c", at=T0),
    "done, unstamped": lambda b: (b.claim("t1", owner="c"), b.complete("t1", unstamp=True)),
}


@pytest.mark.parametrize("depart", DEPARTURES.values(), ids=DEPARTURES.keys())
async def test_the_named_todo_departing_is_progress(
    board: MemoryBoard, clock: FakeClock, depart: Callable[[MemoryBoard], object]
) -> None:
    """The named todo deleted, moved or done (its stamp gone or not) is progress: nudge 1."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    depart(board)

    charged = await ticks(board, clock, minutes(4), minutes(5))

    assert [(minutes(4), 1, "t2", minutes(4))] == charged[:1]
    assert 1 == len(charged)


def test_a_requeued_named_todo_unstamped_leaves_no_trace(board: MemoryBoard) -> None:
    """A claim undone with its stamp before any tick looked is neither a claim nor a departure."""
    board.claim("t1", owner="c", at=T0)
    board.requeue("t1", unstamp=True)

    [state] = board.pair_states()

    assert (None, False) == (state.latest_claim, state.named_departed)


CHANGES: dict[str, Callable[[MemoryBoard], object]] = {
    "gate failed": lambda b: b.set_delivery_verified("dv", False),
    "endpoint paused and resumed": lambda b: (
        b.set_endpoint_state("ep", "paused"),
        b.set_endpoint_state("ep", "active"),
    ),
    "hook disabled and enabled": lambda b: (
        b.set_hook_enabled("h1", False, at=T0, reason="test"),
        b.set_hook_enabled("h1", True),
    ),
    "hook filter changed": lambda b: b.set_hook_queues("h1", ["lane", "x"]),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
async def test_a_change_of_gate_or_configuration_is_not_progress(
    board: MemoryBoard, clock: FakeClock, change: Callable[[MemoryBoard], object]
) -> None:
    """The named todo ungated, or the endpoint or hooks changed and back: no departure, no reset."""
    add_second_todo(board, delivery_id=None)  # operator-made: passes the gate whatever dv says
    await ticks(board, clock, minutes(3))
    row = board.ledger[KEY]
    change(board)

    [state] = board.pair_states()
    quiet = await ticks(board, clock, minutes(4))

    assert (False, False) == (state.named_departed, progressed(board))
    assert ([], row) == (quiet, board.ledger[KEY])
    assert [(minutes(8), 2, state.oldest.id if state.oldest else None, minutes(8))] == (
        await ticks(board, clock, minutes(8))
    )


async def test_a_paused_endpoint_without_progress_keeps_its_row_as_it_is(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A tick on a paused endpoint with no progress leaves its row alone: idle, not reset."""
    await ticks(board, clock, minutes(3))
    row = board.ledger[KEY]
    board.set_endpoint_state("ep", "paused")

    assert [] == await ticks(board, clock, minutes(4), minutes(9))
    assert row == board.ledger[KEY]


async def test_progress_no_charge_answers_keeps_the_row_reset(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """Progress seen while paused resets the row: count 0; stamp, named todo and progress kept."""
    add_second_todo(board)
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    board.set_endpoint_state("ep", "paused")
    board.claim("t2", owner="c", at=T0 + minutes(3) + US)

    paused = await ticks(board, clock, minutes(4), minutes(5))
    # The claim that showed the progress is undone, stamp and all: the row keeps it anyway.
    board.requeue("t2", unstamp=True)
    refunded = await board.refund(nudge)
    board.set_endpoint_state("ep", "active")

    assert [] == paused
    assert (
        LedgerRow(
            endpoint_id="ep",
            queue="lane",
            nudges=0,
            last_nudged_at=T0 + minutes(3),
            named_todo="t1",
            progressed_at=T0 + minutes(4),
        ),
        False,
    ) == (board.ledger[KEY], refunded)
    assert [(minutes(6), 1, "t1", minutes(6))] == await ticks(
        board, clock, minutes(6), minutes(11) - US
    )
    assert None is board.ledger[KEY].progressed_at


async def test_a_claim_stamped_ahead_of_the_board_clock_counts_once(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A claim stamped ahead of the clock is nudge 1's stamp; nudge 2 waits a step from it."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t2", owner="c", at=T0 + minutes(10))

    charged = await ticks(
        board,
        clock,
        minutes(4),
        minutes(5),
        minutes(10),
        minutes(10) + POLICY.backoff[0] - US,
        minutes(10) + POLICY.backoff[0],
    )

    assert [
        (minutes(4), 1, "t1", minutes(10)),
        (minutes(10) + POLICY.backoff[0], 2, "t1", minutes(10) + POLICY.backoff[0]),
    ] == charged


async def test_a_claim_stamped_ahead_counts_once_across_a_reset(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A claim ahead of the clock seen while paused is kept by the reset, then consumed once."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.set_endpoint_state("ep", "paused")
    board.claim("t2", owner="c", at=T0 + minutes(10))
    await ticks(board, clock, minutes(4))
    kept = board.ledger[KEY]
    board.set_endpoint_state("ep", "active")

    charged = await ticks(
        board, clock, minutes(5), minutes(6), minutes(10) + POLICY.backoff[0] - US
    )

    assert (0, T0 + minutes(4)) == (kept.nudges, kept.progressed_at)
    assert [(minutes(5), 1, "t1", minutes(10))] == charged


@pytest.mark.parametrize("first_tick", [minutes(1), minutes(3)], ids=["fresh", "charging"])
async def test_a_claim_before_any_row_does_not_count_after_the_first_charge(
    board: MemoryBoard, clock: FakeClock, first_tick: timedelta
) -> None:
    """A claim on a pair with no ledger row is stamped before nudge 1: nudge 2 waits its step."""
    add_second_todo(board)
    clock.set(T0 + minutes(1))
    board.claim("t2", owner="c")

    charged = await ticks(
        board, clock, first_tick, minutes(3), minutes(4), minutes(8) - US, minutes(8)
    )

    # Had the claim counted after the first charge, T0+4m would have charged nudge 1 again.
    assert [(minutes(3), 1, "t1", minutes(3)), (minutes(8), 2, "t1", minutes(8))] == charged


async def test_a_drained_pair_leaves_no_progress_behind(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """The tick that drains a pair deletes its row: the next backlog's claims start from nothing."""
    await ticks(board, clock, minutes(3))
    clock.set(T0 + minutes(4))
    board.claim("t1", owner="c")
    [before_drain] = board.pair_states()

    drain = await board.charge_due(policy=POLICY)
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0 + minutes(4))
    first = minutes(4) + POLICY.threshold + US
    charged = await ticks(board, clock, first, first + minutes(1), first + POLICY.backoff[0] - US)

    assert (T0 + minutes(4), True) == (before_drain.latest_claim, before_drain.named_departed)
    assert ((), (KEY,)) == (drain.charged, drain.drained)
    assert [(first, 1, "t2", first)] == charged


async def test_a_held_tick_consumes_no_progress(board: MemoryBoard, clock: FakeClock) -> None:
    """A skipped tick consumes nothing: the progress still counts at the next charge."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))
    board.claim("t2", owner="c", at=T0 + minutes(3) + US)
    row = board.ledger[KEY]

    clock.set(T0 + minutes(4))
    with board.hold_tick():
        held = await board.charge_due(policy=POLICY)
        while_held = (progressed(board), board.ledger[KEY])
    released = await board.charge_due(policy=POLICY)

    assert (True, None, 0) == (held.skipped, held.kind, held.judged)
    assert (True, row) == while_held
    assert [1] == [n.number for n in released.charged]


async def test_charge_due_is_a_full_pass_over_every_pair(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """Each tick judges every pair with pending work or a ledger row (gated or not): a full pass."""
    board.create_todo("u", endpoint_id="ep", queue="open", created_at=T0, delivery_id="du")
    await ticks(board, clock, minutes(3))
    board.claim("t1", owner="c")

    outcome = await board.charge_due(policy=POLICY)

    assert ("full", 2, (KEY,)) == (outcome.kind, outcome.judged, outcome.drained)


# -- the new host verbs ---------------------------------------------------------------------


def test_move_todo_takes_it_to_another_queue_of_its_endpoint(board: MemoryBoard) -> None:
    """move_todo changes the todo's queue only; the sweep sees it in its new pair."""
    before = board.todos["t1"]

    moved = board.move_todo("t1", "elsewhere")

    assert attrs.evolve(before, queue="elsewhere") == moved == board.todos["t1"]
    assert [("ep", "elsewhere")] == [s.key for s in board.pair_states()]


def test_set_delivery_verified_changes_the_gate(board: MemoryBoard) -> None:
    """A delivery verified later passes the gate; one revoked fails it."""
    board.create_todo("u", endpoint_id="ep", queue="lane", created_at=T0, delivery_id="du")

    board.set_delivery_verified("du", True)
    board.set_delivery_verified("dv", False)

    assert [False, True] == [board.gate_passes(board.todos[t]) for t in ("t1", "u")]


@pytest.mark.parametrize("unstamp", [False, True])
def test_complete_keeps_or_clears_claimed_at(board: MemoryBoard, unstamp: bool) -> None:
    """complete keeps claimed_at, or clears it with unstamp (a host that forgets its claims)."""
    board.claim("t1", owner="c", at=T0 + minutes(1))

    todo = board.complete("t1", unstamp=unstamp)

    assert ("done", None if unstamp else T0 + minutes(1)) == (todo.state, todo.claimed_at)


@pytest.mark.parametrize("unstamp", [False, True])
def test_requeue_keeps_or_clears_claimed_at(board: MemoryBoard, unstamp: bool) -> None:
    """requeue keeps claimed_at, or clears it with unstamp; the attempt counts either way."""
    board.claim("t1", owner="c", at=T0 + minutes(1))

    todo = board.requeue("t1", unstamp=unstamp)

    assert ("pending", None if unstamp else T0 + minutes(1), 1) == (
        todo.state,
        todo.claimed_at,
        todo.attempt,
    )


def test_delete_todo_removes_it_whatever_its_state(board: MemoryBoard) -> None:
    """delete_todo removes a pending or a claimed todo and returns it."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    board.claim("t2", owner="c", at=T0)

    deleted = [board.delete_todo(t).id for t in ("t1", "t2")]

    assert (["t1", "t2"], {}) == (deleted, dict(board.todos))


async def test_pair_states_read_whether_the_named_todo_departed(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """named_departed follows the named todo: claimed, yes; requeued, no; moved, yes."""
    add_second_todo(board)
    await ticks(board, clock, minutes(3))

    def departed() -> bool:
        return {s.key: s for s in board.pair_states()}[KEY].named_departed

    seen = [departed()]
    board.claim("t1", owner="c")
    seen.append(departed())
    board.requeue("t1")
    seen.append(departed())
    board.move_todo("t1", "elsewhere")
    seen.append(departed())

    assert [False, True, False, True] == seen


def test_claim_without_at_is_stamped_with_the_board_clock(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A claim with no explicit instant takes the board's clock, the ledger's own time."""
    clock.set(T0 + minutes(4))

    todo = board.claim("t1", owner="c", lease=minutes(7))

    assert (T0 + minutes(4), T0 + minutes(11)) == (todo.claimed_at, todo.lease_expires_at)


def test_claim_next_without_at_is_stamped_with_the_board_clock(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """claim_next with no explicit instant stamps the board's clock too."""
    clock.set(T0 + minutes(6))

    todo = board.claim_next("ep", "lane", owner="c")

    assert ("t1", T0 + minutes(6)) == (todo.id if todo else None, todo.claimed_at if todo else None)


async def test_refund_takes_back_its_own_charge_and_keeps_the_stamp(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """refund lowers the count of the row its nudge's charge wrote; the stamp stays the base."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged

    refunded = await board.refund(nudge)

    assert True is refunded
    assert (0, T0 + minutes(3)) == (
        board.ledger["ep", "lane"].nudges,
        board.ledger["ep", "lane"].last_nudged_at,
    )


async def test_refund_is_once_only(board: MemoryBoard, clock: FakeClock) -> None:
    """A second refund of the same nudge finds the count already taken back and does nothing."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    await board.refund(nudge)
    before = snapshot(board)

    assert False is await board.refund(nudge)
    assert before == snapshot(board)


async def test_refund_never_undoes_a_later_charge(board: MemoryBoard, clock: FakeClock) -> None:
    """A late refund of nudge 1 after nudge 2 was charged leaves nudge 2's row alone."""
    clock.set(T0 + minutes(3))
    [first] = (await board.charge_due(policy=POLICY)).charged
    clock.advance(POLICY.backoff[0])
    [second] = (await board.charge_due(policy=POLICY)).charged
    before = snapshot(board)

    assert False is await board.refund(first)
    assert before == snapshot(board)
    assert (2, second.charged_at) == (
        board.ledger["ep", "lane"].nudges,
        board.ledger["ep", "lane"].last_nudged_at,
    )


async def test_refund_leaves_a_drained_row_deleted(board: MemoryBoard, clock: FakeClock) -> None:
    """A refund after the pair drained (row deleted) writes nothing back."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    board.claim("t1", owner="c")
    board.complete("t1")
    await board.charge_due(policy=POLICY)

    assert False is await board.refund(nudge)
    assert {} == dict(board.ledger)


async def test_a_late_refund_never_undoes_a_later_charge_pinned_to_one_claim_ahead(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """Two nudges stamped with one claim ahead of the clock: the first's refund spares the next."""
    add_second_todo(board)
    board.create_todo("t3", endpoint_id="ep", queue="lane", created_at=T0 + 2 * US)
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)
    board.claim("t3", owner="c", at=T0 + minutes(30))  # a host clock ahead
    clock.set(T0 + minutes(4))
    [first] = (await board.charge_due(policy=POLICY)).charged
    board.claim("t1", owner="c", at=T0 + minutes(5))  # the todo it named departs
    clock.set(T0 + minutes(5))
    [second] = (await board.charge_due(policy=POLICY)).charged
    row = board.ledger[KEY]

    assert ((1, "t1"), (1, "t2")) == (
        (first.number, first.todo.id),
        (second.number, second.todo.id),
    )
    assert False is await board.refund(first)
    assert row == board.ledger[KEY]


async def test_a_refunded_first_nudge_is_retried_after_the_first_step(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """A refunded nudge 1 waits backoff[0] from its stamp, then is charged as nudge 1 again."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    await board.refund(nudge)

    clock.set(nudge.charged_at + POLICY.backoff[0] - timedelta(microseconds=1))
    early = await board.charge_due(policy=POLICY)
    clock.advance(timedelta(microseconds=1))
    retry = await board.charge_due(policy=POLICY)

    assert () == early.charged
    assert [(1, T0 + minutes(8))] == [(n.number, n.charged_at) for n in retry.charged]


async def test_hold_tick_makes_charge_due_skip(board: MemoryBoard, clock: FakeClock) -> None:
    """While the tick is held charge_due decides nothing and says skipped; released, it charges."""
    clock.set(T0 + minutes(3))

    with board.hold_tick():
        held = await board.charge_due(policy=POLICY)
        rows_while_held = dict(board.ledger)
    released = await board.charge_due(policy=POLICY)

    assert (True, T0 + minutes(3), (), ()) == (held.skipped, held.now, held.charged, held.drained)
    assert {} == rows_while_held
    assert (False, 1) == (released.skipped, len(released.charged))


def test_hold_tick_cannot_be_taken_twice(board: MemoryBoard) -> None:
    """Holding a held tick is refused; the outer hold still releases it."""
    with board.hold_tick(), pytest.raises(BoardError, match="already held"):  # noqa: SIM117
        with board.hold_tick():
            pass

    with board.hold_tick():
        pass


# -- RecordingWake -------------------------------------------------------------------------


async def test_recording_wake_records_and_refuses(board: MemoryBoard, clock: FakeClock) -> None:
    """RecordingWake keeps sent nudges; with refuse set it raises WakeError and keeps it apart."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    wake = RecordingWake()

    receipt = await wake.wake(nudge)
    wake.refuse = True
    with pytest.raises(WakeError, match="ep/lane"):
        await wake.wake(nudge)

    assert True is await receipt
    assert ([nudge], [nudge], []) == (wake.sent, wake.refused, wake.lost)


async def test_recording_wake_that_reaches_nobody_loses_the_nudge(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """With reach False, RecordingWake takes the nudge, keeps it as lost and resolves False."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    wake = RecordingWake(reach=False)

    receipt = await wake.wake(nudge)

    assert False is await receipt
    assert ([], [], [nudge]) == (wake.sent, wake.refused, wake.lost)


def test_recording_wake_instances_do_not_share_lists() -> None:
    """Each RecordingWake starts with its own empty lists."""
    first, second = RecordingWake(), RecordingWake()
    first.sent.append(None)  # type: ignore[arg-type]

    assert [] == second.sent


def test_lease_default_is_five_minutes(board: MemoryBoard) -> None:
    """Without a lease argument a claim holds for five minutes."""
    todo = board.claim("t1", owner="c", at=T0)

    assert T0 + timedelta(minutes=5) == todo.lease_expires_at
