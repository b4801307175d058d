"""A run of failing ticks in the log: a line as it starts, at most one a minute with a count, and
one "recovered" line as it ends (``stall_core.FailingTicks``, on instants the test gives)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from stall_core import (
    FAILING_LOG_EVERY_S,
    ChargeOutcome,
    FailingTicks,
    LedgerError,
    Nudge,
    PacingPolicy,
    Recovered,
    StillFailing,
    Sweeper,
    TickReport,
)
from stall_testing import RecordingWake
from tests.support import T0


def test_a_run_is_logged_as_it_starts_then_once_a_minute_with_a_count_then_as_it_ends() -> None:
    """Failures at 0 s, every 15 s for 2 min 15 s, then a success: three lines and a recovery."""
    ticks = FailingTicks()

    lines = {at: ticks.failed(float(at)) for at in range(0, 136, 15)}
    recovered = ticks.succeeded(150.0)

    assert {
        0: StillFailing(first=True, since_last=1, total=1, lasted_s=0.0),
        60: StillFailing(first=False, since_last=4, total=5, lasted_s=60.0),
        120: StillFailing(first=False, since_last=4, total=9, lasted_s=120.0),
    } == {at: line for at, line in lines.items() if line is not None}
    assert Recovered(total=10, lasted_s=150.0) == recovered


def test_a_success_outside_a_run_says_nothing_and_a_new_run_starts_afresh() -> None:
    """No recovery line without failures; after one, the next failure is a first again."""
    ticks = FailingTicks()

    assert None is ticks.succeeded(0.0)
    assert ticks.failed(1.0) is not None
    assert Recovered(total=1, lasted_s=1.0) == ticks.succeeded(2.0)
    assert StillFailing(first=True, since_last=1, total=1, lasted_s=0.0) == ticks.failed(2.5)
    assert None is ticks.failed(3.0)


def test_the_period_is_the_least_time_between_two_lines() -> None:
    """Just under the period: quiet; at it: a line, counting every failure since the last."""
    ticks = FailingTicks(every_s=10.0)
    ticks.failed(100.0)

    assert None is ticks.failed(109.999)
    assert StillFailing(first=False, since_last=2, total=3, lasted_s=10.0) == ticks.failed(110.0)
    assert 60.0 == FAILING_LOG_EVERY_S


class FlakyLedger:
    """A ledger whose ticks fail ``failures`` times, then charge nothing; at the failure
    numbered ``jump_at`` the event loop's clock moves a minute and a second on."""

    def __init__(self, failures: int, jump_at: int, jump: list[float]) -> None:
        self.failures = failures
        self.jump_at = jump_at
        self.jump = jump
        self.calls = 0

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        self.calls += 1
        if self.calls == self.jump_at:
            self.jump[0] += FAILING_LOG_EVERY_S + 1
        if self.calls <= self.failures:
            raise LedgerError("connection refused")
        return ChargeOutcome(now=T0, charged=())

    async def refund(self, nudge: Nudge) -> bool:
        raise AssertionError("nothing is charged, so nothing is refunded")


async def test_the_sweep_loop_logs_a_failing_run_through_failing_ticks(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four failed ticks, the loop's clock a minute on at the third, then a success: the first
    failure at error, the third with a count, then "recovered" at info, each with its event."""
    loop = asyncio.get_running_loop()
    real, jump = loop.time, [0.0]
    monkeypatch.setattr(loop, "time", lambda: real() + jump[0])
    stop = asyncio.Event()

    def on_report(_: TickReport) -> None:
        stop.set()

    sweeper = Sweeper(ledger=FlakyLedger(4, 3, jump), wake=RecordingWake())
    with caplog.at_level(logging.INFO, logger="stall_core.sweeper"):
        await asyncio.wait_for(
            sweeper.run(interval=0.001, stop=stop, on_report=on_report), timeout=300
        )

    logged = [
        (r.levelno, getattr(r, "event", None), getattr(r, "failures", None), r.getMessage())
        for r in caplog.records
        if r.name == "stall_core.sweeper"
    ]
    assert [
        (logging.ERROR, "tick_failed", 1),
        (logging.ERROR, "tick_still_failing", 3),
        (logging.INFO, "tick_recovered", 4),
    ] == [entry[:3] for entry in logged]
    first, still, recovered = (entry[3] for entry in logged)
    assert "tick 1: sweep failed, the loop continues: connection refused" == first
    assert still.startswith("tick 3: sweep still failing: 2 failed ticks since the last line, 3 in")
    assert recovered.startswith("tick 5: sweep recovered after 4 failed ticks over ")
