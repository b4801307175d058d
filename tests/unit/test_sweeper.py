"""The Sweeper shell: the ledger charges (on its own clock), then wakes, then refunds."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from adapters.memory import MemoryBoard
from stall_core import (
    ChargeOutcome,
    LedgerError,
    Nudge,
    PacingPolicy,
    Sweeper,
    TickFailure,
    TickReport,
    TodoRef,
    WakeError,
    WakeReceipt,
)
from stall_testing import RecordingWake
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


def stalled_board(clock: Callable[[], datetime]) -> MemoryBoard:
    """A memory board on ``clock`` whose pair ep/lane (one hook) is stalled from T0."""
    board = MemoryBoard(clock=clock)
    board.add_endpoint("ep")
    board.add_hook("h", endpoint_id="ep", url="http://127.0.0.1:9/", secret="whsec_x")
    board.create_todo("t1", endpoint_id="ep", queue="lane", created_at=T0)
    return board


class ScriptedLedger:
    """A LedgerPort double on a clock: returns scripted outcomes (or raises) and logs each call.

    An outcome scripted with ``now=None`` (the default when the script runs
    out) is stamped with the clock as the ledger reads it, like a real one.
    """

    def __init__(
        self,
        events: list[tuple[str, object]],
        clock: FakeClock,
        *outcomes: ChargeOutcome | Exception | None,
        refund: bool | Exception = True,
    ):
        self.events = events
        self.clock = clock
        self.outcomes = list(outcomes)
        self.calls: list[tuple[datetime, PacingPolicy]] = []
        self.everies: list[timedelta | None] = []
        self.refund_result = refund
        self.refunds: list[Nudge] = []

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        now = self.clock()
        self.calls.append((now, policy))
        self.everies.append(every)
        self.events.append(("charge_due:start", now))
        # Yield to the loop, as a real ledger awaiting its database would.
        await asyncio.sleep(0)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, Exception):
            self.events.append(("charge_due:raise", outcome))
            raise outcome
        if outcome is None:
            outcome = ChargeOutcome(now=now)
        self.events.append(("charge_due:return", outcome))
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        self.refunds.append(nudge)
        self.events.append(("refund", nudge.queue))
        await asyncio.sleep(0)
        if isinstance(self.refund_result, Exception):
            raise self.refund_result
        return self.refund_result


def resolved(reached: bool) -> asyncio.Future[bool]:
    """A wake receipt that already knows its fate."""
    receipt: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    receipt.set_result(reached)
    return receipt


class LoggingWake:
    """A WakePort double that logs each wake, refuses the queues it is told to, loses others."""

    def __init__(
        self,
        events: list[tuple[str, object]],
        refuse: frozenset[str] = frozenset(),
        lose: frozenset[str] = frozenset(),
    ):
        self.events = events
        self.refuse = refuse
        self.lose = lose

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        self.events.append(("wake", nudge.queue))
        if nudge.queue in self.refuse:
            raise WakeError(f"refused {nudge.queue}")
        return resolved(nudge.queue not in self.lose)


@pytest.fixture(name="events")
def _events() -> list[tuple[str, object]]:
    return []


@pytest.fixture(name="clock")
def _clock() -> FakeClock:
    return FakeClock(T0 + minutes(10))


async def test_tick_takes_now_from_the_ledger_and_passes_the_policy(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Each tick hands the policy (the spec's by default) to the ledger and reports its instant.

    The report's now is the outcome's: the sweeper reads no clock of its own.
    """
    policy = PacingPolicy(cap=3)
    ledger_now = T0 + minutes(42)
    ledger = ScriptedLedger(events, clock, None, None, ChargeOutcome(now=ledger_now))
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events), policy=policy)

    first = await sweeper.tick()
    clock.advance(minutes(7))
    second = await sweeper.tick()
    third = await sweeper.tick()
    await Sweeper(ledger=ledger, wake=LoggingWake(events)).tick()

    assert [policy, policy, policy, PacingPolicy()] == [p for _, p in ledger.calls]
    assert (T0 + minutes(10), T0 + minutes(17), ledger_now) == (first.now, second.now, third.now)
    assert [1, 2, 3] == [first.tick, second.tick, third.tick]
    assert policy is sweeper.policy


async def test_wakes_only_after_the_charge_returned(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """The wake port sees a nudge only after charge_due returned, in the ledger's order."""
    outcome = ChargeOutcome(
        now=clock.now, charged=(nudge("a"), nudge("b")), cleared=(("ep", "gone"),)
    )
    ledger = ScriptedLedger(events, clock, outcome)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))

    await sweeper.tick()
    await sweeper.settle()

    assert [
        ("charge_due:start", clock.now),
        ("charge_due:return", outcome),
        ("wake", "a"),
        ("wake", "b"),
    ] == events


async def test_tick_report_fields(events: list[tuple[str, object]], clock: FakeClock) -> None:
    """The report holds now, the charged and cleared, the counts, the pass and pairs judged."""
    outcome = ChargeOutcome(
        now=clock.now,
        charged=(nudge("a"), nudge("b"), nudge("c")),
        cleared=(("ep", "x"),),
        kind="delta",
        judged=7,
    )
    wake = LoggingWake(events, refuse=frozenset({"b"}))
    sweeper = Sweeper(ledger=ScriptedLedger(events, clock, outcome), wake=wake)

    report = await sweeper.tick()

    assert (clock.now, outcome.charged, (("ep", "x"),)) == (
        report.now,
        report.charged,
        report.cleared,
    )
    assert (2, 1, False, "delta", 7) == (
        report.queued,
        report.refused,
        report.skipped,
        report.kind,
        report.judged,
    )
    assert 0.0 <= report.duration_s


async def test_the_summary_names_the_pass_and_the_pairs_judged(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The tick's summary line says which pass ran and how many pairs it judged."""
    outcome = ChargeOutcome(now=clock.now, cleared=(("ep", "x"),), kind="full", judged=3)
    sweeper = Sweeper(ledger=ScriptedLedger(events, clock, outcome), wake=LoggingWake(events))
    with caplog.at_level(logging.INFO, logger="stall_core.sweeper"):
        await sweeper.tick()

    assert ["tick 1: full pass judged 3 pair(s): charged 0, cleared 1, queued 0, refused 0"] == [
        r.getMessage() for r in caplog.records
    ]


def test_a_naive_outcome_instant_is_rejected() -> None:
    """No ledger can report a naive now: the outcome refuses it."""
    with pytest.raises(ValueError, match="now"):
        ChargeOutcome(now=datetime(2026, 10, 15, 9))


async def test_nudge_delivery_fails_and_the_charge_is_refunded(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Nudge delivery refused: counted as failed, logged, and the charge refunded at once."""
    board = stalled_board(clock)
    wake = RecordingWake(refuse=True)
    sweeper = Sweeper(ledger=board, wake=wake)

    with caplog.at_level(logging.WARNING, logger="stall_core.sweeper"):
        report = await sweeper.tick()

    assert (0, 1) == (report.queued, report.refused)
    assert ["t1"] == [n.todo.id for n in wake.refused]
    assert [] == wake.sent
    # The count goes back; the stamp stays as the pacing base of the retry.
    assert 0 == board.ledger["ep", "lane"].nudges
    assert clock.now == board.ledger["ep", "lane"].last_nudged_at
    assert 1 == sweeper.refunded
    [record] = caplog.records
    assert "tick 1" in record.getMessage()
    assert "ep/lane" in record.getMessage()
    assert "wake refused" in record.getMessage()
    # A WakeError is an expected refusal: logged without a traceback.
    assert not record.exc_info


class BrokenReceiptWake:
    """A transport whose receipts break the contract: they raise or are cancelled."""

    def __init__(self, how: str) -> None:
        self.how = how

    async def wake(self, nudge: Nudge) -> asyncio.Future[bool]:
        receipt: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.how == "raise":
            receipt.set_exception(RuntimeError("transport bug"))
        else:
            receipt.cancel()
        return receipt


@pytest.mark.parametrize("how", ["raise", "cancel"])
async def test_a_broken_receipt_counts_as_reaching_nobody(
    how: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A receipt that raises or is cancelled is refunded, and settle() still returns."""
    board = stalled_board(clock)
    sweeper = Sweeper(ledger=board, wake=BrokenReceiptWake(how))

    await sweeper.tick()
    await sweeper.settle()

    assert (0, 1) == (board.ledger["ep", "lane"].nudges, sweeper.refunded)
    assert (how == "raise") == any("receipt" in r.getMessage() for r in caplog.records)


async def test_settle_waits_for_a_receipt_still_pending(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """settle() returns only after a late receipt resolved and its refund ran."""
    late: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    class Later:
        async def wake(self, nudge: Nudge) -> WakeReceipt:
            return late

    ledger = ScriptedLedger(events, clock, ChargeOutcome(now=clock.now, charged=(nudge("a"),)))
    sweeper = Sweeper(ledger=ledger, wake=Later())
    await sweeper.tick()

    async def settle() -> None:
        await sweeper.settle()
        events.append(("settled", sweeper.refunded))  # noted the moment settle() returned

    settled = asyncio.create_task(settle())
    # One turn of the loop, not a wait: settle() was scheduled first, so it has started
    # waiting (or, were it broken, returned) before the receipt resolves below.
    await asyncio.sleep(0)
    events.append(("resolved", None))
    late.set_result(False)
    await asyncio.wait_for(settled, timeout=30)  # a hang guard only

    # In this order: settle() returned after the receipt resolved and its refund counted.
    assert [("resolved", None), ("refund", "a"), ("settled", 1)] == [
        e for e in events if e[0] in {"resolved", "refund", "settled"}
    ]
    assert ["a"] == [n.queue for n in ledger.refunds]


async def test_a_refund_the_ledger_declines_is_not_counted(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A refund the ledger's compare-and-set declines (a later charge, a clear) counts nothing."""
    outcome = ChargeOutcome(now=clock.now, charged=(nudge("a"),))
    ledger = ScriptedLedger(events, clock, outcome, refund=False)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events, lose=frozenset({"a"})))

    await sweeper.tick()
    await sweeper.settle()

    assert (["a"], 0) == ([n.queue for n in ledger.refunds], sweeper.refunded)


async def test_a_failing_refund_is_logged_and_the_loop_goes_on(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A refund the ledger cannot make (LedgerError) is logged without a traceback; ticks go on."""
    ledger = ScriptedLedger(
        events,
        clock,
        ChargeOutcome(now=clock.now, charged=(nudge("a"),)),
        ChargeOutcome(now=clock.now, charged=(nudge("b"),)),
        None,
        refund=LedgerError("connection reset"),
    )
    wake = LoggingWake(events, refuse=frozenset({"a"}), lose=frozenset({"b"}))
    stop = asyncio.Event()
    reports: list[TickReport] = []

    def on_report(report: TickReport) -> None:
        reports.append(report)
        if len(reports) == 3:
            stop.set()

    sweeper = Sweeper(ledger=ledger, wake=wake)
    with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
        ran = await asyncio.wait_for(
            sweeper.run(interval=0.001, stop=stop, on_report=on_report), timeout=5
        )
        await sweeper.settle()

    assert 3 == ran
    assert [1, 2, 3] == [r.tick for r in reports]
    assert (["a", "b"], 0) == ([n.queue for n in ledger.refunds], sweeper.refunded)
    assert [
        "refund of ep/a nudge 1 failed; it counts toward the cap: connection reset",
        "refund of ep/b nudge 1 failed; it counts toward the cap: connection reset",
    ] == [r.getMessage() for r in caplog.records]
    # A LedgerError is a known failure: no traceback.
    assert [] == [r for r in caplog.records if r.exc_info]


async def test_a_skipped_outcome_is_reported_and_wakes_nothing(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """When another instance holds the tick, the report says skipped and nothing is woken."""
    ledger = ScriptedLedger(events, clock, ChargeOutcome(now=clock.now, skipped=True))
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))

    report = await sweeper.tick()

    assert report.skipped
    assert (clock.now, (), (), 0, 0) == (
        report.now,
        report.charged,
        report.cleared,
        report.queued,
        report.refused,
    )
    assert [] == [e for e in events if e[0] == "wake"]


async def test_one_failed_wake_does_not_stop_the_others(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A wake failing (even with an unexpected exception) does not skip later nudges."""

    class Flaky:
        async def wake(self, nudge: Nudge) -> WakeReceipt:
            events.append(("wake", nudge.queue))
            if nudge.queue == "a":
                raise RuntimeError("transport bug")
            return resolved(True)

    outcome = ChargeOutcome(now=clock.now, charged=(nudge("a"), nudge("b")))
    ledger = ScriptedLedger(events, clock, outcome)
    sweeper = Sweeper(ledger=ledger, wake=Flaky())

    report = await sweeper.tick()
    await sweeper.settle()

    assert [("wake", "a"), ("wake", "b")] == [e for e in events if e[0] == "wake"]
    assert (1, 1) == (report.queued, report.refused)
    assert ["a"] == [n.queue for n in ledger.refunds]


async def test_sweep_query_error_propagates_from_tick(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Sweep query error: a failing ledger raises out of tick() and nothing is woken."""
    ledger = ScriptedLedger(events, clock, LedgerError("relation does not exist"))
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))

    with pytest.raises(LedgerError, match="relation does not exist"):
        await sweeper.tick()

    assert [] == [e for e in events if e[0] == "wake"]


async def test_sweep_query_error_is_logged_and_the_loop_continues(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Sweep query error: run() hands each failing tick to on_error and goes on; it logs the
    first of a run by number (FailingTicks: the next within a minute is counted, not logged)."""
    ledger = ScriptedLedger(
        events,
        clock,
        RuntimeError("unexpected"),
        LedgerError("connection reset"),
        ChargeOutcome(now=clock.now, charged=(nudge("a"),)),
    )
    stop = asyncio.Event()
    reports: list[TickReport] = []
    failures: list[TickFailure] = []

    def on_report(report: TickReport) -> None:
        reports.append(report)
        stop.set()

    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))
    with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
        ran = await asyncio.wait_for(
            sweeper.run(interval=0.001, stop=stop, on_report=on_report, on_error=failures.append),
            timeout=5,
        )

    assert 3 == ran
    assert [(1, "unexpected"), (2, "connection reset")] == [(f.tick, f.error) for f in failures]
    assert [(3, 1)] == [(r.tick, r.queued) for r in reports]
    assert ["tick 1: sweep failed, the loop continues: unexpected"] == [
        r.getMessage() for r in caplog.records
    ]
    # A LedgerError is a known failure (no traceback); anything else keeps its traceback.
    assert [RuntimeError] == [r.exc_info[0] for r in caplog.records if r.exc_info]


async def test_a_failing_report_or_error_sink_does_not_stop_the_loop(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """on_report or on_error raising (a closed pipe) is logged, and the loop goes on."""
    ledger = ScriptedLedger(events, clock, LedgerError("down"))
    stop = asyncio.Event()
    seen: list[int] = []

    def sink(result: TickReport | TickFailure) -> None:
        seen.append(result.tick)
        if result.tick == 3:
            stop.set()
        raise BrokenPipeError("stdout closed")

    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))
    with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
        ran = await asyncio.wait_for(
            sweeper.run(interval=0.001, stop=stop, on_report=sink, on_error=sink), 5
        )

    assert (3, [1, 2, 3]) == (ran, seen)
    assert [f"tick {n}: reporting failed; the loop continues" for n in (1, 2, 3)] == [
        r.getMessage() for r in caplog.records if "reporting failed" in r.getMessage()
    ]


async def test_run_returns_at_once_when_already_stopped(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """A stop event set before run() starts means no tick at all."""
    ledger = ScriptedLedger(events, clock)
    stop = asyncio.Event()
    stop.set()

    ran = await Sweeper(ledger=ledger, wake=LoggingWake(events)).run(interval=60, stop=stop)

    assert 0 == ran
    assert [] == ledger.calls


async def test_run_stops_promptly_when_the_event_is_set(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """Setting stop during the wait ends run() without sitting out a long interval."""
    ledger = ScriptedLedger(events, clock)
    stop = asyncio.Event()
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))

    ticked = asyncio.Event()

    task = asyncio.create_task(
        sweeper.run(interval=3600, stop=stop, on_report=lambda _: ticked.set())
    )
    await asyncio.wait_for(ticked.wait(), timeout=2)
    stop.set()
    ran = await asyncio.wait_for(task, timeout=2)

    assert 1 == ran


async def test_run_ticks_each_interval_on_the_ledgers_clock(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """run() ticks every interval (a timedelta or seconds), deciding at the ledger's clock."""
    ledger = ScriptedLedger(events, clock)
    stop = asyncio.Event()
    reports: list[TickReport] = []

    def on_report(report: TickReport) -> None:
        reports.append(report)
        clock.advance(timedelta(seconds=30))
        if len(reports) == 3:
            stop.set()

    ran = await asyncio.wait_for(
        Sweeper(ledger=ledger, wake=LoggingWake(events)).run(
            interval=timedelta(milliseconds=1), stop=stop, on_report=on_report
        ),
        timeout=5,
    )

    assert 3 == ran
    assert [T0 + minutes(10) + timedelta(seconds=30 * i) for i in range(3)] == [
        now for now, _ in ledger.calls
    ]
    assert [now for now, _ in ledger.calls] == [r.now for r in reports]


class StuckLedger(ScriptedLedger):
    """A ScriptedLedger whose charges never return: ``entered`` is set once one is waiting."""

    def __init__(self, events: list[tuple[str, object]], clock: FakeClock) -> None:
        super().__init__(events, clock)
        self.entered = asyncio.Event()

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        self.entered.set()
        await asyncio.get_running_loop().create_future()  # only a cancellation ends it
        raise AssertionError("unreachable")


@pytest.mark.parametrize("during", ["the wait", "a tick"])
async def test_run_propagates_cancellation(
    events: list[tuple[str, object]],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    during: str,
) -> None:
    """Cancelling the run task cancels it; cancellation is not logged as a failed tick."""
    stop, reported = asyncio.Event(), asyncio.Event()
    failures: list[TickFailure] = []
    ledger = StuckLedger(events, clock) if during == "a tick" else ScriptedLedger(events, clock)
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))
    task = asyncio.create_task(
        sweeper.run(
            interval=3600, stop=stop, on_report=lambda _: reported.set(), on_error=failures.append
        )
    )
    # Cancel once the loop is where the case says: in its hour's wait, or mid-charge.
    entered = ledger.entered if isinstance(ledger, StuckLedger) else reported
    await asyncio.wait_for(entered.wait(), timeout=30)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    assert [] == failures
    assert [] == [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("interval", [0, -1, -0.5, math.nan])
async def test_run_rejects_non_positive_intervals(
    events: list[tuple[str, object]], clock: FakeClock, interval: float
) -> None:
    """A zero, negative or NaN interval is refused before any tick."""
    ledger = ScriptedLedger(events, clock)

    with pytest.raises(ValueError, match="interval must be a positive number of seconds"):
        await Sweeper(ledger=ledger, wake=LoggingWake(events)).run(
            interval=interval, stop=asyncio.Event()
        )

    assert [] == ledger.calls


async def test_an_idle_tick_logs_at_debug_and_a_busy_one_at_info(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A tick that charged, cleared or refused nothing logs its summary at debug, others at info."""
    ledger = ScriptedLedger(
        events,
        clock,
        ChargeOutcome(now=clock.now),
        ChargeOutcome(now=clock.now, skipped=True),
        ChargeOutcome(now=clock.now, charged=(nudge("a"),)),
    )
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))
    with caplog.at_level(logging.DEBUG, logger="stall_core.sweeper"):
        for _ in range(3):
            await sweeper.tick()

    summaries = [
        (r.tick, r.levelno)  # type: ignore[attr-defined]
        for r in caplog.records
        if not hasattr(r, "nudge")
    ]
    assert [(1, logging.DEBUG), (2, logging.DEBUG), (3, logging.INFO)] == summaries


async def test_log_records_carry_structured_fields(
    events: list[tuple[str, object]], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A woken nudge's record carries tick, endpoint, queue, nudge and todo as fields."""
    ledger = ScriptedLedger(events, clock, ChargeOutcome(now=clock.now, charged=(nudge("a", 2),)))
    sweeper = Sweeper(ledger=ledger, wake=LoggingWake(events))
    with caplog.at_level(logging.DEBUG, logger="stall_core.sweeper"):
        await sweeper.tick()

    woke = [r for r in caplog.records if hasattr(r, "nudge")]
    assert [(1, "ep", "a", 2, "t-a")] == [
        (r.tick, r.endpoint, r.queue, r.nudge, r.todo)  # type: ignore[attr-defined]
        for r in woke
    ]


async def test_abandon_stops_following_receipts_without_refunds(
    events: list[tuple[str, object]], clock: FakeClock
) -> None:
    """abandon() ends the wait on unresolved receipts at once: nothing is refunded, none left."""
    pending: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    class Hanging:
        async def wake(self, nudge: Nudge) -> WakeReceipt:
            return pending

    ledger = ScriptedLedger(events, clock, ChargeOutcome(now=clock.now, charged=(nudge("a"),)))
    sweeper = Sweeper(ledger=ledger, wake=Hanging())
    await sweeper.tick()

    await sweeper.abandon()
    await asyncio.wait_for(sweeper.settle(), timeout=1)

    assert [] == ledger.refunds
    assert False is pending.cancelled()


async def test_the_loop_asks_the_ledger_to_skip_within_its_interval_and_once_does_not() -> None:
    """run() passes its interval as the fleet's pace; a tick called alone (--once) does not."""
    clock = FakeClock(T0)
    ledger = ScriptedLedger([], clock)
    sweeper = Sweeper(ledger=ledger, wake=RecordingWake())
    stop = asyncio.Event()

    await sweeper.tick()

    def stop_after_one(report: TickReport) -> None:
        stop.set()

    await sweeper.run(interval=timedelta(seconds=15), stop=stop, on_report=stop_after_one)

    assert [None, timedelta(seconds=15)] == ledger.everies
