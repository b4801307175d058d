"""`status` as a person and a script read it, on values: what each column counts, one duration
format, which pairs are marked as needing a person, and the JSON convention."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from adapters.postgres import FleetRecord
from stall_core import HistoryEntry, PacingPolicy, PairStatus, Silence, Verdict
from stall_nudge.cli.status import fleet_lines, render_table, status_json

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


def stale(verdict: Verdict, **fields: Any) -> PairStatus:
    """A pair of ep-1 with work 30 minutes old, judged ``verdict``."""
    return backing_off(**{"verdict": verdict, "oldest_age": timedelta(minutes=30), **fields})


@pytest.mark.parametrize(
    ("pair", "needs_person"),
    [
        (stale(Verdict.DUE), False),
        (stale(Verdict.NO_RECEIVER, oldest_age=timedelta(seconds=5)), False),
        (stale(Verdict.CAPPED, effective_nudges=5), True),
        (stale(Verdict.NO_RECEIVER), True),
        (stale(Verdict.ENDPOINT_INACTIVE), True),
        (stale(Verdict.DUE, hook_failures=3), True),
        (stale(Verdict.FRESH, oldest_age=timedelta(seconds=5), hook_failures=3), False),
        (stale(Verdict.DUE, hooks_disabled=1), False),
    ],
    ids=[
        "due",
        "fresh-without-receiver",
        "capped",
        "stale-without-receiver",
        "stale-on-paused-endpoint",
        "stale-with-failing-receiver",
        "fresh-with-failing-receiver",
        "stale-with-a-disabled-hook-beside-a-working-one",
    ],
)
def test_a_pair_is_marked_when_the_sweep_cannot_get_it_claimed_without_a_person(
    pair: PairStatus, needs_person: bool
) -> None:
    """Capped, or work past the threshold that nothing wakes or whose receiver fails: marked
    and counted in the table, ``needs_person`` in JSON (what status --check exits 3 on)."""
    _, row, *legend = render_table([pair], NOW, PacingPolicy())
    [as_json] = json.loads(status_json([pair], NOW, PacingPolicy()))["pairs"]

    assert ("!" if needs_person else " ") == row[0]
    counted = [line for line in legend if "needs a person" in line]
    assert (["! needs a person: 1 of 1 pair"] if needs_person else []) == counted
    assert needs_person is as_json["needs_person"]


def test_hook_health_shows_per_pair_in_the_table_and_in_json() -> None:
    """Failures in a row and disabled hooks show in the HOOKS cell and as JSON numbers."""
    failing = stale(Verdict.DUE, hook_failures=3, hooks_disabled=1)
    healthy = attrs.evolve(stale(Verdict.DUE), endpoint_id="ep-2")

    header, *rows = render_table([failing, healthy], NOW, PacingPolicy())
    pairs = json.loads(status_json([failing, healthy], NOW, PacingPolicy()))["pairs"]

    hooks = header.index("HOOKS")
    shown = {row[2:].split()[0]: (row[0], row[hooks:].split("  ")[0]) for row in rows[:2]}
    assert {"ep-1": ("!", "3 failures in a row, 1 disabled"), "ep-2": (" ", "ok")} == shown
    assert "! needs a person: 1 of 2 pairs" == rows[-1]
    assert {"ep-1": (3, 1, True, "failing"), "ep-2": (0, 0, False, "ok")} == {
        p["endpoint_id"]: (
            p["hook_failures"],
            p["hooks_disabled"],
            p["needs_person"],
            p["receiver"],
        )
        for p in pairs
    }


def hooks_of(pair: PairStatus) -> str:
    """The HOOKS cell of ``pair``'s line in the table."""
    header, row, *_ = render_table([pair], NOW, PacingPolicy())
    return row[header.index("HOOKS") :].split("  ")[0]


@pytest.mark.parametrize("verdict", [Verdict.NO_RECEIVER, Verdict.HELD_BY_GATE, Verdict.DRAINED])
def test_a_pair_no_enabled_hook_covers_shows_none_not_ok(verdict: Verdict) -> None:
    """Whatever the verdict, no enabled covering hook reads "none", in the table and in JSON."""
    uncovered = stale(verdict, has_receiver=False, hooks_disabled=1)

    [as_json] = json.loads(status_json([uncovered], NOW, PacingPolicy()))["pairs"]

    assert "none, 1 disabled" == hooks_of(uncovered)
    assert "none" == as_json["receiver"]


def test_a_receiver_that_answers_again_reads_recovered_and_is_not_marked() -> None:
    """The pair's last nudge found no receiver, none fails in a row now: a receiver answered
    since. It reads "recovered" with when it failed, and the pair is no one's to fix."""
    failed_at = NOW - timedelta(hours=2, seconds=3)
    gave_up = HistoryEntry(at=failed_at, endpoint_id="ep-1", queue="lane-l", event="charged",
                           nudge=1, todo_id="t1", outcome="gave-up")  # fmt: skip
    recovered = stale(Verdict.BACKING_OFF, last_failure_at=failed_at, last_outcomes=(gave_up,))

    _, row, *rest = render_table([recovered], NOW, PacingPolicy())
    [as_json] = json.loads(status_json([recovered], NOW, PacingPolicy()))["pairs"]

    assert "recovered (failed 2h ago)" == hooks_of(recovered)
    assert (" ", []) == (row[0], rest)
    assert ("recovered", "2026-12-03T01:29:57+00:00", False, None) == (
        as_json["receiver"],
        as_json["last_failure_at"],
        as_json["needs_person"],
        as_json["next_step"],
    )


def test_an_endpoint_the_host_names_shows_its_name_beside_its_id() -> None:
    """The table shows "name (id)"; JSON keeps the id and gives the name beside it."""
    named = stale(Verdict.DUE, endpoint_name="billing")
    unnamed = attrs.evolve(stale(Verdict.DUE), endpoint_id="ep-2")

    _, *rows = render_table([named, unnamed], NOW, PacingPolicy())
    pairs = json.loads(status_json([named, unnamed], NOW, PacingPolicy()))["pairs"]

    assert ["billing (ep-1)", "ep-2"] == [row[2:].split("  ")[0] for row in rows]
    assert [("ep-1", "billing"), ("ep-2", None)] == [
        (p["endpoint_id"], p["endpoint_name"]) for p in pairs
    ]


def test_each_problem_verdict_says_what_to_do_under_the_table_and_in_json() -> None:
    """One line a pair, after the table, the same text as JSON's next_step."""
    pairs = [
        attrs.evolve(stale(Verdict.NO_RECEIVER, has_receiver=False), queue="lane-m"),
        attrs.evolve(stale(Verdict.DUE), queue="lane-ok"),
    ]

    lines = render_table(pairs, NOW, PacingPolicy())
    steps = [p["next_step"] for p in json.loads(status_json(pairs, NOW, PacingPolicy()))["pairs"]]

    step = "no enabled hook covers lane-m: enable one, or this queue is drained by pull only"
    assert [step, None] == steps
    assert f"! ep-1/lane-m: {step}" in lines
    assert [] == [line for line in lines if "lane-ok:" in line]


def test_status_json_names_units_and_gives_utc_times() -> None:
    """Durations are seconds under *_s keys; instants are ISO 8601 in UTC, whatever their zone."""
    east = timezone(timedelta(hours=2))
    pair = stale(
        Verdict.CAPPED,
        oldest_age=timedelta(hours=3),
        effective_nudges=5,
        last_nudged_at=datetime(2026, 12, 3, 5, 29, tzinfo=east),
        next_due_at=None,
    )

    document = json.loads(status_json([pair], NOW.astimezone(east), PacingPolicy()))
    [shown] = document["pairs"]

    assert "2026-12-03T03:30:00+00:00" == document["at"]
    assert (10800.0, 5, "capped") == (
        shown["oldest_age_s"],
        shown["effective_nudges"],
        shown["verdict"],
    )
    assert ("2026-12-03T03:29:00+00:00", None) == (shown["last_nudged_at"], shown["next_due_at"])
    assert "oldest_age" not in shown


def test_an_empty_board_is_one_line_and_an_object_with_no_pairs() -> None:
    """With nothing pending the table says every queue is drained; JSON is still an object."""
    assert ["no pending work and no ledger rows: every queue is drained"] == render_table(
        [], NOW, PacingPolicy()
    )
    assert {"at": "2026-12-03T03:30:00+00:00", "fleet": None, "pairs": []} == json.loads(
        status_json([], NOW, PacingPolicy())
    )


def test_a_silence_shows_under_the_table_with_its_end_who_and_why_and_is_not_marked() -> None:
    """A silenced pair is an operator's choice: unmarked, due when its silence ends, and a line
    under the table says until when, who, why (escaped) and how to end it; JSON has each."""
    ends = NOW + timedelta(hours=2)
    cover = Silence(
        endpoint_id="ep-1",
        queue=None,
        starts_at=NOW - timedelta(minutes=5),
        ends_at=ends,
        by="ann",
        reason="deploy\x1b[2J",
    )
    pair = stale(Verdict.SILENCED, silenced_until=ends, silence=cover, next_due_at=ends)

    header, row, *rest = render_table([pair], NOW, PacingPolicy())
    [as_json] = json.loads(status_json([pair], NOW, PacingPolicy()))["pairs"]

    assert (" ", "silenced", "in 2h") == (
        row[0],
        row[header.index("VERDICT") :].strip(),
        row[header.index("NEXT DUE") :].split("  ")[0],
    )
    assert [
        "  ep-1/lane-l: silenced (every queue) until 2026-12-03 05:30 UTC (in 2h) by ann: "
        "deploy\\x1b[2J; `stall-nudge unsilence ep-1` ends it early"
    ] == rest
    assert ("silenced", False, None, "2026-12-03T05:30:00+00:00") == (
        as_json["verdict"],
        as_json["needs_person"],
        as_json["next_step"],
        as_json["silenced_until"],
    )
    assert {
        "queue": None,
        "starts_at": "2026-12-03T03:25:00+00:00",
        "until": "2026-12-03T05:30:00+00:00",
        "by": "ann",
        "reason": "deploy\x1b[2J",
    } == as_json["silence"]


def test_a_pairs_own_silence_names_its_queue_in_the_command_that_ends_it() -> None:
    """A silence on one queue is ended by naming it; the line says so."""
    cover = Silence(
        endpoint_id="ep-1",
        queue="lane-l",
        starts_at=NOW,
        ends_at=NOW + timedelta(minutes=30),
        by="bob",
        reason="",
    )
    pair = stale(Verdict.FRESH, silenced_until=cover.ends_at, silence=cover)

    *_, note = render_table([pair], NOW, PacingPolicy())

    assert (
        "  ep-1/lane-l: silenced until 2026-12-03 04:00 UTC (in 30m) by bob; "
        "`stall-nudge unsilence ep-1 lane-l` ends it early"
    ) == note


def test_status_json_lists_each_pairs_last_outcomes_newest_first() -> None:
    """Each charge's instant, number, outcome and why it reached nobody."""
    charged = [
        HistoryEntry(
            at=NOW - timedelta(minutes=m),
            endpoint_id="ep-1",
            queue="lane-l",
            event="charged",
            nudge=n,
            todo_id="t-1",
            outcome=outcome,
            detail=detail,
            settled_at=None if outcome is None else NOW - timedelta(minutes=m - 1),
        )
        for m, n, outcome, detail in [
            (1, 3, None, None),
            (6, 2, "gave-up", "HTTP 503"),
            (11, 1, "delivered", None),
        ]
    ]

    [as_json] = json.loads(
        status_json([stale(Verdict.DUE, last_outcomes=tuple(charged))], NOW, PacingPolicy())
    )["pairs"]

    assert [
        (3, None, None, None),
        (2, "gave-up", "HTTP 503", "2026-12-03T03:25:00+00:00"),
        (1, "delivered", None, "2026-12-03T03:20:00+00:00"),
    ] == [
        (o["nudge"], o["outcome"], o["detail"], o["settled_at"]) for o in as_json["last_outcomes"]
    ]
    assert "2026-12-03T03:24:00+00:00" == as_json["last_outcomes"][1]["at"]
