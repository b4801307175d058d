"""SPEC-0038 ledger scenarios, written once and run against every LedgerPort.

A backend joins the suite with a three-line subclass of ``LedgerContract``
that provides the ``driver`` fixture, a ``BoardDriver`` (the project's own
tests/contract/test_memory.py and test_postgres.py do exactly that).
Scenarios speak only the ``BoardDriver`` interface and never branch on the
backend. The scenarios need pytest, pytest-asyncio and time-machine (the
``contract`` extra: ``pip install 'stall-nudge[contract]'``);
docs/reliability.md says how to run them against your host.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from stall_core import (
    FULL_PASS_INTERVAL,
    Charge,
    HookDirectory,
    Idle,
    IdleReason,
    NoSuchPair,
    Nudge,
    PacingPolicy,
    Receiver,
    Silence,
    Sweeper,
    TickReport,
    Verdict,
    Wait,
    WakePort,
    WakeReceipt,
    receiver_health,
)

from ._clock import T0, FakeClock
from ._driver import BoardDriver
from ._wake import RecordingWake

__all__ = ["POLICY", "LedgerContract", "stalled_queue", "sweep"]

POLICY = PacingPolicy()


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


async def sweep(driver: BoardDriver, at: datetime, wake: RecordingWake) -> TickReport:
    """Run one tick of a fresh sweeper (as a new reaper tick would), the ledger's clock at ``at``.

    Refunds of nudges that reached nobody are settled before it returns.
    """
    driver.clock.set(at)
    sweeper = Sweeper(ledger=driver.ledger, wake=wake, policy=POLICY)
    report = await sweeper.tick()
    await sweeper.settle()
    return report


async def booked_sweep(driver: BoardDriver, at: datetime, wake: WakePort) -> TickReport:
    """``sweep``, with each delivery's outcome booked in the ledger's history."""
    driver.clock.set(at)
    sweeper = Sweeper(ledger=driver.ledger, wake=wake, policy=POLICY, history=driver.operated)
    report = await sweeper.tick()
    await sweeper.settle()
    return report


class BookingWake:
    """A wake that books each nudge on the pair's hook as the HTTP dispatcher does: a success,
    or a failure that every attempt met (the nudge then reached nobody)."""

    def __init__(self, hooks: HookDirectory, hook_id: str, *, answers: bool) -> None:
        self.hooks, self.hook_id, self.answers = hooks, hook_id, answers

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        if self.answers:
            await self.hooks.record_success(self.hook_id)
        else:
            await self.hooks.record_failure(
                self.hook_id, at=nudge.charged_at, reason="HTTP 503", disable_after=5
            )
        receipt: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        receipt.set_result(self.answers)
        return receipt


async def until_nudged(
    driver: BoardDriver, since: datetime, wake: RecordingWake
) -> tuple[timedelta, list[Nudge]]:
    """Sweep every minute from ``since`` until a tick charges; how long after, and its nudges.

    A change no timestamp shows (an endpoint resumed, a todo moved, a hook
    enabled) is judged by the next full pass at the latest: the tick that
    charges comes within one full-pass interval.
    """
    at = since
    while at <= since + FULL_PASS_INTERVAL + timedelta(minutes=1):
        report = await sweep(driver, at, wake)
        if report.charged:
            return at - since, list(report.charged)
        at += timedelta(minutes=1)
    return at - since, []


async def stalled_queue(
    driver: BoardDriver,
    *,
    endpoint: str = "ep-1",
    queue: str = "lane-l",
    todos: int = 1,
    at: datetime = T0,
) -> list[str]:
    """An active endpoint with a covering hook and ``todos`` verified todos created at ``at``."""
    await driver.add_endpoint(endpoint)
    await driver.add_hook(f"hook-{endpoint}", endpoint_id=endpoint)
    await driver.add_delivery(
        f"dlv-{endpoint}-{queue}", endpoint_id=endpoint, verified=True, received_at=T0
    )
    ids = []
    for i in range(todos):
        todo_id = f"todo-{endpoint}-{queue}-{i}"
        await driver.create_todo(
            todo_id,
            endpoint_id=endpoint,
            queue=queue,
            created_at=at + timedelta(seconds=i),
            delivery_id=f"dlv-{endpoint}-{queue}",
            title=f"verified work {i}",
        )
        ids.append(todo_id)
    return ids


class LedgerContract:
    """The scenarios every ledger must pass. Subclasses provide the ``driver`` fixture."""

    async def test_a_silenced_pair_is_not_charged_and_keeps_its_count(
        self, driver: BoardDriver
    ) -> None:
        """A silenced pair is neither charged nor counted against the tick limit; its row stays."""
        await stalled_queue(driver, queue="lane-s")
        for i in range(4):
            await stalled_queue(driver, endpoint=f"ep-{i + 2}")
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        # The tick limit took four of five: the silenced pair, oldest, was among them.
        assert ("ep-1", "lane-s") in {n.key for n in wake.sent}
        driver.clock.set(T0 + minutes(11))
        await driver.operated.silence(
            "ep-1", None, lasting=timedelta(hours=2), by="ops", reason="deploy"
        )
        held_back = (
            {n.key for n in wake.sent}
            ^ {("ep-1", "lane-s")}
            ^ {(f"ep-{i + 2}", "lane-l") for i in range(4)}
        )
        wake.sent.clear()

        await sweep(driver, T0 + minutes(12), wake)
        at_12 = {n.key for n in wake.sent}
        wake.sent.clear()
        await sweep(driver, T0 + minutes(40), wake)

        assert held_back == at_12
        # All four others are due again, the silenced one first by rank: a tick limit of four
        # charges every one of them, since the silence takes no place in it.
        others = {(f"ep-{i + 2}", "lane-l") for i in range(4)}
        assert {(key, 2) for key in others} == {(n.key, n.number) for n in wake.sent}
        row = (await driver.ledger_rows())["ep-1", "lane-s"]
        assert (1, T0 + minutes(10)) == (row.nudges, row.last_nudged_at)
        driver.clock.set(T0 + minutes(41))
        ended = await driver.operated.unsilence("ep-1", None, by="ops", reason="done")
        assert ended is not None
        wake.sent.clear()
        await sweep(driver, T0 + minutes(42), wake)
        assert [("ep-1", "lane-s", 2)] == [
            (n.endpoint_id, n.queue, n.number) for n in wake.sent if n.endpoint_id == "ep-1"
        ]

    async def test_a_reset_pair_is_charged_at_nudge_1_on_the_next_tick(
        self, driver: BoardDriver
    ) -> None:
        """A reset capped pair starts over: the next tick charges it as nudge 1."""
        await stalled_queue(driver)
        wake = RecordingWake()
        at = T0 + minutes(10)
        for _ in range(12):
            await sweep(driver, at, wake)
            at += timedelta(hours=6)
        assert 5 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges
        wake.sent.clear()
        await sweep(driver, at, wake)  # capped: nothing, and a delta tick on Postgres
        assert [] == wake.sent

        driver.clock.set(at + minutes(1))
        row = await driver.operated.reset("ep-1", "lane-l", by="ops", reason="consumer fixed")
        await sweep(driver, at + minutes(2), wake)

        assert row is not None
        assert 0 == row.nudges
        assert [("ep-1", "lane-l", 1)] == [(n.endpoint_id, n.queue, n.number) for n in wake.sent]

    async def test_history_records_every_outcome_and_every_action(
        self, driver: BoardDriver
    ) -> None:
        """Each charge's outcome (delivered, refused, gave up) and each action is in the history."""
        await stalled_queue(driver, endpoint="ep-ok")
        await booked_sweep(driver, T0 + minutes(10), RecordingWake())
        # Each crosses the threshold after the last tick, so a delta finds it too.
        await stalled_queue(driver, endpoint="ep-refused", at=T0 + minutes(8))
        await booked_sweep(driver, T0 + minutes(11), RecordingWake(refuse=True))
        await stalled_queue(driver, endpoint="ep-lost", at=T0 + minutes(9))
        await booked_sweep(driver, T0 + minutes(12), RecordingWake(reach=False))
        driver.clock.set(T0 + minutes(13))
        await driver.operated.silence(
            "ep-ok", "lane-l", lasting=timedelta(hours=1), by="ann", reason="maintenance"
        )

        entries = await driver.operated.history()
        charges = {(e.endpoint_id, e.nudge, e.outcome) for e in entries if e.event == "charged"}
        actions = [(e.endpoint_id, e.event, e.by, e.detail, e.until) for e in entries]

        assert {
            ("ep-ok", 1, "delivered"),
            ("ep-refused", 1, "refused"),
            ("ep-lost", 1, "gave-up"),
        } == charges
        assert ("ep-ok", "silenced", "ann", "maintenance", T0 + minutes(73)) == actions[0]
        assert 4 == len(entries)
        only = await driver.operated.history(endpoint_id="ep-lost", since=minutes(5))
        assert ["ep-lost"] == [e.endpoint_id for e in only]

    async def test_status_shows_a_receiver_that_answers_again_as_recovered_until_a_nudge_lands(
        self, driver: BoardDriver
    ) -> None:
        """A nudge into a failing hook is refunded and shows failing; once the hook answers
        another message (a creation wake), status shows it recovered, with when it failed; a
        nudge delivered after that makes it plain ok, both outcomes shown."""
        await stalled_queue(driver)
        failing = BookingWake(driver.hooks, "hook-ep-1", answers=False)
        await booked_sweep(driver, T0 + minutes(10), failing)
        _, [before] = await driver.operated.status(policy=POLICY)
        assert 0 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges  # refunded
        assert (Receiver.FAILING, 1) == (receiver_health(before), before.hook_failures)

        await driver.hooks.record_success("hook-ep-1")
        _, [answered] = await driver.operated.status(policy=POLICY)
        answering = BookingWake(driver.hooks, "hook-ep-1", answers=True)
        report = await booked_sweep(driver, T0 + minutes(30), answering)
        _, [after] = await driver.operated.status(policy=POLICY)

        assert (Receiver.RECOVERED, 0) == (receiver_health(answered), answered.hook_failures)
        assert T0 + minutes(10) == before.last_failure_at == answered.last_failure_at
        assert [1] == [n.number for n in report.charged]
        assert (Receiver.OK, 0) == (receiver_health(after), after.hook_failures)
        assert [(T0 + minutes(30), 1, "delivered"), (T0 + minutes(10), 1, "gave-up")] == [
            (e.at, e.nudge, e.outcome) for e in after.last_outcomes
        ]

    async def test_status_shows_each_silence_with_who_why_and_its_end(
        self, driver: BoardDriver
    ) -> None:
        """A silenced candidate reads "silenced", due when the silence ends; every pair the
        silence covers carries it, whatever its verdict; the last outcomes stay shown."""
        await stalled_queue(driver)
        await stalled_queue(driver, endpoint="ep-2")
        await booked_sweep(driver, T0 + minutes(10), RecordingWake())
        driver.clock.set(T0 + minutes(11))
        silence = await driver.operated.silence(
            "ep-1", None, lasting=timedelta(hours=2), by="ann", reason="deploy"
        )
        await driver.create_todo(
            "young", endpoint_id="ep-1", queue="lane-f", created_at=T0 + minutes(19)
        )
        driver.clock.set(T0 + minutes(20))

        now, pairs = await driver.operated.status(policy=POLICY)
        shown = {(p.endpoint_id, p.queue): p for p in pairs}

        assert T0 + minutes(20) == now
        assert (
            Silence(
                endpoint_id="ep-1",
                queue=None,
                starts_at=T0 + minutes(11),
                ends_at=T0 + minutes(131),
                by="ann",
                reason="deploy",
            )
            == silence
        )
        silenced, fresh, due = (
            shown["ep-1", "lane-l"],
            shown["ep-1", "lane-f"],
            shown["ep-2", "lane-l"],
        )
        assert (Verdict.SILENCED, silence, T0 + minutes(131)) == (
            silenced.verdict,
            silenced.silence,
            silenced.next_due_at,
        )
        assert (Verdict.FRESH, silence) == (fresh.verdict, fresh.silence)
        assert (Verdict.DUE, None, None) == (due.verdict, due.silence, due.silenced_until)
        assert [(1, "delivered")] == [(e.nudge, e.outcome) for e in silenced.last_outcomes]
        assert 1 == silenced.effective_nudges  # the silence keeps its count

    async def test_a_nudge_now_charges_a_candidate_once_and_says_why_not(
        self, driver: BoardDriver
    ) -> None:
        """Nudge now charges a backing-off pair at once, once; a fresh or silenced one says why."""
        await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await sweep(driver, T0 + minutes(16), wake)  # nudge 2; nudge 3 waits 20 minutes
        driver.clock.set(T0 + minutes(20))

        first = await driver.operated.nudge_now(
            "ep-1", "lane-l", policy=POLICY, by="ann", reason="stuck"
        )
        second = await driver.operated.nudge_now(
            "ep-1", "lane-l", policy=POLICY, by="bob", reason="stuck too"
        )

        assert isinstance(first.decision, Charge)
        assert first.charged is not None
        assert 1 == first.charged.number
        assert Wait(due_at=T0 + minutes(21)) == second.decision
        assert second.charged is None
        await driver.create_todo(
            "new",
            endpoint_id="ep-1",
            queue="lane-f",
            created_at=T0 + minutes(20),
            delivery_id="dlv-ep-1-lane-l",
        )
        fresh = await driver.operated.nudge_now(
            "ep-1", "lane-f", policy=POLICY, by="ann", reason=""
        )
        assert Idle(reason=IdleReason.FRESH) == fresh.decision
        await driver.operated.silence(
            "ep-1", "lane-l", lasting=timedelta(hours=1), by="ann", reason="quiet"
        )
        driver.clock.set(T0 + minutes(30))
        silenced = await driver.operated.nudge_now(
            "ep-1", "lane-l", policy=POLICY, by="ann", reason=""
        )
        assert Idle(reason=IdleReason.SILENCED) == silenced.decision

    async def test_an_operator_naming_no_such_pair_is_refused(self, driver: BoardDriver) -> None:
        """An unknown endpoint, or a queue with no todo and no row, is refused with nothing done."""
        await stalled_queue(driver)

        refused = []
        for endpoint, queue in (("ep-9", "lane-l"), ("ep-1", "lane-typo")):
            try:
                await driver.operated.reset(endpoint, queue, by="ann", reason="")
            except NoSuchPair as exc:
                refused.append(str(exc))
        assert [
            "no endpoint 'ep-9'",
            "endpoint 'ep-1' has no queue 'lane-typo': no todo, no ledger row",
        ] == refused
        assert [] == list(await driver.operated.history())

    async def test_pending_work_with_no_new_inbound_webhook(self, driver: BoardDriver) -> None:
        """Pending work with no new inbound webhook: one wake names the todo."""
        [todo] = await stalled_queue(driver)
        wake = RecordingWake()

        report = await sweep(driver, T0 + minutes(10), wake)

        assert [("ep-1", "lane-l", todo, 1)] == [
            (n.endpoint_id, n.queue, n.todo.id, n.number) for n in wake.sent
        ]
        assert "verified work 0" == wake.sent[0].todo.title
        assert 1 == report.queued
        rows = await driver.ledger_rows()
        assert 1 == rows["ep-1", "lane-l"].nudges
        assert T0 + minutes(10) == rows["ep-1", "lane-l"].last_nudged_at

    async def test_fresh_work_is_not_a_stalled_queue(self, driver: BoardDriver) -> None:
        """Fresh work is not a stalled queue: nothing selected, no count advanced."""
        await stalled_queue(driver)
        wake = RecordingWake()

        await sweep(driver, T0 + timedelta(seconds=30), wake)
        # The threshold is strict, so a todo exactly two minutes old is still fresh.
        await sweep(driver, T0 + minutes(2), wake)

        assert [] == wake.sent
        assert {} == await driver.ledger_rows()

    async def test_unverified_deliveries_age_quietly(self, driver: BoardDriver) -> None:
        """Unverified deliveries age quietly: no nudge, and the todos stay pending and claimable."""
        await driver.add_endpoint("ep-1")
        await driver.add_hook("hook-1", endpoint_id="ep-1")
        await driver.add_delivery("dlv-open", endpoint_id="ep-1", verified=False, received_at=T0)
        for i in range(3):
            await driver.create_todo(
                f"u{i}", endpoint_id="ep-1", queue="lane-l", created_at=T0, delivery_id="dlv-open"
            )
        wake = RecordingWake()

        await sweep(driver, T0 + timedelta(days=2), wake)

        assert [] == wake.sent
        assert {} == await driver.ledger_rows()
        assert {"pending"} == {t.state for t in (await driver.todos()).values()}
        await driver.claim("u0", owner="puller", at=T0 + timedelta(days=2))
        assert "claimed" == (await driver.todos())["u0"].state

    async def test_a_queue_with_no_receiver_is_not_charged(self, driver: BoardDriver) -> None:
        """A queue with no receiver is not charged: disabled hook or a filter elsewhere."""
        await stalled_queue(driver, endpoint="no-hook")
        await stalled_queue(driver, endpoint="other-queue")
        await stalled_queue(driver, endpoint="disabled")
        await driver.set_hook_enabled("hook-disabled", False)
        await driver.set_hook_queues("hook-other-queue", ["lane-x"])
        # The first stalled_queue call added a covering hook; a receiver-less endpoint has none.
        await driver.set_hook_enabled("hook-no-hook", False)
        wake = RecordingWake()

        for step in range(4):
            await sweep(driver, T0 + timedelta(hours=step + 1), wake)

        assert [] == wake.sent
        assert {} == await driver.ledger_rows()

    async def test_a_deep_backlog_costs_one_wake(self, driver: BoardDriver) -> None:
        """A deep backlog costs one wake: five stalled todos, one nudge naming the oldest."""
        ids = await stalled_queue(driver, todos=5)
        wake = RecordingWake()

        report = await sweep(driver, T0 + minutes(10), wake)

        assert [ids[0]] == [n.todo.id for n in wake.sent]
        assert 1 == len(report.charged)

    async def test_the_named_todo_is_the_oldest_gate_passing_one(self, driver: BoardDriver) -> None:
        """An older unverified todo is skipped: the nudge names the oldest verified todo."""
        [verified] = await stalled_queue(driver)
        await driver.add_delivery("dlv-open", endpoint_id="ep-1", verified=False, received_at=T0)
        await driver.create_todo(
            "older-unverified",
            endpoint_id="ep-1",
            queue="lane-l",
            created_at=T0 - minutes(30),
            delivery_id="dlv-open",
            title="<sender text>",
        )
        wake = RecordingWake()

        await sweep(driver, T0 + minutes(10), wake)

        assert [verified] == [n.todo.id for n in wake.sent]
        assert "<sender text>" not in repr(wake.sent)

    async def test_operator_todo_without_delivery_passes_the_gate(
        self, driver: BoardDriver
    ) -> None:
        """A todo with no delivery (operator-made) passes the sender gate."""
        await driver.add_endpoint("ep-1")
        await driver.add_hook("hook-1", endpoint_id="ep-1")
        await driver.create_todo("op", endpoint_id="ep-1", queue="ops", created_at=T0)
        wake = RecordingWake()

        await sweep(driver, T0 + minutes(3), wake)

        assert ["op"] == [n.todo.id for n in wake.sent]

    async def test_a_stalled_queue_backs_off_and_stops(self, driver: BoardDriver) -> None:
        """A stalled queue backs off and stops: 5m, 20m, 1h, 6h, then silence with work visible."""
        await stalled_queue(driver, todos=2)
        clock = FakeClock(T0 + minutes(3))
        wake = RecordingWake()
        fired: list[tuple[int, timedelta]] = []
        # Tick every minute for two days, recording when each nudge fired.
        while clock.now < T0 + timedelta(days=2):
            report = await sweep(driver, clock.now, wake)
            fired.extend((n.number, clock.now - T0) for n in report.charged)
            clock.advance(minutes(1))

        first = minutes(3)
        assert [
            (1, first),
            (2, first + minutes(5)),
            (3, first + minutes(25)),
            (4, first + minutes(85)),
            (5, first + minutes(445)),
        ] == fired
        assert {"pending"} == {t.state for t in (await driver.todos()).values()}
        assert 5 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

    async def test_consumer_woken_but_never_claims(self, driver: BoardDriver) -> None:
        """Consumer woken but never claims: backoff widens to the cap, then silence; work stays."""
        await stalled_queue(driver)
        clock = FakeClock(T0 + minutes(10))
        wake = RecordingWake()
        for gap in (0, 5, 20, 60, 360, 360, 24 * 60):
            clock.advance(minutes(gap))
            await sweep(driver, clock.now, wake)

        assert [1, 2, 3, 4, 5] == [n.number for n in wake.sent]
        assert ["pending"] == [t.state for t in (await driver.todos()).values()]

    async def test_progress_keeps_the_short_cadence(self, driver: BoardDriver) -> None:
        """Progress keeps the short cadence: a claim at count 4 makes it due now, at 1."""
        ids = await stalled_queue(driver, todos=3)
        clock = FakeClock(T0 + minutes(10))
        wake = RecordingWake()
        for gap in (0, 5, 20, 60):
            clock.advance(minutes(gap))
            await sweep(driver, clock.now, wake)
        assert 4 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

        clock.advance(minutes(1))
        await driver.claim(ids[0], owner="consumer", at=clock.now)
        await driver.complete(ids[0])
        clock.advance(timedelta(seconds=15))
        report = await sweep(driver, clock.now, wake)

        assert [(1, ids[1])] == [(n.number, n.todo.id) for n in report.charged]
        assert 1 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

    async def test_a_drained_queue_does_not_ring(self, driver: BoardDriver) -> None:
        """A drained queue does not ring: the row goes, and the next backlog starts at nudge 1."""
        ids = await stalled_queue(driver, todos=2)
        clock = FakeClock(T0 + minutes(10))
        wake = RecordingWake()
        await sweep(driver, clock.now, wake)
        await sweep(driver, clock.advance(minutes(5)), wake)
        assert 2 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

        for todo_id in ids:
            await driver.claim(todo_id, owner="consumer", at=clock.advance(minutes(1)))
            await driver.complete(todo_id)
        report = await sweep(driver, clock.advance(minutes(1)), wake)

        assert () == report.charged
        assert (("ep-1", "lane-l"),) == report.cleared
        assert {} == await driver.ledger_rows()

        await driver.create_todo(
            "next",
            endpoint_id="ep-1",
            queue="lane-l",
            created_at=clock.now,
            delivery_id="dlv-ep-1-lane-l",
        )
        report = await sweep(driver, clock.advance(minutes(3)), wake)
        assert [("next", 1)] == [(n.todo.id, n.number) for n in report.charged]

    async def test_two_instances_one_wake(self, driver: BoardDriver) -> None:
        """Two instances, one wake: concurrent sweeps in one cooldown window fire once."""
        await stalled_queue(driver)
        clock = FakeClock(T0 + minutes(10))
        wakes = [RecordingWake(), RecordingWake()]

        await asyncio.gather(*(sweep(driver, clock.now, w) for w in wakes))
        await asyncio.gather(*(sweep(driver, clock.advance(minutes(1)), w) for w in wakes))

        assert 1 == sum(len(w.sent) for w in wakes)
        assert 1 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

    async def test_a_nudge_spends_no_ring_budget(self, driver: BoardDriver) -> None:
        """A nudge spends no ring budget: every todo row is identical before and after sweeps."""
        ids = await stalled_queue(driver, todos=3)
        await driver.ring(ids[0], at=T0 + minutes(1))
        await driver.claim(ids[2], owner="someone", at=T0 + minutes(1))
        before = await driver.todos()
        clock = FakeClock(T0 + minutes(3))
        wake = RecordingWake()

        for gap in (0, 5, 20, 60, 360, 60):
            await sweep(driver, clock.advance(minutes(gap)), wake)

        assert 5 == len(wake.sent)
        assert before == await driver.todos()

    async def test_nudging_does_not_wake_a_quarantined_queue(self, driver: BoardDriver) -> None:
        """Nudging does not wake a quarantined queue, whatever the quarantine row's age."""
        await stalled_queue(driver, queue="quarantine", todos=2)
        wake = RecordingWake()

        for days in (1, 30, 365):
            await sweep(driver, T0 + timedelta(days=days), wake)

        assert [] == wake.sent
        assert {} == await driver.ledger_rows()

    async def test_an_inactive_endpoint_is_not_nudged_until_resumed(
        self, driver: BoardDriver
    ) -> None:
        """A paused endpoint's stalled queue waits, uncharged, and is nudged once resumed."""
        await stalled_queue(driver)
        await driver.set_endpoint_state("ep-1", "paused")
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        assert ([], {}) == (wake.sent, await driver.ledger_rows())

        await driver.set_endpoint_state("ep-1", "active")
        took, nudges = await until_nudged(driver, T0 + minutes(11), wake)
        assert [1] == [n.number for n in nudges]
        assert took <= FULL_PASS_INTERVAL

    async def test_one_tick_wakes_at_most_the_tick_limit(self, driver: BoardDriver) -> None:
        """One tick charges at most four pairs, least-nudged first, oldest work first."""
        for i in range(6):
            await stalled_queue(driver, endpoint=f"ep-{i}")
        wake = RecordingWake()
        clock = FakeClock(T0 + minutes(10))

        first = await sweep(driver, clock.now, wake)
        second = await sweep(driver, clock.advance(minutes(1)), wake)

        assert ["ep-0", "ep-1", "ep-2", "ep-3"] == [n.endpoint_id for n in first.charged]
        # The two held back (count 0) go before any pair waiting on its backoff.
        assert ["ep-4", "ep-5"] == [n.endpoint_id for n in second.charged]

    async def test_the_reported_case(self, driver: BoardDriver) -> None:
        """The reported case: a one-shot consumer is re-woken until lane-l is empty."""
        ids = await stalled_queue(driver, todos=3)
        clock = FakeClock(T0)
        wake = RecordingWake()
        # The creation wake starts the consumer: it claims one todo and exits.
        await driver.claim(ids[0], owner="one-shot", at=clock.advance(timedelta(seconds=5)))
        await driver.complete(ids[0])

        claimed = [ids[0]]
        last_claim = clock.now
        gaps = []
        while clock.now < T0 + timedelta(hours=2):
            report = await sweep(driver, clock.advance(timedelta(seconds=15)), wake)
            for nudge in report.charged:
                gaps.append(clock.now - last_claim)
                # Each wake starts the consumer afresh: it claims one todo a second later.
                last_claim = clock.now + timedelta(seconds=1)
                await driver.claim(nudge.todo.id, owner="one-shot", at=last_claim)
                await driver.complete(nudge.todo.id)
                claimed.append(nudge.todo.id)

        assert ids == claimed
        assert 2 == len(gaps)
        assert all(gap <= POLICY.threshold + POLICY.backoff[0] for gap in gaps)
        assert {} == await driver.ledger_rows()
        assert 2 == len(wake.sent)

    async def test_the_wake_is_lost(self, driver: BoardDriver) -> None:
        """The wake is lost: with the creation wake dropped, the sweep still surfaces the work."""
        # No consumer ever heard of this todo: its creation wake went nowhere.
        [todo] = await stalled_queue(driver)
        wake = RecordingWake()

        before = await sweep(driver, T0 + minutes(1), wake)
        after = await sweep(driver, T0 + minutes(2) + timedelta(seconds=1), wake)

        assert () == before.charged
        assert [todo] == [n.todo.id for n in after.charged]

    # -- exactly once, for real ------------------------------------------------

    async def test_one_claim_resets_once(self, driver: BoardDriver) -> None:
        """One claim is progress once, even one stamped after the charge it brings about."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await sweep(driver, T0 + minutes(15), wake)
        # The claim's transaction read the time after the next charge did, yet is visible to it.
        late_stamp = T0 + minutes(16)
        await driver.claim(ids[0], owner="consumer", at=late_stamp)
        await driver.complete(ids[0])

        for seconds in range(30, 30 + 15 * 40, 15):
            await sweep(driver, T0 + minutes(15) + timedelta(seconds=seconds), wake)

        reset_at = T0 + minutes(15) + timedelta(seconds=30)
        assert [(1, T0 + minutes(10)), (2, T0 + minutes(15)), (1, reset_at)] == [
            (n.number, n.charged_at) for n in wake.sent[:3]
        ]
        # The claim is read once: nudge 2 after the reset waits the first step, not one tick.
        assert [(2, reset_at + POLICY.backoff[0])] == [
            (n.number, n.charged_at) for n in wake.sent[3:]
        ]
        assert 2 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

    async def test_a_skewed_sweeper_decides_as_an_unskewed_one(self, driver: BoardDriver) -> None:
        """A sweeper whose wall clock runs 90 s ahead or 10 s behind charges as an exact one."""
        ids = await stalled_queue(driver, todos=3)
        # A todo one minute old on the ledger's clock: fresh, whatever the sweeper's clock says.
        await driver.create_todo(
            "young", endpoint_id="ep-1", queue="lane-y", created_at=T0 + minutes(9)
        )
        wake = RecordingWake()
        charged = []
        for step, skew in enumerate((90, -10, 90, -10, 0, 90)):
            if step == 2:
                await driver.claim(ids[0], owner="consumer", at=driver.clock())
            import time_machine  # the test extra's; only this scenario needs it

            real = datetime.now(UTC)
            with time_machine.travel(real + timedelta(seconds=skew), tick=True):
                report = await sweep(driver, T0 + minutes(10) + timedelta(seconds=15 * step), wake)
            charged.append([(n.queue, n.number) for n in report.charged])

        # lane-y is nudged only once past the threshold on the ledger's clock (strictly).
        assert [[("lane-l", 1)], [], [("lane-l", 1)], [], [], [("lane-y", 1)]] == charged

    async def test_a_stale_snapshot_cannot_resurrect_a_cleared_row(
        self, driver: BoardDriver
    ) -> None:
        """An instance that ticks while another sweeps skips; after the clear it sees no work."""
        [todo] = await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.claim(todo, owner="consumer", at=T0 + minutes(11))
        await driver.complete(todo)

        async with driver.hold_tick():
            # This instance's view predates the clear in progress elsewhere: it must not act.
            stale = await sweep(driver, T0 + minutes(12), wake)
        cleared = await sweep(driver, T0 + minutes(12), wake)
        later = await sweep(driver, T0 + minutes(13), wake)

        assert (True, (), ()) == (stale.skipped, stale.charged, stale.cleared)
        assert (("ep-1", "lane-l"),) == cleared.cleared
        assert ((), ()) == (later.charged, later.cleared)
        assert [todo] == [n.todo.id for n in wake.sent]
        assert {} == await driver.ledger_rows()

    async def test_the_second_instance_skips_while_the_first_holds_the_tick(
        self, driver: BoardDriver
    ) -> None:
        """While one instance holds the tick, another's tick is skipped: nothing charged or lost."""
        await stalled_queue(driver)
        wake = RecordingWake()

        async with driver.hold_tick():
            skipped = await sweep(driver, T0 + minutes(10), wake)
            held = (list(wake.sent), await driver.ledger_rows())
        after = await sweep(driver, T0 + minutes(10), wake)

        assert (True, (), ()) == (skipped.skipped, skipped.charged, skipped.cleared)
        assert ([], {}) == held
        assert (False, [1]) == (after.skipped, [n.number for n in after.charged])
        assert 1 == len(wake.sent)

    async def test_undelivered_nudges_do_not_spend_the_cap(self, driver: BoardDriver) -> None:
        """Refused or lost nudges are refunded and retried a step later; a healed receiver wakes."""
        await stalled_queue(driver)
        wake = RecordingWake(refuse=True)
        clock = FakeClock(T0 + minutes(3))
        attempts: list[tuple[int, timedelta]] = []
        while clock.now < T0 + timedelta(days=2):
            if clock.now == T0 + minutes(20):
                wake.refuse, wake.reach = False, False  # the queue frees, the receiver is down
            if clock.now == T0 + minutes(40):
                wake.reach = True  # the receiver heals
            report = await sweep(driver, clock.now, wake)
            attempts.extend((n.number, clock.now - T0) for n in report.charged)
            clock.advance(minutes(1))

        # Every failed attempt was nudge 1, retried one first step (5 min) later.
        failed = [(1, minutes(m)) for m in (3, 8, 13, 18, 23, 28, 33, 38)]
        delivered = [(1, minutes(43)), (2, minutes(48)), (3, minutes(68))]
        delivered += [(4, minutes(128)), (5, minutes(488))]
        assert failed + delivered == attempts
        assert [3, 8, 13, 18] == [(n.charged_at - T0) // minutes(1) for n in wake.refused]
        assert [23, 28, 33, 38] == [(n.charged_at - T0) // minutes(1) for n in wake.lost]
        assert [1, 2, 3, 4, 5] == [n.number for n in wake.sent]
        assert 5 == (await driver.ledger_rows())["ep-1", "lane-l"].nudges

    async def test_a_refund_never_undoes_a_later_charge(self, driver: BoardDriver) -> None:
        """A late refund is refused once a later charge or a clear changed the row."""
        ids = await stalled_queue(driver, todos=2)
        wake = RecordingWake()
        [first] = (await sweep(driver, T0 + minutes(10), wake)).charged
        await driver.claim(ids[0], owner="consumer", at=T0 + minutes(11))
        [second] = (await sweep(driver, T0 + minutes(12), wake)).charged
        row = (await driver.ledger_rows())["ep-1", "lane-l"]

        assert False is await driver.ledger.refund(first)
        assert row == (await driver.ledger_rows())["ep-1", "lane-l"]

        await driver.claim(ids[1], owner="consumer", at=T0 + minutes(13))
        await sweep(driver, T0 + minutes(14), wake)
        assert False is await driver.ledger.refund(second)
        assert {} == await driver.ledger_rows()

    # -- progress, read two ways: a claim stamped after the last nudge, or a departure --

    async def test_a_claim_that_spans_a_charge_is_progress_by_departure(
        self, driver: BoardDriver
    ) -> None:
        """The named todo claimed by a transaction that spans a charge: progress next tick."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        for minute in (10, 15, 35, 95):
            await sweep(driver, T0 + minutes(minute), wake)
        # The claim read the time before nudge 4 did and committed after it: its stamp is
        # before the nudge, but the todo nudge 4 named is gone from the pending work.
        await driver.claim(ids[0], owner="consumer", at=T0 + minutes(95) - timedelta(seconds=1))

        report = await sweep(driver, T0 + minutes(95) + timedelta(seconds=15), wake)
        later = await sweep(driver, T0 + minutes(95) + timedelta(seconds=30), wake)

        assert [1, 2, 3, 4, 1] == [n.number for n in wake.sent]
        assert [ids[1]] == [n.todo.id for n in report.charged]
        assert () == later.charged

    async def test_a_claim_of_another_todo_committed_after_the_nudge_is_progress(
        self, driver: BoardDriver
    ) -> None:
        """A claim made after the last nudge, stamped before it (a clock behind): nudge 1 again."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        for minute in (10, 15):
            await sweep(driver, T0 + minutes(minute), wake)
        await driver.claim(ids[2], owner="puller", at=T0 + minutes(15) - timedelta(seconds=50))

        report = await sweep(driver, T0 + minutes(15) + timedelta(seconds=15), wake)

        assert [(1, ids[0])] == [(n.number, n.todo.id) for n in report.charged]

    async def test_a_claim_a_tick_read_is_not_progress_again(self, driver: BoardDriver) -> None:
        """A claim is progress once: completed after the nudge it brought, it brings no other."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.claim(ids[2], owner="puller", at=T0 + minutes(12))
        await sweep(driver, T0 + minutes(15), wake)
        await driver.complete(ids[2])

        for second in range(15, 5 * 60 + 15, 15):
            await sweep(driver, T0 + minutes(15) + timedelta(seconds=second), wake)

        assert [(1, T0 + minutes(10)), (1, T0 + minutes(15)), (2, T0 + minutes(20))] == [
            (n.number, n.charged_at) for n in wake.sent
        ]

    async def test_a_claim_of_another_todo_stamped_after_the_nudge_is_progress(
        self, driver: BoardDriver
    ) -> None:
        """A claim stamped after the last nudge, of a todo it did not name: nudge 1 again."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        for minute in (10, 15):
            await sweep(driver, T0 + minutes(minute), wake)
        await driver.claim(ids[2], owner="puller", at=T0 + minutes(15) + timedelta(seconds=1))

        report = await sweep(driver, T0 + minutes(15) + timedelta(seconds=15), wake)

        assert [(1, ids[0])] == [(n.number, n.todo.id) for n in report.charged]

    async def test_a_deleted_todo_the_nudge_did_not_name_is_not_progress(
        self, driver: BoardDriver
    ) -> None:
        """Another todo of the pair deleted: no reset, nudge 3 comes a full step after nudge 2."""
        ids = await stalled_queue(driver, todos=3)
        await _not_progress(driver, lambda: driver.delete_todo(ids[2]), ids[0])

    async def test_a_todo_the_nudge_did_not_name_moved_away_is_not_progress(
        self, driver: BoardDriver
    ) -> None:
        """Another todo moved to another queue: no reset, nudge 3 a full step after nudge 2."""
        ids = await stalled_queue(driver, todos=3)
        await _not_progress(driver, lambda: driver.move_todo(ids[2], "lane-m"), ids[0])

    async def test_a_named_todo_moved_away_and_back_has_not_departed(
        self, driver: BoardDriver
    ) -> None:
        """The named todo pending in its pair again by the next tick: read now, not departed."""
        ids = await stalled_queue(driver, todos=3)

        async def away_and_back() -> None:
            await driver.move_todo(ids[0], "lane-m")
            await driver.move_todo(ids[0], "lane-l")

        await _not_progress(driver, away_and_back, ids[0])

    async def test_a_claim_stamped_ahead_of_the_ledger_counts_once(
        self, driver: BoardDriver
    ) -> None:
        """A claim stamped ten minutes ahead resets once, even after a reset kept it."""
        [first] = await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        ahead = T0 + minutes(25)
        await driver.claim(first, owner="consumer", at=ahead)
        await driver.create_todo(
            "fresh",
            endpoint_id="ep-1",
            queue="lane-l",
            created_at=T0 + minutes(15),
            delivery_id="dlv-ep-1-lane-l",
        )
        # Progress, but only fresh work: the row keeps the progress (count 0).
        kept = await sweep(driver, T0 + minutes(16), wake)
        assert ((), 0) == (kept.charged, (await driver.ledger_rows())["ep-1", "lane-l"].nudges)

        charged = []
        for second in range(0, 30 * 60, 15):
            report = await sweep(driver, T0 + minutes(17) + timedelta(seconds=second), wake)
            charged += [(n.number, n.charged_at) for n in report.charged]

        # Nudge 1 answers the kept progress once the fresh todo is stalled; the claim stays
        # in every claims window till its stamp, yet each later nudge waits its full step.
        one = T0 + minutes(17) + timedelta(seconds=15)
        steps = [timedelta(0), POLICY.backoff[0], POLICY.backoff[0] + POLICY.backoff[1]]
        assert [(n + 1, one + step) for n, step in enumerate(steps)] == charged

    async def test_a_named_todo_moved_to_another_queue_has_departed(
        self, driver: BoardDriver
    ) -> None:
        """Moving the named todo out of the pair is progress: the next nudge is a first one."""
        ids = await stalled_queue(driver, todos=2)
        wake = RecordingWake()
        for minute in (10, 15):
            await sweep(driver, T0 + minutes(minute), wake)
        await driver.move_todo(ids[0], "lane-m")

        report = await sweep(driver, T0 + minutes(16), wake)

        assert [("lane-l", 1, ids[1])] == [
            (n.queue, n.number, n.todo.id) for n in report.charged if n.queue == "lane-l"
        ]
        # Its new queue holds stalled work and no ledger row: nudge 1 there too, in this
        # tick or at the latest by the next full pass (no timestamp shows a move).
        moved = [n for n in report.charged if n.queue == "lane-m"]
        took = timedelta(0)
        if not moved:
            took, moved = await until_nudged(driver, T0 + minutes(17), wake)
        assert [("lane-m", 1, ids[0])] == [(n.queue, n.number, n.todo.id) for n in moved]
        assert took <= FULL_PASS_INTERVAL

    async def test_a_deleted_named_todo_has_departed(self, driver: BoardDriver) -> None:
        """A host that deletes the named todo (a TTL, say) earns one first nudge per departure."""
        ids = await stalled_queue(driver, todos=3)
        wake = RecordingWake()
        for minute in (10, 15):
            await sweep(driver, T0 + minutes(minute), wake)
        await driver.delete_todo(ids[0])

        report = await sweep(driver, T0 + minutes(16), wake)
        quiet = await sweep(driver, T0 + minutes(17), wake)

        assert [(1, ids[1])] == [(n.number, n.todo.id) for n in report.charged]
        assert () == quiet.charged

    async def test_a_change_of_gate_is_not_a_departure(self, driver: BoardDriver) -> None:
        """The named todo's delivery unverified: no progress; the next nudge names other work."""
        await driver.add_endpoint("ep-1")
        await driver.add_hook("hook-1", endpoint_id="ep-1")
        for i in range(2):
            await driver.add_delivery(f"d{i}", endpoint_id="ep-1", verified=True, received_at=T0)
            await driver.create_todo(
                f"t{i}",
                endpoint_id="ep-1",
                queue="lane-l",
                created_at=T0 + timedelta(seconds=i),
                delivery_id=f"d{i}",
            )
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.set_delivery_verified("d0", False)

        before = await sweep(driver, T0 + minutes(11), wake)
        due = await sweep(driver, T0 + minutes(10) + POLICY.backoff[0], wake)

        assert () == before.charged
        assert [(2, "t1")] == [(n.number, n.todo.id) for n in due.charged]

    async def test_a_paused_endpoint_is_not_a_departure(self, driver: BoardDriver) -> None:
        """Pausing and resuming an endpoint keeps the count: the next nudge is nudge 2."""
        await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.set_endpoint_state("ep-1", "paused")
        await sweep(driver, T0 + minutes(16), wake)
        await driver.set_endpoint_state("ep-1", "active")

        took, nudges = await until_nudged(driver, T0 + minutes(17), wake)

        assert [2] == [n.number for n in nudges]
        assert took <= FULL_PASS_INTERVAL

    async def test_a_hook_disabled_and_enabled_again_is_not_a_departure(
        self, driver: BoardDriver
    ) -> None:
        """A receiver gone and back keeps the count: the next nudge is nudge 2."""
        await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.set_hook_enabled("hook-ep-1", False)
        await sweep(driver, T0 + minutes(16), wake)
        await driver.set_hook_enabled("hook-ep-1", True)

        took, nudges = await until_nudged(driver, T0 + minutes(17), wake)

        assert [2] == [n.number for n in nudges]
        assert took <= FULL_PASS_INTERVAL

    async def test_a_requeued_todo_is_work_again(self, driver: BoardDriver) -> None:
        """A todo claimed and given back is pending work: its pair is nudged again."""
        [todo] = await stalled_queue(driver)
        wake = RecordingWake()
        await sweep(driver, T0 + minutes(10), wake)
        await driver.claim(todo, owner="consumer", at=T0 + minutes(11))
        cleared = await sweep(driver, T0 + minutes(12), wake)
        await driver.requeue(todo)

        report = await sweep(driver, T0 + minutes(13), wake)

        assert (("ep-1", "lane-l"),) == cleared.cleared
        assert [(1, todo)] == [(n.number, n.todo.id) for n in report.charged]

    # -- a claim belongs to the pair a tick first read it in -----------------------------

    async def test_a_todo_claimed_then_moved_after_a_tick_brings_no_claim(
        self, driver: BoardDriver
    ) -> None:
        """Claimed in lane-l (read there), completed and moved to capped lane-m: no nudge there."""
        claimed = await _two_capped_pairs_one_claimed(driver)
        first = await _charges(driver, range(15, 16, 15))
        await driver.complete(claimed)
        await driver.move_todo(claimed, "lane-m")

        later = await _charges(driver, range(30, 10 * 60, 15))

        assert ([("lane-l", 1)], [("lane-l", 2)]) == (first, later)
        assert POLICY.cap == (await driver.ledger_rows())["ep-1", "lane-m"].nudges

    async def test_a_todo_claimed_and_moved_between_two_ticks_counts_where_it_is_read(
        self, driver: BoardDriver
    ) -> None:
        """The limit: no tick read the claim in lane-l, so it counts in lane-m, where it is read."""
        claimed = await _two_capped_pairs_one_claimed(driver)
        await driver.complete(claimed)
        await driver.move_todo(claimed, "lane-m")

        assert [("lane-m", 1)] == await _charges(driver, range(15, 16, 15))

    async def test_a_claimed_todo_requeued_into_another_pair_is_work_there_not_a_claim(
        self, driver: BoardDriver
    ) -> None:
        """Claimed, requeued and moved to capped lane-m before any tick: pending there, no claim."""
        claimed = await _two_capped_pairs_one_claimed(driver)
        await driver.requeue(claimed)
        await driver.move_todo(claimed, "lane-m")

        assert [] == await _charges(driver, range(15, 10 * 60, 15))
        assert POLICY.cap == (await driver.ledger_rows())["ep-1", "lane-m"].nudges

    # -- the reported case, on hosts that read progress differently ---------------------

    async def test_the_reported_case_with_a_host_clock_behind(self, driver: BoardDriver) -> None:
        """Claims stamped by a host clock 60 s behind the ledger's: the queue ends drained."""
        await _ends_drained(driver, stamp=lambda at: at - timedelta(seconds=60))

    async def test_the_reported_case_on_a_host_that_deletes_finished_work(
        self, driver: BoardDriver
    ) -> None:
        """A host that deletes each todo once done: the queue ends drained."""
        await _ends_drained(driver, finish="delete")

    async def test_the_reported_case_on_a_host_that_unstamps_finished_work(
        self, driver: BoardDriver
    ) -> None:
        """A host that clears claimed_at once done: the queue ends drained."""
        await _ends_drained(driver, finish="unstamp")

    async def test_the_reported_case_with_a_claim_that_spans_the_fifth_nudge(
        self, driver: BoardDriver
    ) -> None:
        """A consumer whose claim reads the time before nudge 5 and commits after: drained."""
        await _ends_drained(driver, late_claim=True)


#: When _two_capped_pairs_one_claimed leaves both pairs capped (nudge 5 came at T0 + 455 min).
CAPPED = T0 + minutes(460)


async def _two_capped_pairs_one_claimed(driver: BoardDriver) -> str:
    """ep-1's lane-l (two todos) and lane-m (one), both nudged to the cap by CAPPED.

    Then lane-l's todo its nudges did not name is claimed, 5 s after CAPPED (progress in
    lane-l); returns its id.
    """
    ids = await stalled_queue(driver, todos=2)
    await driver.add_delivery("dlv-ep-1-lane-m", endpoint_id="ep-1", verified=True, received_at=T0)
    await driver.create_todo(
        "todo-ep-1-lane-m-0",
        endpoint_id="ep-1",
        queue="lane-m",
        created_at=T0,
        delivery_id="dlv-ep-1-lane-m",
    )
    wake = RecordingWake()
    for minute in (10, 15, 35, 95, 455):
        await sweep(driver, T0 + minutes(minute), wake)
    rows = await driver.ledger_rows()
    assert [POLICY.cap, POLICY.cap] == [rows["ep-1", q].nudges for q in ("lane-l", "lane-m")]
    await driver.claim(ids[1], owner="consumer", at=CAPPED + timedelta(seconds=5))
    return ids[1]


async def _charges(driver: BoardDriver, seconds: range) -> list[tuple[str, int]]:
    """Tick at CAPPED plus each of ``seconds``; every charge as (queue, nudge number)."""
    wake = RecordingWake()
    charged = []
    for second in seconds:
        report = await sweep(driver, CAPPED + timedelta(seconds=second), wake)
        charged += [(n.queue, n.number) for n in report.charged]
    return charged


async def _not_progress(
    driver: BoardDriver, change: Callable[[], Awaitable[None]], named: str
) -> None:
    """After nudge 2 (T0 + 15 min), ``change`` is no progress: lane-l's next nudge is nudge 3.

    Ticks every minute until nudge 3 is due: it comes one backoff step after
    nudge 2, naming ``named``, and nothing comes before it (a full pass runs
    in between on a ledger that has them).
    """
    wake = RecordingWake()
    for minute in (10, 15):
        await sweep(driver, T0 + minutes(minute), wake)
    await change()

    charged = []
    at = T0 + minutes(16)
    while at <= T0 + minutes(15) + POLICY.backoff[1]:
        report = await sweep(driver, at, wake)
        charged += [
            (n.number, n.todo.id, n.charged_at) for n in report.charged if n.queue == "lane-l"
        ]
        at += minutes(1)

    assert [(3, named, T0 + minutes(15) + POLICY.backoff[1])] == charged


async def _ends_drained(
    driver: BoardDriver,
    *,
    stamp: Callable[[datetime], datetime] = lambda at: at,
    finish: str = "complete",
    late_claim: bool = False,
) -> None:
    """The reported case with ten todos: a one-shot consumer is woken until the queue is empty.

    ``stamp`` gives a claim's ``claimed_at`` from the ledger's instant of it;
    ``finish`` is how the host ends a todo (complete, delete, unstamp); with
    ``late_claim`` the first consumer sleeps through four nudges and claims
    only once nudge 5 is charged, stamped a second before it.
    """
    ids = await stalled_queue(driver, todos=10)
    clock = FakeClock(T0 + minutes(3))
    wake = RecordingWake()
    claimed: list[str] = []
    asleep = late_claim
    while clock.now < T0 + timedelta(days=1) and len(claimed) < len(ids):
        report = await sweep(driver, clock.now, wake)
        for nudge in report.charged:
            if asleep and nudge.number < POLICY.cap:
                continue
            at = clock.now - timedelta(seconds=1) if asleep else clock.now + timedelta(seconds=1)
            asleep = False
            await driver.claim(nudge.todo.id, owner="one-shot", at=stamp(at))
            if finish == "delete":
                await driver.delete_todo(nudge.todo.id)
            else:
                await driver.complete(nudge.todo.id, unstamp=finish == "unstamp")
            claimed.append(nudge.todo.id)
        clock.advance(timedelta(seconds=15))

    assert ids == claimed
    assert [] == [t.id for t in (await driver.todos()).values() if t.state == "pending"]
    await sweep(driver, clock.advance(timedelta(seconds=15)), wake)
    assert {} == await driver.ledger_rows()
