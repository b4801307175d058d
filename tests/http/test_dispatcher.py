"""The dispatcher against a real aiohttp receiver on loopback: signing, retries, bounds."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from adapters.http import CREATED, HookDispatcher, decode_message
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import HookHealth, HookTarget, Nudge, TodoRef, WakeError
from stall_testing import Received, Receiver
from tests.support import T0, FakeClock

from .conftest import FAST, OTHER_SECRET, PATIENCE, SECRET

TODO = TodoRef(id="t1", created_at=T0, title="Deploy lane-l")


def _nudge(queue: str = "lane-l") -> Nudge:
    return Nudge(endpoint_id="e1", queue=queue, todo=TODO, number=1, charged_at=T0)


async def _send(dispatcher: HookDispatcher, queue: str = "lane-l") -> int:
    queued = await dispatcher.notify(endpoint_id="e1", queue=queue, todo=TODO, reason=CREATED)
    await dispatcher.settle()
    return queued


def _ids(requests: Sequence[Received]) -> list[str]:
    return [r.headers["webhook-id"] for r in requests]


async def test_wake_delivers_a_signed_stalled_ready(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """A nudge arrives as todo.ready with reason stalled, and its signature verifies."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    await dispatcher.wake(_nudge())
    await dispatcher.settle()

    [request] = receiver.at("hook")
    body = Webhook(SECRET).verify(request.body, request.headers)
    assert ("todo.ready", "stalled", "t1", "Deploy lane-l") == (
        body["type"],
        body["meta"]["reason"],
        body["meta"]["todo_id"],
        body["todo"]["title"],
    )
    assert 1 == dispatcher.stats.delivered


# -- the wake's receipt: did the nudge reach any receiver? -----------------------------


async def test_wake_receipt_is_true_once_a_hook_answers_2xx(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """The receipt of a nudge its hook accepted resolves True."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    receipt = await dispatcher.wake(_nudge())

    assert True is await asyncio.wait_for(receipt, PATIENCE)


async def test_wake_receipt_is_true_after_a_retry_succeeds(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """A 500 then a 204 is a nudge that reached its receiver: True."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", 500)

    receipt = await dispatcher.wake(_nudge())

    assert True is await asyncio.wait_for(receipt, PATIENCE)
    assert 2 == len(receiver.at("hook"))


async def test_wake_receipt_is_false_when_every_attempt_fails(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """A nudge whose hook failed every attempt reached nobody: False, once the retries ran out."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", 500)

    receipt = await dispatcher.wake(_nudge())

    assert False is await asyncio.wait_for(receipt, PATIENCE)
    assert 3 == len(receiver.at("hook"))


async def test_wake_receipt_is_true_when_one_of_two_hooks_answers(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """One hook answering 2xx is enough, even while the other is still failing."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("bad", SECRET), secret=SECRET)
    board.add_hook("h2", endpoint_id="e1", url=receiver.url("good", SECRET), secret=SECRET)
    receiver.route("bad", receiver.hang())

    receipt = await dispatcher.wake(_nudge())
    reached = await asyncio.wait_for(receipt, PATIENCE)
    bad_unfinished = 0 < dispatcher.outstanding
    receiver.release()
    await dispatcher.settle()

    assert (True, True) == (reached, bad_unfinished)


async def test_wake_receipt_is_false_when_abandoned_at_close(
    board: MemoryBoard, receiver: Receiver, board_hooks: MemoryHooks
) -> None:
    """A nudge still in flight when close's deadline passes reached nobody: False."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", receiver.hang())
    policy = attrs.evolve(FAST, timeout=timedelta(seconds=30))
    dispatcher = HookDispatcher(hooks=board_hooks, policy=policy)
    await dispatcher.start()
    receipt = await dispatcher.wake(_nudge())
    await receiver.wait_for(1, "hook")

    await dispatcher.close(deadline=0.05)

    assert False is await asyncio.wait_for(receipt, PATIENCE)
    assert 1 == dispatcher.stats.abandoned


async def test_injected_clock_stamps_sent_at_and_timestamp(board: MemoryBoard) -> None:
    """The injected clock stamps meta.sent_at and webhook-timestamp, both under the signature."""
    clock = FakeClock(datetime(2026, 10, 15, 12, 30, 15, tzinfo=UTC))

    async with (
        Receiver(clock=clock) as receiver,  # it checks timestamps on the dispatcher's clock
        HookDispatcher(hooks=MemoryHooks(board), policy=FAST, clock=clock) as dispatcher,
    ):
        board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
        await _send(dispatcher)

    [request] = receiver.at("hook")
    expected = Webhook(SECRET).sign(request.headers["webhook-id"], clock.now, request.body.decode())
    assert (expected, str(int(clock.now.timestamp()))) == (
        request.headers["webhook-signature"],
        request.headers["webhook-timestamp"],
    )
    assert clock.now == decode_message(request.body).meta.sent_at


async def test_every_hook_covering_the_queue_gets_its_own_signature(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Each covering hook verifies with its own secret; a hook for another queue gets nothing."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("a", SECRET), secret=SECRET)
    board.add_hook(
        "h2",
        endpoint_id="e1",
        url=receiver.url("b", OTHER_SECRET),
        secret=OTHER_SECRET,
        queues=["lane-l"],
    )
    board.add_hook(
        "h3", endpoint_id="e1", url=receiver.url("c", SECRET), secret=SECRET, queues=["other"]
    )

    assert 2 == await _send(dispatcher)

    [a], [b] = receiver.at("a"), receiver.at("b")
    Webhook(SECRET).verify(a.body, a.headers)
    Webhook(OTHER_SECRET).verify(b.body, b.headers)
    assert ["a", "b"] == sorted(m.path for m in receiver.messages)


async def test_webhook_id_is_unique_per_message(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Two messages to one hook carry two different ids."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    await _send(dispatcher)
    await _send(dispatcher)

    assert 2 == len(set(_ids(receiver.at("hook"))))


async def test_5xx_is_retried_with_the_same_id(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Two 500s then a 204: three attempts, one id, a delivery, and no failure booked."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    board.record_hook_delivery("h1", ok=False)
    receiver.script("hook", 500, 503)

    await _send(dispatcher)

    requests = receiver.at("hook")
    assert 3 == len(requests)
    assert 1 == len(set(_ids(requests)))
    assert 1 == len({r.body for r in requests})
    for request in requests:
        Webhook(SECRET).verify(request.body, request.headers)
    assert (1, 0, 2) == (
        dispatcher.stats.delivered,
        dispatcher.stats.failed,
        dispatcher.stats.retries,
    )
    assert 0 == board.hooks["h1"].consecutive_failures


@pytest.mark.parametrize("status", [408, 429])
async def test_408_and_429_are_retried(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher, status: int
) -> None:
    """Request Timeout and Too Many Requests (with Retry-After) are retried."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async def busy(received: Received, request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, headers={"Retry-After": "1"})

    receiver.script("hook", busy)

    await _send(dispatcher)

    assert 2 == len(receiver.at("hook"))
    assert 1 == dispatcher.stats.delivered


async def test_all_attempts_failing_count_one_failure(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Three 500s are three attempts and one failed delivery."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", 500)

    await _send(dispatcher)

    assert 3 == len(receiver.at("hook"))
    assert (1, 1) == (dispatcher.stats.failed, board.hooks["h1"].consecutive_failures)


async def test_redirect_is_final_and_not_followed(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """A 302 is neither retried nor followed to its Location."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    async def moved(received: Received, request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": receiver.url("elsewhere", SECRET)})

    receiver.route("hook", moved)

    await _send(dispatcher)

    assert ["hook"] == [m.path for m in receiver.messages]
    assert 1 == board.hooks["h1"].consecutive_failures


async def test_connection_refused_is_retried_then_booked(board: MemoryBoard) -> None:
    """A hook whose port accepts no connection is tried three times and booked once."""
    async with Receiver() as silent:
        url = silent.url("hook", SECRET)
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)

    async with HookDispatcher(hooks=MemoryHooks(board), policy=FAST) as dispatcher:
        await _send(dispatcher)

    assert (2, 1) == (dispatcher.stats.retries, board.hooks["h1"].consecutive_failures)


async def test_success_resets_the_failure_count(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """Failures in a row are forgotten after one delivered message."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", 400, 400, 400)

    for _ in range(3):
        await _send(dispatcher)
    failures_before = board.hooks["h1"].consecutive_failures
    await _send(dispatcher)

    assert (3, 0) == (failures_before, board.hooks["h1"].consecutive_failures)


class _CrashingDispatcher(HookDispatcher):
    """The real dispatcher with its HTTP step broken, as an unforeseen client bug would."""

    async def _post(self, delivery: object) -> object:  # type: ignore[override]
        raise RuntimeError("unforeseen")


async def test_crashing_deliveries_are_booked_and_disable_the_hook(board: MemoryBoard) -> None:
    """A delivery that crashes counts as a failed one, so ten disable the hook; workers live on."""
    board.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1:9/hook", secret=SECRET)

    async with _CrashingDispatcher(hooks=MemoryHooks(board), policy=FAST, workers=1) as crashing:
        for _ in range(10):
            await _send(crashing)
        after = await _send(crashing)

    hook = board.hooks["h1"]
    assert (False, 10, 0) == (hook.enabled, hook.consecutive_failures, after)
    assert "delivery crashed (RuntimeError)" == hook.disabled_reason
    assert 10 == crashing.stats.failed


async def test_endless_response_body_is_not_read_to_the_end(
    board: MemoryBoard, receiver: Receiver, board_hooks: MemoryHooks
) -> None:
    """A 200 with an endless body is a delivery; only a bounded prefix is read."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    sent: list[int] = []
    hung_up = asyncio.Event()

    async def endless(received: Received, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            while True:
                await response.write(chunk)
                sent.append(len(chunk))
        except (ConnectionError, RuntimeError):
            hung_up.set()
        return response

    receiver.route("hook", endless)
    policy = attrs.evolve(FAST, max_response_bytes=4096, timeout=timedelta(seconds=30))

    async with HookDispatcher(hooks=board_hooks, policy=policy) as dispatcher:
        await _send(dispatcher)
        await asyncio.wait_for(hung_up.wait(), 5)

    assert 1 == dispatcher.stats.delivered
    assert sum(sent) < 64 * 2**20


async def test_full_queue_drops_counts_and_raises(
    board: MemoryBoard,
    receiver: Receiver,
    board_hooks: MemoryHooks,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With every slot taken, a wake is dropped, counted, logged and reported as WakeError."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", receiver.hang())
    policy = attrs.evolve(FAST, timeout=timedelta(seconds=30))

    async with HookDispatcher(
        hooks=board_hooks, policy=policy, queue_size=2, workers=1
    ) as dispatcher:
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
        with pytest.raises(WakeError, match="queue full"):
            await dispatcher.wake(_nudge())
        outstanding = dispatcher.outstanding
        receiver.release()
        await dispatcher.settle()

    assert (2, 1, 2) == (outstanding, dispatcher.stats.dropped, dispatcher.stats.delivered)
    assert "dropped e1/lane-l todo t1 (stalled)" in caplog.text


async def test_settle_waits_for_retries(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """settle returns only after a delivery's pending retries have run."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", 500, 500)

    await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
    await dispatcher.settle()

    assert (3, 0, 1) == (
        len(receiver.at("hook")),
        dispatcher.outstanding,
        dispatcher.stats.delivered,
    )


async def test_close_cancels_what_the_deadline_does_not_cover(
    board: MemoryBoard, receiver: Receiver, board_hooks: MemoryHooks
) -> None:
    """close waits up to its deadline, then abandons in-flight work and refuses new wakes."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", receiver.hang())
    policy = attrs.evolve(FAST, timeout=timedelta(seconds=30))
    dispatcher = HookDispatcher(hooks=board_hooks, policy=policy)
    await dispatcher.start()
    await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
    await receiver.wait_for(1, "hook")

    await dispatcher.close(deadline=0.05)

    assert (1, 0, 0) == (
        dispatcher.stats.abandoned,
        dispatcher.outstanding,
        board.hooks["h1"].consecutive_failures,
    )
    with pytest.raises(WakeError, match="not running"):
        await dispatcher.wake(_nudge())


async def test_close_lets_in_flight_deliveries_finish(
    board: MemoryBoard, receiver: Receiver, board_hooks: MemoryHooks
) -> None:
    """Deliveries that finish within the deadline are delivered, not abandoned."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", 500)
    dispatcher = HookDispatcher(hooks=board_hooks, policy=FAST)
    await dispatcher.start()
    await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)

    await dispatcher.close(deadline=5)

    assert (1, 0) == (dispatcher.stats.delivered, dispatcher.stats.abandoned)


@pytest.mark.parametrize(
    "url", ["ftp://alice:hunter2@127.0.0.1/hook", "mailto:ops@example.com", "https:///no-host"]
)
async def test_unsupported_url_refused_without_a_request(
    board: MemoryBoard, dispatcher: HookDispatcher, caplog: pytest.LogCaptureFixture, url: str
) -> None:
    """A non-http(s) or host-less URL is refused with a logged reason; the nudge is a WakeError."""
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)

    with pytest.raises(WakeError, match="no usable notify hook"):
        await dispatcher.wake(_nudge())

    assert "hook h1: refused" in caplog.text
    assert "hunter2" not in caplog.text
    assert 1 == dispatcher.stats.refused


async def test_logs_never_show_secrets_or_url_credentials(
    board: MemoryBoard,
    receiver: Receiver,
    dispatcher: HookDispatcher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Logs name the hook and its safe URL, never its secret, URL password or query."""
    url = (
        receiver.url("hook", SECRET).replace("http://", "http://alice:hunter2@")
        + "?token=querysecret"
    )
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)
    receiver.route("hook", 500)
    policy = attrs.evolve(FAST, disable_after=1)

    with caplog.at_level(logging.DEBUG):
        async with HookDispatcher(hooks=MemoryHooks(board), policy=policy) as logged:
            await _send(logged)

    assert not board.hooks["h1"].enabled
    assert "disabled" in caplog.text
    assert receiver.url("hook", SECRET) in caplog.text
    for secret in ("hunter2", "querysecret", SECRET, SECRET.removeprefix("whsec_")):
        assert secret not in caplog.text
    assert 3 == len(receiver.at("hook"))


async def test_no_covering_hook_queues_nothing(dispatcher: HookDispatcher) -> None:
    """The host's created wake for a pair with no hook is a no-op; a nudge to it is a WakeError."""
    assert 0 == await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
    with pytest.raises(WakeError, match="no usable notify hook"):
        await dispatcher.wake(_nudge())


async def test_not_started_refuses(board_hooks: MemoryHooks) -> None:
    """A dispatcher that was never started refuses wakes instead of queueing them forever."""
    with pytest.raises(WakeError, match="not running"):
        await HookDispatcher(hooks=board_hooks).wake(_nudge())


async def test_directory_failure_is_a_wake_error(dispatcher: HookDispatcher) -> None:
    """When the hooks cannot be resolved the wake fails, naming the pair."""

    class Broken:
        async def hooks_covering(self, endpoint_id: str, queue: str) -> Sequence[HookTarget]:
            raise OSError("database went away")

        async def record_success(self, hook_id: str) -> None:
            raise OSError("database went away")

        async def record_successes(self, hook_ids: Collection[str]) -> None:
            raise OSError("database went away")

        async def record_failure(
            self, hook_id: str, *, at: datetime, reason: str, disable_after: int
        ) -> HookHealth | None:
            raise OSError("database went away")

    async with HookDispatcher(hooks=Broken()) as broken:
        with pytest.raises(WakeError, match="e1/lane-l"):
            await broken.wake(_nudge())


async def test_body_is_the_contract_shape_for_host_reasons(
    board: MemoryBoard, receiver: Receiver, dispatcher: HookDispatcher
) -> None:
    """created and requeued go through the same path and differ from a nudge only in reason."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)

    for reason in ("created", "requeued"):
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=reason)
    await dispatcher.wake(_nudge())
    await dispatcher.settle()

    bodies = [json.loads(r.body) for r in receiver.at("hook")]
    assert ["created", "requeued", "stalled"] == sorted(b["meta"].pop("reason") for b in bodies)
    for body in bodies:
        body["meta"].pop("sent_at")
    assert 1 == len({json.dumps(b, sort_keys=True) for b in bodies})


async def test_restart_after_close_runs_nothing_abandoned(
    board: MemoryBoard, receiver: Receiver, board_hooks: MemoryHooks
) -> None:
    """Deliveries abandoned by close() are not resent when the dispatcher is started again."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.script("hook", receiver.hang())
    policy = attrs.evolve(FAST, timeout=timedelta(seconds=30))
    dispatcher = HookDispatcher(hooks=board_hooks, policy=policy, workers=1)
    await dispatcher.start()
    for _ in range(3):
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)
    await receiver.wait_for(1, "hook")
    await dispatcher.close(deadline=0.01)
    receiver.release()

    async with dispatcher:
        await _send(dispatcher)

    assert (3, 1, 2) == (
        dispatcher.stats.abandoned,
        dispatcher.stats.delivered,
        len(receiver.at("hook")),
    )


async def test_only_the_delivery_that_disabled_its_hook_says_so(
    board: MemoryBoard, receiver: Receiver
) -> None:
    """A hook the host enables again is not reported disabled by its next failed delivery."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("hook", SECRET), secret=SECRET)
    receiver.route("hook", 500)
    policy = attrs.evolve(FAST, disable_after=2)

    async with HookDispatcher(hooks=MemoryHooks(board), policy=policy) as dispatcher:
        outcomes = []
        for _ in range(2):
            receipt = await dispatcher.wake(_nudge())
            outcomes.append((await receipt, receipt.hook_disabled))
        board.set_hook_enabled("h1", True)
        receipt = await dispatcher.wake(_nudge())
        outcomes.append((await receipt, receipt.hook_disabled))

    assert [(False, False), (False, True), (False, False)] == outcomes
