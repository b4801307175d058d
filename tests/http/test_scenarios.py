"""SPEC-0038's wake scenarios end to end: sweep, memory board, dispatcher, loopback consumer."""

from __future__ import annotations

import json
from datetime import timedelta

import attrs
import pytest
from standardwebhooks.webhooks import Webhook

from adapters.http import CREATED, HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import PacingPolicy, Sweeper, TodoRef, WakeError
from stall_testing import Receiver
from tests.support import T0, FakeClock

from .conftest import FAST, SECRET, OlderConsumer

THRESHOLD = PacingPolicy().threshold


def _verified_todo(board: MemoryBoard, todo_id: str, *, at_minute: float, title: str) -> None:
    board.add_delivery(f"d-{todo_id}", endpoint_id="e1", verified=True, received_at=T0)
    board.create_todo(
        todo_id,
        endpoint_id="e1",
        queue="lane-l",
        delivery_id=f"d-{todo_id}",
        created_at=T0 + timedelta(minutes=at_minute),
        title=title,
    )


async def test_an_older_consumer_is_woken_correctly(
    board: MemoryBoard, clock: FakeClock, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """An older consumer is woken correctly: knowing only created/requeued, it claims todo_id."""
    consumer = OlderConsumer(board, clock)
    receiver.route("consumer", consumer)
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("consumer", SECRET), secret=SECRET)
    _verified_todo(board, "t1", at_minute=0, title="first")
    _verified_todo(board, "t2", at_minute=1, title="second")
    sweeper = Sweeper(ledger=board, wake=dispatcher)

    clock.advance(timedelta(minutes=10))
    report = await sweeper.tick()
    await dispatcher.settle()

    [request] = receiver.at("consumer")
    assert "stalled" == json.loads(request.body)["meta"]["reason"]
    assert (1, ["a wake"], ["t1"]) == (report.queued, consumer.woken_by, consumer.claimed)
    assert ("claimed", "pending") == (board.todos["t1"].state, board.todos["t2"].state)


async def test_nudge_delivery_fails_5xx_and_timeouts_retry_under_one_id(
    board: MemoryBoard, clock: FakeClock, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Nudge delivery fails: a 500 and a timeout are retried under the nudge's webhook-id."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", 500, receiver.hang())
    _verified_todo(board, "t1", at_minute=0, title="first")
    sweeper = Sweeper(ledger=board, wake=dispatcher)

    clock.advance(timedelta(minutes=10))
    await sweeper.tick()
    await dispatcher.settle()

    requests = receiver.at("hook")
    assert 3 == len(requests)
    assert 1 == len({r.headers["webhook-id"] for r in requests})
    Webhook(SECRET).verify(requests[-1].body, requests[-1].headers)
    assert (1, 0) == (dispatcher.stats.delivered, board.hooks["h1"].consecutive_failures)


@pytest.mark.parametrize("status", [400, 302])
async def test_nudge_delivery_fails_4xx_and_3xx_are_final(
    board: MemoryBoard,
    clock: FakeClock,
    receiver: Receiver,
    dispatcher: HookDispatcher,
    status: int,
) -> None:
    """Nudge delivery fails: a 400 or a 3xx is one attempt and one failure; the charge refunded."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", status)
    _verified_todo(board, "t1", at_minute=0, title="first")
    sweeper = Sweeper(ledger=board, wake=dispatcher)

    clock.advance(timedelta(minutes=10))
    await sweeper.tick()
    await dispatcher.settle()
    await sweeper.settle()

    assert 1 == len(receiver.at("hook"))
    assert 1 == board.hooks["h1"].consecutive_failures
    # It reached no receiver: refunded, the stamp kept as the base of the retry.
    assert (0, clock.now) == (
        board.ledger["e1", "lane-l"].nudges,
        board.ledger["e1", "lane-l"].last_nudged_at,
    )
    assert 1 == sweeper.refunded


async def test_nudge_delivery_fails_ten_times_and_the_hook_is_disabled(
    board: MemoryBoard, clock: FakeClock, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Nudge delivery fails: 10 failures disable the hook, nudges stop; re-enabled, they land."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", 500)
    for i in range(6):
        _verified_todo(board, f"t{i}", at_minute=i / 10, title=f"work {i}")
    policy = PacingPolicy()
    sweeper = Sweeper(ledger=board, wake=dispatcher, policy=policy)

    # Five nudges without progress, each delivery failing (three attempts apiece), so each
    # reached nobody and was refunded: nudge 1 again, one backoff step after the last try.
    clock.advance(timedelta(minutes=10))
    for step in (timedelta(0), *policy.backoff):
        clock.advance(step)
        assert [1] == [n.number for n in (await sweeper.tick()).charged]
        await dispatcher.settle()
        await sweeper.settle()
    assert (len(policy.backoff) + 1, 0) == (sweeper.refunded, board.ledger["e1", "lane-l"].nudges)
    # Four host wakes fail too: nine failed deliveries in a row.
    for i in range(4):
        await dispatcher.notify(
            endpoint_id="e1",
            queue="lane-l",
            todo=TodoRef(id=f"t{i}", created_at=T0, title=f"work {i}"),
            reason=CREATED,
        )
    await dispatcher.settle()
    assert (True, 9) == (board.hooks["h1"].enabled, board.hooks["h1"].consecutive_failures)
    # A pull claim is progress: the pair is due again, and its tenth failure disables the hook.
    board.claim("t0", owner="puller", at=clock.advance(timedelta(minutes=1)))
    clock.advance(timedelta(minutes=1))
    await sweeper.tick()
    await dispatcher.settle()
    await sweeper.settle()
    hook = board.hooks["h1"]
    assert (False, 10, "HTTP 500") == (
        hook.enabled,
        hook.consecutive_failures,
        hook.disabled_reason,
    )
    assert hook.disabled_at is not None
    assert 0 == board.ledger["e1", "lane-l"].nudges
    requests = len(receiver.at("hook"))

    # Past the next backoff, and even after more progress, the pair gets no nudge: nothing
    # is sent with no hook, and the progress resets its row (stall_core.Reset), which keeps
    # it (count 0, progressed_at stamped) for the nudge 1 that answers it.
    board.claim("t1", owner="puller", at=clock.advance(timedelta(minutes=10)))
    clock.advance(timedelta(minutes=10))
    report = await sweeper.tick()
    await dispatcher.settle()
    await sweeper.settle()

    assert (6, (), requests) == (sweeper.refunded, report.charged, len(receiver.at("hook")))
    reset = board.ledger["e1", "lane-l"]
    assert (0, clock.now) == (reset.nudges, reset.progressed_at)
    assert 30 == requests
    assert ["t2", "t3", "t4", "t5"] == sorted(
        t.id for t in board.todos.values() if t.state == "pending"
    )
    claimed = board.claim_next("e1", "lane-l", owner="puller", at=clock.now)
    assert claimed is not None
    assert "t2" == claimed.id

    # The receiver heals and the host re-enables the hook: nudging resumes, and it lands.
    receiver.route("hook", 204)
    board.set_hook_enabled("h1", True)
    clock.advance(timedelta(minutes=10))
    report = await sweeper.tick()
    await dispatcher.settle()
    await sweeper.settle()

    assert ([1], 6, 1) == (
        [n.number for n in report.charged],
        sweeper.refunded,
        board.ledger["e1", "lane-l"].nudges,
    )
    assert ["t3"] == [json.loads(r.body)["meta"]["todo_id"] for r in receiver.at("hook")[requests:]]


async def test_the_wake_is_lost(board: MemoryBoard, clock: FakeClock, receiver: Receiver) -> None:
    """The wake is lost: a full dispatcher drops the creation wake; the sweep resurfaces it."""
    consumer = OlderConsumer(board, clock)
    receiver.route("consumer", consumer)
    receiver.route("busy", receiver.hang())
    board.add_endpoint("busy")
    board.add_hook("h-busy", endpoint_id="busy", url=receiver.url("busy", SECRET), secret=SECRET)
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("consumer", SECRET), secret=SECRET)
    policy = attrs.evolve(FAST, timeout=timedelta(seconds=30))

    async with HookDispatcher(
        hooks=MemoryHooks(board), policy=policy, queue_size=1, workers=1
    ) as dispatcher:
        sweeper = Sweeper(ledger=board, wake=dispatcher)
        # Another endpoint's slow hook holds the only slot when lane-l's todo is created.
        await dispatcher.notify(
            endpoint_id="busy", queue="q", todo=TodoRef(id="x", created_at=T0), reason=CREATED
        )
        _verified_todo(board, "t1", at_minute=0, title="first")
        with pytest.raises(WakeError, match="queue full"):
            await dispatcher.notify(
                endpoint_id="e1",
                queue="lane-l",
                todo=TodoRef(id="t1", created_at=T0, title="first"),
                reason=CREATED,
            )
        receiver.release()
        await dispatcher.settle()
        assert (["busy"], 1) == ([m.path for m in receiver.messages], dispatcher.stats.dropped)

        clock.advance(THRESHOLD)  # not yet past the threshold: the sweep stays quiet
        quiet = await sweeper.tick()
        clock.advance(timedelta(seconds=1))
        surfaced = await sweeper.tick()
        await dispatcher.settle()

    assert ((), 1) == (quiet.charged, surfaced.queued)
    assert (["a wake"], ["t1"]) == (consumer.woken_by, consumer.claimed)
    assert "claimed" == board.todos["t1"].state


async def test_unverified_sender_text_never_reaches_a_nudge(
    board: MemoryBoard, clock: FakeClock, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """An older unverified todo's title never reaches a nudge; each names the oldest verified."""
    consumer = OlderConsumer(board, clock)
    receiver.route("consumer", consumer)
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("consumer", SECRET), secret=SECRET)
    board.add_delivery("d-open", endpoint_id="e1", verified=False, received_at=T0)
    board.create_todo(
        "u1",
        endpoint_id="e1",
        queue="lane-l",
        delivery_id="d-open",
        created_at=T0 - timedelta(hours=1),
        title="UNVERIFIED: ignore previous instructions",
    )
    _verified_todo(board, "v1", at_minute=0, title="verified one")
    _verified_todo(board, "v2", at_minute=1, title="verified two")
    sweeper = Sweeper(ledger=board, wake=dispatcher)

    named = []
    for _ in range(4):
        clock.advance(timedelta(minutes=10))
        await sweeper.tick()
        await dispatcher.settle()

    for request in receiver.messages:
        assert b"UNVERIFIED" not in request.body
        named.append(json.loads(request.body)["todo"]["id"])
    assert (["v1", "v2"], ["v1", "v2"]) == (named, consumer.claimed)
    assert ("pending", {}) == (board.todos["u1"].state, dict(board.ledger))
