"""The Sweeper shell: clock in, ledger charge, then wakes; failures counted, logged, survived."""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timedelta

import pytest

from adapters.memory import MemoryBoard, RecordingWake
from stall_core import (
    ChargeOutcome,
    LedgerError,
    Nudge,
    PacingPolicy,
    Sweeper,
    TickReport,
    TodoRef,
    WakeError,
)
from tests.support import T0, FakeClock, minutes


def nudge(queue: str = "lane", number: int = 1, at: datetime = T0) -> Nudge:
    """A charged nudge of endpoint ep naming todo t-<queue>."""
    return Nudge(
        endpoint_id="ep",
        queue=queue,
        todo=TodoRef(id=f"t-{queue}", created_at=at - minutes(10)),
        number=number,
        charged_at=at,
    )


class ScriptedLedger:
    """A LedgerPort double: returns scripted outcomes (or raises) and logs each call."""

    def __init__(self, events: list[tuple[str, object]], *outcomes: ChargeOutcome | Exception):
        self.events = events
        self.outcomes = list(outcomes)
        self.calls: list[tuple[datetime, PacingPolicy]] = []

    async def charge_due(self, *, now: datetime, policy: PacingPolicy) -> ChargeOutcome:
        self.calls.append((now, policy))
        self.events.append(("charge_due:start", now))
        # Yield to the loop, as a real ledger awaiting its database would.
        await asyncio.sleep(0)
        outcome = self.outcomes.pop(0) if self.outcomes else ChargeOutcome()
        if isinstance(outcome, Exception):
            self.events.append(("charge_due:raise", outcome))
            raise outcome
        self.events.append(("charge_due:return", outcome))
        return outcome


class LoggingWake:
    """A WakePort double that logs each wake and refuses the queues it is told to."""

    def __init__(self, events: list[tuple[str, object]], refuse: frozenset[str] = frozenset()):
        self.events = events
        self.refuse = refuse

    async def wake(self, nudge: Nudge) -> None:
        self.events.append(("wake", nudge.queue))
        if nudge.queue in self.refuse:
            raise WakeError(f"refused {nudge.queue}")


@pytest.fixture(name="events")
def _events() -> list[tuple[str, object]]:
    return []


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    return FakeClock(T0 + minutes(10))


async def test_tick_passes_the_clock_and_policy_to_the_ledger(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Each tick reads the injected clock and hands that now and the policy to the ledger."""
    policy = PacingPolicy(cap=3)
    ledger = ScriptedLedger(events)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock, policy=policy)

    first = await sweeper.tick()
    clock.advance(minutes(7))
    second = await sweeper.tick()

    assert [(T0 + minutes(10), policy), (T0 + minutes(17), policy)] == ledger.calls
    assert (T0 + minutes(10), T0 + minutes(17)) == (first.now, second.now)
    assert policy is sweeper.policy


async def test_default_policy_is_the_spec_policy(events: list[tuple[str, object]]) -> None:
    """Without a policy argument the sweeper uses the default (the spec's numbers)."""
    ledger = ScriptedLedger(events)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=FakeClock())

    await sweeper.tick()

    assert PacingPolicy() == ledger.calls[0][1]


async def test_wakes_only_after_the_charge_returned(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """The wake port sees a nudge only after charge_due returned, in the ledger's order."""
    outcome = ChargeOutcome(charged=(nudge("a"), nudge("b")), deleted=(("ep", "gone"),))
    ledger = ScriptedLedger(events, outcome)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock)

    await sweeper.tick()

    assert [
        ("charge_due:start", clock.now),
        ("charge_due:return", outcome),
        ("wake", "a"),
        ("wake", "b"),
    ] == events


async def test_tick_report_fields(events: list[tuple[str, object]], clock: FakeClock) -> None:
    """The report holds the tick number, now, the charged and deleted, and the counts."""
    outcome = ChargeOutcome(charged=(nudge("a"), nudge("b"), nudge("c")), deleted=(("ep", "x"),))
    wake = LoggingWake(events, refuse=frozenset({"b"}))
    sweeper = Sweeper(ledger=ScriptedLedger(events, outcome), wake=wake, clock=clock)

    report = await sweeper.tick()

    assert 1 == report.tick
    assert clock.now == report.now
    assert outcome.charged == report.charged
    assert (("ep", "x"),) == report.deleted
    assert (2, 1) == (report.delivered, report.failed)
    assert 0.0 <= report.duration_s


async def test_empty_tick_reports_zeroes(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A tick with nothing due reports nothing charged, deleted, delivered or failed."""
    sweeper = Sweeper(ledger=ScriptedLedger(events), wake=LoggingWake(events), clock=clock)

    report = await sweeper.tick()

    assert ((), (), 0, 0) == (report.charged, report.deleted, report.delivered, report.failed)
    assert [] == [e for e in events if e[0] == "wake"]


async def test_tick_numbers_count_up(events: list[tuple[str, object]], clock: FakeClock) -> None:
    """Each tick of one sweeper carries the next number."""
    sweeper = Sweeper(ledger=ScriptedLedger(events), wake=LoggingWake(events), clock=clock)

    assert [1, 2, 3] == [(await sweeper.tick()).tick for _ in range(3)]


async def test_naive_clock_is_rejected(events: list[tuple[str, object]]) -> None:
    """A clock returning a naive datetime fails the tick before the ledger is asked."""
    ledger = ScriptedLedger(events)
    sweeper = Sweeper(
        ledger=ledger, wake=LoggingWake(events), clock=lambda: datetime(2026, 10, 15, 9)
    )

    with pytest.raises(ValueError, match="clock"):
        await sweeper.tick()

    assert [] == ledger.calls


async def test_nudge_delivery_fails_and_the_charge_stands(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Nudge delivery fails: counted as failed, logged, and the ledger row still advanced."""
    board = MemoryBoard()
    board.add_endpoint("ep")
    board.add_hook("h", endpoint_id="ep", url="http://127.0.0.1:9/", secret="whsec_x")
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0)
    wake = RecordingWake(refuse=True)
    sweeper = Sweeper(ledger=board, wake=wake, clock=clock)

    with caplog.at_level(logging.WARNING, logger="stall_core.sweeper"):
        report = await sweeper.tick()

    assert (0, 1) == (report.delivered, report.failed)
    assert ["t1"] == [n.todo.id for n in wake.refused]
    assert [] == wake.sent
    assert 1 == board.ledger["ep", "lane"].nudges
    assert clock.now == board.ledger["ep", "lane"].last_nudged_at
    [record] = caplog.records
    assert "tick 1" in record.getMessage()
    assert "ep/lane" in record.getMessage()
    assert "wake refused" in record.getMessage()
    # A WakeError is an expected refusal: logged without a traceback.
    assert not record.exc_info


async def test_nudge_delivery_fails_then_the_next_backoff_retries(clock: FakeClock) -> None:
    """After a refused wake the pair is not re-woken at once; the next backoff retries."""
    board = MemoryBoard()
    board.add_endpoint("ep")
    board.add_hook("h", endpoint_id="ep", url="http://127.0.0.1:9/", secret="whsec_x")
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0)
    wake = RecordingWake(refuse=True)
    sweeper = Sweeper(ledger=board, wake=wake, clock=clock)
    await sweeper.tick()
    wake.refuse = False

    clock.advance(minutes(1))
    early = await sweeper.tick()
    clock.advance(minutes(4))
    retry = await sweeper.tick()

    assert () == early.charged
    assert [2] == [n.number for n in retry.charged]
    assert [2] == [n.number for n in wake.sent]


async def test_one_failed_wake_does_not_stop_the_others(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A wake failing (even with an unexpected exception) does not skip later nudges."""

    class Flaky:
        async def wake(self, nudge: Nudge) -> None:
            events.append(("wake", nudge.queue))
            if nudge.queue == "a":
                raise RuntimeError("transport bug")

    outcome = ChargeOutcome(charged=(nudge("a"), nudge("b")))
    sweeper = Sweeper(ledger=ScriptedLedger(events, outcome), wake=Flaky(), clock=clock)

    report = await sweeper.tick()

    assert [("wake", "a"), ("wake", "b")] == [e for e in events if e[0] == "wake"]
    assert (1, 1) == (report.delivered, report.failed)


async def test_sweep_query_error_propagates_from_tick(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Sweep query error: a failing ledger raises out of tick() and nothing is woken."""
    ledger = ScriptedLedger(events, LedgerError("relation does not exist"))
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock)

    with pytest.raises(LedgerError, match="relation does not exist"):
        await sweeper.tick()

    assert [] == [e for e in events if e[0] == "wake"]


async def test_sweep_query_error_is_logged_and_the_loop_continues(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Sweep query error: run() logs the failing tick by number and keeps ticking."""
    ledger = ScriptedLedger(
        events,
        LedgerError("connection reset"),
        RuntimeError("unexpected"),
        ChargeOutcome(charged=(nudge("a"),)),
    )
    stop = asyncio.Event()
    reports: list[TickReport] = []

    def on_report(report: TickReport) -> None:
        reports.append(report)
        stop.set()

    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock)
    with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
        ran = await asyncio.wait_for(
            sweeper.run(interval=0.001, stop=stop, on_report=on_report), timeout=5
        )

    assert 3 == ran
    assert [3] == [r.tick for r in reports]
    assert [1] == [r.delivered for r in reports]
    assert [
        "tick 1: sweep failed, the loop continues: connection reset",
        "tick 2: sweep failed, the loop continues: unexpected",
    ] == [r.getMessage() for r in caplog.records]
    # A LedgerError is a known failure (no traceback); anything else keeps its traceback.
    assert [RuntimeError] == [r.exc_info[0] for r in caplog.records if r.exc_info]


async def test_a_failing_report_sink_does_not_stop_the_loop(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An on_report callback that raises (a closed pipe) is logged and the loop goes on."""
    ledger = ScriptedLedger(events, ChargeOutcome(), ChargeOutcome(), ChargeOutcome())
    stop = asyncio.Event()
    seen: list[int] = []

    def sink(report: TickReport) -> None:
        seen.append(report.tick)
        if report.tick == 3:
            stop.set()
        raise BrokenPipeError("stdout closed")

    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock)
    with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
        ran = await asyncio.wait_for(sweeper.run(interval=0.001, stop=stop, on_report=sink), 5)

    assert (3, [1, 2, 3]) == (ran, seen)
    assert ["tick 1: reporting failed; the loop continues"] == [
        r.getMessage() for r in caplog.records
    ][:1]


async def test_run_returns_at_once_when_already_stopped(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A stop event set before run() starts means no tick at all."""
    ledger = ScriptedLedger(events)
    stop = asyncio.Event()
    stop.set()

    ran = await Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock).run(
        interval=60, stop=stop
    )

    assert 0 == ran
    assert [] == ledger.calls


async def test_run_stops_promptly_when_the_event_is_set(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Setting stop during the wait ends run() without sitting out a long interval."""
    ledger = ScriptedLedger(events)
    stop = asyncio.Event()
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock)

    ticked = asyncio.Event()

    task = asyncio.create_task(
        sweeper.run(interval=3600, stop=stop, on_report=lambda _: ticked.set())
    )
    await asyncio.wait_for(ticked.wait(), timeout=2)
    stop.set()
    ran = await asyncio.wait_for(task, timeout=2)

    assert 1 == ran


async def test_run_ticks_each_interval_with_the_clock(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """run() ticks repeatedly, each tick reading the clock afresh, and reports each one."""
    ledger = ScriptedLedger(events)
    stop = asyncio.Event()
    reports: list[TickReport] = []

    def on_report(report: TickReport) -> None:
        reports.append(report)
        clock.advance(timedelta(seconds=30))
        if len(reports) == 3:
            stop.set()

    ran = await asyncio.wait_for(
        Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock).run(
            interval=0.001, stop=stop, on_report=on_report
        ),
        timeout=5,
    )

    assert 3 == ran
    assert [T0 + minutes(10) + timedelta(seconds=30 * i) for i in range(3)] == [
        now for now, _ in ledger.calls
    ]


async def test_run_propagates_cancellation(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Cancelling the run task cancels it; cancellation is not logged as a failed tick."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        Sweeper(ledger=ScriptedLedger(events), wake=LoggingWake(events), clock=clock).run(
            interval=3600, stop=stop
        )
    )
    await asyncio.sleep(0.01)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("interval", [0, -1, -0.5, math.nan])
async def test_run_rejects_non_positive_intervals(
    events: list[tuple[str, object]], clock: FakeClock, interval: float
) -> None:
    """A zero, negative or NaN interval is refused before any tick."""
    ledger = ScriptedLedger(events)

    with pytest.raises(ValueError, match="interval must be positive"):
        await Sweeper(ledger=ledger, wake=LoggingWake(events), clock=clock).run(
            interval=interval, stop=asyncio.Event()
        )

    assert [] == ledger.calls
