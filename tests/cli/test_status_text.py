"""`status` as a person reads it: column heads that say what they count, one duration format."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from adapters.postgres import FleetRecord
from stall_core import PacingPolicy, PairStatus, Verdict
from stall_nudge.cli.status import fleet_lines, render_table

NOW = datetime(2026, 12, 3, 3, 30, tzinfo=UTC)


def backing_off(**fields: Any) -> PairStatus:
    """A pair nudged 9.066 s ago whose oldest todo is 69.5 s old, next due in 4m50.9s."""
    pair = PairStatus(
        endpoint_id="ep-1",
        queue="lane-l",
        sendable=2,
        held_by_gate=3,
        oldest_age=timedelta(seconds=69.5),
        effective_nudges=1,
        last_nudged_at=NOW - timedelta(seconds=9.066),
        next_due_at=NOW + timedelta(seconds=290.9),
        verdict=Verdict.BACKING_OFF,
    )
    return attrs.evolve(pair, **fields)


def test_the_pending_counts_are_headed_by_what_they_count() -> None:
    """SENDABLE (passes the sender gate) and HELD BY GATE head the counts; nothing says gated."""
    header, row = render_table([backing_off()], NOW, PacingPolicy())

    assert ["ENDPOINT", "QUEUE", "SENDABLE", "HELD BY GATE", "OLDEST", "NUDGES"] == (
        re.split(r"\s{2,}", header.strip())[:6]
    )
    assert "GATED" not in header
    assert ["ep-1", "lane-l", "2", "3"] == row.split()[:4]


def test_ages_and_waits_are_whole_seconds_in_one_format() -> None:
    """The oldest age, the last nudge and the next due time drop their fractions of a second."""
    _, row = render_table([backing_off()], NOW, PacingPolicy())

    assert ["1m9s", "1", "9s", "ago", "in", "4m50s"] == row.split()[4:10]


def test_an_age_under_a_second_is_zero_seconds() -> None:
    """A todo 429 ms old and a nudge due in 0.4 s read 0s and in 0s, not milliseconds."""
    pair = backing_off(
        oldest_age=timedelta(milliseconds=429),
        last_nudged_at=NOW - timedelta(milliseconds=429),
        next_due_at=NOW + timedelta(milliseconds=400),
    )

    _, row = render_table([pair], NOW, PacingPolicy())

    assert ["0s", "1", "0s", "ago", "in", "0s"] == row.split()[4:10]


def test_the_fleet_line_writes_its_durations_with_format_duration() -> None:
    """Ages in whole seconds; the interval and the full pass's duration by format_duration."""
    fleet = FleetRecord(
        swept_at=NOW - timedelta(seconds=3.25),
        interval=timedelta(seconds=15),
        last_kind="delta",
        last_judged=7,
        full_pass_at=NOW - timedelta(seconds=65.5),
        full_pass_took=timedelta(milliseconds=272.4),
        full_pass_pairs=1200,
    )

    assert [
        "the fleet last swept 3s ago (every 15s): a delta tick that judged 7 pair(s)",
        "its last full pass ran 1m5s ago: 1200 pair(s) in 272ms",
    ] == fleet_lines(fleet, NOW)
