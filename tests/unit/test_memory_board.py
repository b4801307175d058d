"""The in-memory board: host verbs, error handling, the sweep's view and atomic charges."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from adapters.memory import BoardError, MemoryBoard
from stall_core import PacingPolicy, PairState, TodoRef, WakeError
from stall_testing import RecordingWake
from tests.support import T0, FakeClock, minutes

POLICY = PacingPolicy()


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
        # Deliveries and the progress log have no public view; copies of the private
        # tables are enough here.
        dict(board._deliveries),
        {key: list(claims) for key, claims in board._claims.items()},
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
    """pair_states reports the oldest gated todo, activity, receivers and the unabsorbed claim."""
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
            progress_at=T0 + minutes(3),
        ),
        PairState(
            endpoint_id="other",
            queue="side",
            oldest=TodoRef(id="q", created_at=T0, title="x"),
            endpoint_active=False,
            has_receiver=False,
            progress_at=None,
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


# -- progress: the claim log, absorbed by ticks ----------------------------------------------


@pytest.mark.parametrize("stamped", [-minutes(1), timedelta(0)], ids=["before", "at"])
async def test_a_claim_made_after_a_charge_is_progress_whatever_its_stamp(
    board: MemoryBoard, clock: FakeClock, stamped: timedelta
) -> None:
    """A claim made after the last nudge, stamped at or before it, resets the next charge only."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    clock.set(T0 + minutes(3))
    [first] = (await board.charge_due(policy=POLICY)).charged
    board.claim("t2", owner="c", at=first.charged_at + stamped)

    clock.set(T0 + minutes(4))
    reset = await board.charge_due(policy=POLICY)
    [after_reset] = board.pair_states()
    clock.set(T0 + minutes(9) - timedelta(microseconds=1))
    early = await board.charge_due(policy=POLICY)
    clock.set(T0 + minutes(9))
    due = await board.charge_due(policy=POLICY)

    # Without the claim, T0+4m would wait for nudge 2 at T0+8m; with it counted
    # twice, T0+9m-1us would charge nudge 1 again.
    assert [(1, T0 + minutes(4))] == [(n.number, n.charged_at) for n in reset.charged]
    assert None is after_reset.progress_at
    assert () == early.charged
    assert [(2, T0 + minutes(9))] == [(n.number, n.charged_at) for n in due.charged]


@pytest.mark.parametrize("first_tick", [minutes(1), minutes(3)], ids=["fresh", "charging"])
async def test_a_claim_before_any_row_is_absorbed_by_the_next_tick(
    board: MemoryBoard, clock: FakeClock, first_tick: timedelta
) -> None:
    """A claim on a pair with no ledger row is absorbed by the next tick: nudge 1, then 2."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    clock.set(T0 + minutes(1))
    board.claim("t2", owner="c")

    clock.set(T0 + first_tick)
    first = await board.charge_due(policy=POLICY)
    [after_first] = board.pair_states()
    charged = [(first.now, n.number) for n in first.charged]
    for at in (minutes(3), minutes(4), minutes(8) - timedelta(microseconds=1), minutes(8)):
        clock.set(T0 + at)
        outcome = await board.charge_due(policy=POLICY)
        charged += [(outcome.now, n.number) for n in outcome.charged]

    assert None is after_first.progress_at
    # Had the claim survived as progress, T0+4m would have charged nudge 1 again.
    assert [(T0 + minutes(3), 1), (T0 + minutes(8), 2)] == charged


async def test_a_drained_pair_has_its_claims_absorbed(board: MemoryBoard, clock: FakeClock) -> None:
    """The tick that drains a pair absorbs its claims: its next backlog sees no unabsorbed claim."""
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)
    clock.set(T0 + minutes(4))
    board.claim("t1", owner="c")
    [before_drain] = board.pair_states()

    drain = await board.charge_due(policy=POLICY)
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0 + minutes(4))
    [next_backlog] = board.pair_states()

    assert T0 + minutes(4) == before_drain.progress_at
    assert ((), (("ep", "lane"),)) == (drain.charged, drain.drained)
    assert None is next_backlog.progress_at


async def test_a_held_tick_absorbs_no_claim(board: MemoryBoard, clock: FakeClock) -> None:
    """A skipped tick absorbs nothing: the claim still counts as progress at the next charge."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)
    board.claim("t2", owner="c", at=T0 + minutes(3))

    clock.set(T0 + minutes(4))
    with board.hold_tick():
        await board.charge_due(policy=POLICY)
    [while_held] = board.pair_states()
    released = await board.charge_due(policy=POLICY)

    assert T0 + minutes(3) == while_held.progress_at
    assert [1] == [n.number for n in released.charged]


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
