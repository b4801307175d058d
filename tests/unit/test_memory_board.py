"""The in-memory board: host verbs, their errors, its reading of the host's rows, one loop's ticks.

What the ledger does with those rows (the SPEC-0038 scenarios, progress,
refunds) is the contract suite's (tests/contract/test_memory.py); the rules
themselves are tested on plain values (test_decide.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import pytest

from adapters.memory import BoardError, MemoryBoard
from stall_core import PacingPolicy, PairState, TodoRef, WakeError
from stall_testing import RecordingWake
from tests.support import T0, FakeClock, minutes

POLICY = PacingPolicy()
KEY = ("ep", "lane")
NAIVE = datetime(2026, 10, 15, 9, 0)


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


# -- errors name what was wrong and change nothing -------------------------------------


FAILING_VERBS: list[tuple[str, Callable[[MemoryBoard], object], type[Exception], str]] = [
    ("duplicate endpoint", lambda b: b.add_endpoint("ep"), BoardError, "endpoint 'ep'"),
    ("empty endpoint id", lambda b: b.add_endpoint(""), BoardError, "endpoint id"),
    ("bad endpoint state", lambda b: b.add_endpoint("new", state="gone"), BoardError, "'gone'"),
    ("unknown endpoint", lambda b: b.set_endpoint_state("nope", "paused"), BoardError, "nope"),
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
    ("hook queues, a string", lambda b: add_hook(b, "h9", "ep", queues="l"), BoardError, "string"),
    ("unknown hook enabled", lambda b: b.set_hook_enabled("h9", False), BoardError, "'h9'"),
    ("unknown hook queues", lambda b: b.set_hook_queues("h9", None), BoardError, "'h9'"),
    ("hook filter, a string", lambda b: b.set_hook_queues("h1", "lane"), BoardError, "string"),
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
        lambda b: b.create_todo("t9", endpoint_id="ep", queue="q", created_at=T0, delivery_id="x"),
        BoardError,
        "'x'",
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
    ("claim a claimed todo", lambda b: b.claim("t2", owner="d"), BoardError, "claimed, not"),
    ("complete pending todo", lambda b: b.complete("t1"), BoardError, "pending, not claimed"),
    ("complete unknown todo", lambda b: b.complete("t9"), BoardError, "'t9'"),
    ("requeue pending todo", lambda b: b.requeue("t1"), BoardError, "pending, not claimed"),
    ("requeue unknown todo", lambda b: b.requeue("t9", unstamp=True), BoardError, "'t9'"),
    ("claim done todo", lambda b: b.claim("t3", owner="c"), BoardError, "'t3' is done"),
    ("complete done todo", lambda b: b.complete("t3"), BoardError, "'t3' is done"),
    ("requeue done todo", lambda b: b.requeue("t3"), BoardError, "'t3' is done"),
    ("move unknown todo", lambda b: b.move_todo("t9", "q"), BoardError, "'t9'"),
    ("delete unknown todo", lambda b: b.delete_todo("t9"), BoardError, "'t9'"),
    ("verify unknown delivery", lambda b: b.set_delivery_verified("d9", True), BoardError, "'d9'"),
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
    for todo_id in ("t2", "t3"):  # one claimed todo, one done
        board.create_todo(todo_id, endpoint_id="ep", queue="lane", created_at=T0)
        board.claim(todo_id, owner="c", at=T0)
    board.complete("t3")
    before = snapshot(board)

    with pytest.raises(error) as info:
        verb(board)

    assert issubclass(BoardError, ValueError)
    assert named in str(info.value)
    assert before == snapshot(board)


# -- verbs that apply ---------------------------------------------------------------------


def test_a_todo_is_created_pending_claimed_and_given_back_with_its_columns(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """create, claim (the board's clock unless told, a 5-minute lease) and requeue set columns."""
    created = board.create_todo(
        "t2", endpoint_id="ep", queue="q", created_at=T0, delivery_id="du", title="hello"
    )
    clock.set(T0 + minutes(4))
    claimed = board.claim("t2", owner="c")
    requeued = board.requeue("t2")
    reclaimed = board.claim("t2", owner="d", at=T0 + minutes(5), lease=minutes(7))

    assert ("pending", "hello", "du", None, 0, 0) == (
        created.state,
        created.title,
        created.delivery_id,
        created.claimed_at,
        created.attempt,
        created.ring_attempts,
    )
    assert ("claimed", T0 + minutes(4), "c", T0 + minutes(9)) == (
        claimed.state,
        claimed.claimed_at,
        claimed.claim_owner,
        claimed.lease_expires_at,
    )
    assert ("pending", T0 + minutes(4), None, None, 1) == (
        requeued.state,
        requeued.claimed_at,
        requeued.claim_owner,
        requeued.lease_expires_at,
        requeued.attempt,
    )
    assert (T0 + minutes(12), reclaimed) == (reclaimed.lease_expires_at, board.todos["t2"])


@pytest.mark.parametrize("unstamp", [False, True])
def test_complete_and_requeue_keep_claimed_at_or_clear_it(
    board: MemoryBoard, unstamp: bool
) -> None:
    """complete and requeue keep claimed_at, or clear it with unstamp (a host that forgets)."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    for todo_id in ("t1", "t2"):
        board.claim(todo_id, owner="c", at=T0 + minutes(1))

    done = board.complete("t1", unstamp=unstamp)
    back = board.requeue("t2", unstamp=unstamp)

    stamp = None if unstamp else T0 + minutes(1)
    assert ("done", stamp, None, None) == (
        done.state,
        done.claimed_at,
        done.claim_owner,
        done.lease_expires_at,
    )
    assert ("pending", stamp, 1) == (back.state, back.claimed_at, back.attempt)


def test_claim_next_takes_the_oldest_pending_todo_whatever_its_gate(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """claim_next: oldest first, ties by id, unverified too (pull ignores the gate); then None."""
    board.create_todo("young", endpoint_id="ep", queue="lane", created_at=T0 + minutes(5))
    board.create_todo("t0", endpoint_id="ep", queue="lane", created_at=T0)
    board.create_todo(
        "old-unverified",
        endpoint_id="ep",
        queue="lane",
        created_at=T0 - minutes(5),
        delivery_id="du",
    )
    board.create_todo("elsewhere", endpoint_id="ep", queue="other", created_at=T0 - minutes(60))
    clock.set(T0 + minutes(6))

    order = [board.claim_next("ep", "lane", owner="c") for _ in range(5)]

    assert ["old-unverified", "t0", "t1", "young", None] == [t.id if t else None for t in order]
    assert T0 + minutes(6) == board.todos["t0"].claimed_at


def test_move_delete_and_ring(board: MemoryBoard) -> None:
    """move_todo changes the queue only; delete_todo removes any todo; ring counts a ring."""
    before = board.todos["t1"]
    board.ring("t1", at=T0 + minutes(1))
    moved = board.move_todo("t1", "elsewhere")
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0)
    board.claim("t2", owner="c", at=T0)

    assert ("elsewhere", 1, T0 + minutes(1)) == (
        moved.queue,
        moved.ring_attempts,
        moved.last_ringed_at,
    )
    assert (before.id, before.created_at, before.state) == (moved.id, moved.created_at, moved.state)
    assert ["t1"] == [r.todo_id for r in board.rings]
    assert (["t1", "t2"], {}) == (
        [board.delete_todo(t).id for t in ("t1", "t2")],
        dict(board.todos),
    )


def test_hooks_count_failures_disable_and_enable(board: MemoryBoard) -> None:
    """Failures count up, a success resets; disabling records when and why, enabling clears."""
    counts = [
        board.record_hook_delivery("h1", ok=ok).consecutive_failures
        for ok in (False, False, True, False)
    ]
    disabled = board.set_hook_enabled("h1", False, at=T0, reason="10 failures")
    enabled = board.set_hook_enabled("h1", True)

    assert [1, 2, 0, 1] == counts
    assert (False, T0, "10 failures", 1) == (
        disabled.enabled,
        disabled.disabled_at,
        disabled.disabled_reason,
        disabled.consecutive_failures,
    )
    assert (True, None, None, 0) == (
        enabled.enabled,
        enabled.disabled_at,
        enabled.disabled_reason,
        enabled.consecutive_failures,
    )


def test_hooks_covering_lists_the_pairs_receivers_by_id(board: MemoryBoard) -> None:
    """hooks_covering: enabled hooks of the endpoint whose filter (an iterable) covers the queue."""
    add_hook(board, "h0", "ep", queues=(q for q in ["lane", "x"]))
    add_hook(board, "h2", "ep", queues=["x"])
    add_hook(board, "h3", "ep", enabled=False)
    add_hook(board, "h4", "other")

    assert ["h0", "h1"] == [h.id for h in board.hooks_covering("ep", "lane")]
    assert ["h0", "h1", "h2"] == [h.id for h in board.hooks_covering("ep", "x")]
    assert ["h4"] == [h.id for h in board.hooks_covering("other", "lane")]
    assert (("lane", "x"), None) == (board.hooks["h0"].queues, board.hooks["h1"].queues)


def test_state_is_read_only(board: MemoryBoard) -> None:
    """The inspectable tables are read-only views."""
    with pytest.raises(TypeError):
        board.todos["x"] = board.todos["t1"]  # type: ignore[index]
    with pytest.raises(TypeError):
        board.ledger["ep", "lane"] = None  # type: ignore[index]


# -- the sweep's view -----------------------------------------------------------------------


def test_pair_states_read_the_host_rows_by_the_cores_rules(board: MemoryBoard) -> None:
    """Work past the gate (not quarantine, names that fit), activity, receivers, latest claim."""
    board.create_todo(
        "u-old", endpoint_id="ep", queue="lane", created_at=T0 - minutes(9), delivery_id="du"
    )
    board.create_todo("claimed", endpoint_id="ep", queue="lane", created_at=T0 - minutes(9))
    board.claim("claimed", owner="c", at=T0 + minutes(3))
    board.create_todo("q", endpoint_id="other", queue="side", created_at=T0, title="x")
    board.set_endpoint_state("other", "paused")
    board.create_todo("u", endpoint_id="ep", queue="open", created_at=T0, delivery_id="du")
    board.create_todo("held", endpoint_id="ep", queue="quarantine", created_at=T0)
    board.create_todo("long", endpoint_id="ep", queue="q" * 1999, created_at=T0)

    states = {s.key: s for s in board.pair_states()}
    board.set_delivery_verified("du", True)  # verified late: the gate passes now
    verified = {s.key: s for s in board.pair_states()}

    assert (
        PairState(
            endpoint_id="ep",
            queue="lane",
            oldest=TodoRef(id="t1", created_at=T0),
            endpoint_active=True,
            has_receiver=True,
            latest_claim=T0 + minutes(3),
            named_departed=False,
        )
        == states["ep", "lane"]
    )
    assert (
        PairState(
            endpoint_id="other",
            queue="side",
            oldest=TodoRef(id="q", created_at=T0, title="x"),
            endpoint_active=False,
            has_receiver=False,
        )
        == states["other", "side"]
    )
    # Held by the gate, in quarantine, or names past 2,000 bytes: no work.
    assert [None, None, None] == [
        states["ep", q].oldest for q in ("open", "quarantine", "q" * 1999)
    ]
    assert TodoRef(id="u", created_at=T0) == verified["ep", "open"].oldest


async def test_pair_states_follow_the_named_todo_and_rows_without_work(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """named_departed: claimed yes, requeued no, moved yes; a row without work keeps its pair."""
    board.create_todo("t2", endpoint_id="ep", queue="lane", created_at=T0 + minutes(1))
    clock.set(T0 + minutes(3))
    await board.charge_due(policy=POLICY)

    def seen() -> tuple[bool, bool]:
        state = {s.key: s for s in board.pair_states()}[KEY]
        return state.named_departed, state.oldest is None

    steps = [seen()]
    board.claim("t1", owner="c")
    steps.append(seen())
    board.requeue("t1", unstamp=True)
    steps.append(seen())
    board.move_todo("t1", "elsewhere")
    board.delete_todo("t2")
    steps.append(seen())

    assert [(False, False), (True, False), (False, False), (True, True)] == steps


# -- ticks on one event loop -----------------------------------------------------------------


async def test_charge_due_applies_the_plan_at_the_board_clock_as_a_full_pass(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """charge_due writes a row per charge and judges every pair with pending work or a row."""
    board.create_todo("u", endpoint_id="ep", queue="open", created_at=T0, delivery_id="du")
    clock.set(T0 + minutes(3))

    outcome = await board.charge_due(policy=POLICY)

    assert [("ep", "lane", "t1", 1, T0 + minutes(3))] == [
        (n.endpoint_id, n.queue, n.todo.id, n.number, n.charged_at) for n in outcome.charged
    ]
    assert (T0 + minutes(3), False, "full", 2) == (
        outcome.now,
        outcome.skipped,
        outcome.kind,
        outcome.judged,
    )
    assert (1, T0 + minutes(3), "t1") == (
        board.ledger[KEY].nudges,
        board.ledger[KEY].last_nudged_at,
        board.ledger[KEY].named_todo,
    )


async def test_concurrent_charges_never_double_charge(board: MemoryBoard, clock: FakeClock) -> None:
    """Charges gathered at one instant charge each due pair once; a step later, nudge 2 once."""
    for i in range(6):
        board.create_todo(f"x{i}", endpoint_id="ep", queue=f"q{i}", created_at=T0)

    clock.set(T0 + minutes(3))
    first = await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(5)))
    clock.set(T0 + minutes(8))
    second = await asyncio.gather(*(board.charge_due(policy=POLICY) for _ in range(3)))

    assert [4, 3, 0, 0, 0] == [len(o.charged) for o in first]
    assert 7 == len({n.key for o in first for n in o.charged})
    assert [[2, 2, 2, 2], [2, 2, 2], []] == [[n.number for n in o.charged] for o in second]
    assert 7 == len({n.key for o in second for n in o.charged})


async def test_a_naive_board_clock_fails_the_charge_and_writes_nothing() -> None:
    """A board clock returning a naive datetime makes charge_due raise naming clock(), unchanged."""
    board = MemoryBoard(clock=lambda: NAIVE + minutes(3))
    board.add_endpoint("ep")
    add_hook(board, "h1", "ep")
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0)

    with pytest.raises(ValueError, match=r"clock\(\)"):
        await board.charge_due(policy=POLICY)

    assert {} == dict(board.ledger)


async def test_refund_writes_the_core_refunded_row_or_nothing(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """refund applies refunded_row: the count goes back once; a second refund changes nothing."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged

    first = await board.refund(nudge)
    after_first = snapshot(board)
    second = await board.refund(nudge)

    assert (True, False) == (first, second)
    assert (0, T0 + minutes(3)) == (board.ledger[KEY].nudges, board.ledger[KEY].last_nudged_at)
    assert after_first == snapshot(board)


async def test_a_held_tick_skips_and_cannot_be_held_twice(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """While the tick is held charge_due decides nothing and says skipped; released, it charges."""
    clock.set(T0 + minutes(3))

    with board.hold_tick():
        held = await board.charge_due(policy=POLICY)
        while_held = dict(board.ledger)
        with pytest.raises(BoardError, match="already held"), board.hold_tick():
            pass
    released = await board.charge_due(policy=POLICY)

    assert (True, T0 + minutes(3), (), (), None, 0) == (
        held.skipped,
        held.now,
        held.charged,
        held.cleared,
        held.kind,
        held.judged,
    )
    assert {} == while_held
    assert (False, 1) == (released.skipped, len(released.charged))


# -- RecordingWake ------------------------------------------------------------------------------


async def test_recording_wake_records_sent_refused_and_lost_nudges(
    board: MemoryBoard, clock: FakeClock
) -> None:
    """RecordingWake keeps each nudge where it went: sent (True), refused (WakeError), lost."""
    clock.set(T0 + minutes(3))
    [nudge] = (await board.charge_due(policy=POLICY)).charged
    wake, lossy = RecordingWake(), RecordingWake(reach=False)

    receipt = await wake.wake(nudge)
    wake.refuse = True
    with pytest.raises(WakeError, match="ep/lane"):
        await wake.wake(nudge)
    lost = await lossy.wake(nudge)

    assert (True, False) == (await receipt, await lost)
    assert ([nudge], [nudge], []) == (wake.sent, wake.refused, wake.lost)
    assert ([], [], [nudge]) == (lossy.sent, lossy.refused, lossy.lost)
