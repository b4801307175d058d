"""Replay: the history file format, its errors, and the consumer model on the engine."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from stall_core import PacingPolicy
from stall_sim import SimPolicy
from stall_sim.history import HistoryError, parse_csv, parse_jsonl, parse_nudges
from stall_sim.replay import compare_nudges, prepare, replay

EXAMPLE = Path(__file__).parents[2] / "examples" / "replay-week.jsonl"
T = datetime(2026, 1, 1, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T + timedelta(minutes=minutes)).isoformat()


def lines(*records: dict[str, object]) -> list[str]:
    return [json.dumps(r) for r in records]


WINDOW = {"record": "window", "start": at(0), "end": at(120), "nudges": True}


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ({"id": "a", "endpoint_id": "e", "queue": "q"}, "line 2: field 'created_at': missing"),
        (
            {"id": "a", "endpoint_id": "e", "queue": "q", "created_at": "2026-01-01T00:00:00"},
            "line 2: field 'created_at': expected a time zone",
        ),
        (
            {"id": "a", "endpoint_id": "e", "queue": "q", "created_at": "yesterday"},
            "line 2: field 'created_at': expected an ISO 8601 instant, got 'yesterday'",
        ),
        ({"id": "a", "endpoint_id": "e", "queue": 3.5, "created_at": at(1)}, "field 'queue'"),
        (
            {"id": "a", "endpoint_id": "e", "queue": "q", "created_at": at(1), "verified": "yes"},
            "line 2: field 'verified': expected true or false",
        ),
        ({"record": "ticket", "id": "a"}, "line 2: field 'record': expected one of todo"),
        (
            {
                "record": "nudge",
                "endpoint_id": "e",
                "queue": "q",
                "nudge": 0,
                "todo_id": "a",
                "charged_at": at(3),
            },
            "line 2: field 'nudge': expected a nudge number >= 1",
        ),
        (
            {"record": "hook", "id": "h", "endpoint_id": "e", "queues": "q"},
            "line 2: field 'queues': expected a list",
        ),
        (
            {
                "record": "nudge",
                "endpoint_id": "e",
                "queue": "q",
                "nudge": 1,
                "todo_id": "a",
                "charged_at": at(3),
                "outcome": "lost",
            },
            "line 2: field 'outcome': expected one of delivered, refused, gave-up, hook-disabled",
        ),
    ],
)
def test_a_bad_record_is_an_error_naming_its_line_and_field(
    record: dict[str, object], error: str
) -> None:
    """Each mistake names the source, the line and the field."""
    with pytest.raises(HistoryError) as raised:
        parse_jsonl(lines(WINDOW, record), source="h.jsonl")

    assert str(raised.value).startswith("h.jsonl line 2"), str(raised.value)
    assert error in str(raised.value)


def test_a_file_that_is_not_json_lines_or_twice_one_todo_is_refused() -> None:
    """Not JSON, not an object, a todo twice, no todo at all: each one line."""
    todo = {"id": "a", "endpoint_id": "e", "queue": "q", "created_at": at(1)}
    cases = {
        "h line 1: not JSON": ["{nope"],
        "h line 1: expected a JSON object": ["[1]"],
        "h line 2: field 'id': todo 'a' appears twice": lines(todo, todo),
        "h: no todo records": lines(WINDOW),
    }
    for error, text in cases.items():
        with pytest.raises(HistoryError, match=error):
            parse_jsonl(text, source="h")


def test_csv_and_json_lines_read_the_same_history() -> None:
    """A CSV with a record column reads as the JSON lines with the same fields."""
    csv_text = [
        "record,id,endpoint_id,queue,created_at,claimed_at,state,verified,queues,enabled,start,end",
        f"window,,,,,,,,,,{at(0)},{at(60)}",
        f"todo,a,e,q,{at(1)},{at(2)},done,true,,,,",
        f"todo,b,e,q,{at(3)},,,false,,,,",
        'hook,h,e,,,,,,"[""q""]",false,,',
        "endpoint,e,,,,,paused,,,,,",
    ]
    jsonl = lines(
        {"record": "window", "start": at(0), "end": at(60)},
        {
            "id": "a",
            "endpoint_id": "e",
            "queue": "q",
            "created_at": at(1),
            "claimed_at": at(2),
            "state": "done",
        },
        {"id": "b", "endpoint_id": "e", "queue": "q", "created_at": at(3), "verified": False},
        {"record": "hook", "id": "h", "endpoint_id": "e", "queues": ["q"], "enabled": False},
        {"record": "endpoint", "id": "e", "state": "paused"},
    )

    assert parse_jsonl(jsonl, source="j") == parse_csv(csv_text, source="c")


def test_a_csv_cell_that_is_not_a_boolean_names_its_line() -> None:
    """CSV booleans are true or false."""
    with pytest.raises(HistoryError, match="c line 2: field 'verified'"):
        parse_csv(["id,endpoint_id,queue,created_at,verified", f"a,e,q,{at(1)},maybe"], source="c")


def test_a_sweep_json_log_is_read_as_the_nudges_it_sent() -> None:
    """A ``sweep --json`` tick record's charged nudges are nudge records; idle ticks add none."""
    log = lines(
        {"tick": 1, "outcome": "ok", "charged": []},
        {
            "tick": 2,
            "outcome": "ok",
            "charged": [
                {
                    "endpoint_id": "e",
                    "queue": "q",
                    "nudge": 1,
                    "todo_id": "a",
                    "todo_created_at": at(0),
                    "charged_at": at(3),
                }
            ],
        },
    )

    [nudge] = parse_nudges(log, source="sweep.log")

    assert ("e", "q", "a", 1, T + timedelta(minutes=3)) == (
        nudge.endpoint_id,
        nudge.queue,
        nudge.todo_id,
        nudge.number,
        nudge.charged_at,
    )


def example() -> list[str]:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()


def test_the_example_is_small_and_replays_its_own_nudges() -> None:
    """The shipped example stays small, and the spec's policy sends exactly its recorded nudges."""
    prepared = prepare(parse_jsonl(example(), source="example"))
    result = replay(prepared, SimPolicy.default(), chance=random.Random(1), record=True)

    match = compare_nudges(prepared, result)

    assert EXAMPLE.stat().st_size < 300_000
    assert match is not None
    assert (match.recorded, 0) == (match.reproduced, match.unrecorded)
    assert match.recorded > 50


@pytest.mark.parametrize(
    "policy",
    [
        SimPolicy.default(),
        SimPolicy.fixed(timedelta(minutes=1)),
        SimPolicy(name="slow", pacing=PacingPolicy(threshold=timedelta(minutes=10), tick_limit=1)),
    ],
    ids=lambda p: p.name,
)
def test_replays_are_held_to_plan_tick_on_every_tick(policy: SimPolicy) -> None:
    """Any policy over the example: every tick charges and clears what plan_tick does."""
    prepared = prepare(parse_jsonl(example(), source="example"))

    replay(prepared, policy, chance=random.Random(1), check=True)


def test_claims_after_nudges_follow_the_policys_nudges() -> None:
    """Without nudges they never come; with faster ones they come sooner; pulls stay put."""
    prepared = prepare(parse_jsonl(example(), source="example"))
    by_creation, by_nudge, _ = prepared.claims_by_wake

    runs = {
        p.name: replay(prepared, p, chance=random.Random(1))
        for p in (SimPolicy.default(), SimPolicy.edge_only(), SimPolicy.fixed(timedelta(minutes=1)))
    }

    assert by_nudge == runs["default"].claims - runs["edge-only"].claims
    assert by_creation == runs["edge-only"].claims
    assert runs["fixed-1m"].wait.p99 is not None
    assert runs["default"].wait.p99 is not None
    assert runs["fixed-1m"].wait.p99 < runs["default"].wait.p99


def test_what_a_replay_cannot_know_is_said() -> None:
    """Todos pending at the window's start, unstamped departures and a missing record are noted."""
    history = parse_jsonl(
        lines(
            {"record": "window", "start": at(0), "end": at(60)},
            {"id": "old", "endpoint_id": "e", "queue": "q", "created_at": at(-600)},
            {"id": "gone", "endpoint_id": "e", "queue": "q", "created_at": at(5), "state": "done"},
            {"id": "n", "endpoint_id": "e", "queue": "q", "created_at": at(9)},
        ),
        source="h",
    )

    prepared = prepare(history)
    result = replay(prepared, SimPolicy.default(), chance=random.Random(1), record=True, check=True)

    notes = "\n".join(prepared.notes)
    assert "1 todo(s) pending when the window opened" in notes
    assert "1 todo(s) left pending with no claim stamp" in notes
    assert "no nudge records" in notes
    assert ("old", 1, T + timedelta(seconds=0)) == (
        result.nudge_log[0].todo.id,
        result.nudge_log[0].number,
        result.nudge_log[0].charged_at,
    )


@pytest.mark.parametrize(
    ("outcome", "claims_by_wake"),
    [(None, (0, 1, 0)), ("delivered", (0, 1, 0)), ("gave-up", (0, 0, 1)), ("refused", (0, 0, 1))],
)
def test_only_a_nudge_that_reached_a_receiver_is_answered(
    outcome: str | None, claims_by_wake: tuple[int, int, int]
) -> None:
    """A claim 30 s after a recorded nudge followed it, unless the nudge reached nobody."""
    nudge: dict[str, object] = {
        "record": "nudge",
        "endpoint_id": "e",
        "queue": "q",
        "nudge": 1,
        "todo_id": "a",
        "charged_at": at(20),
    }
    if outcome is not None:
        nudge["outcome"] = outcome
    todo = {"id": "a", "endpoint_id": "e", "queue": "q", "created_at": at(0)}
    history = parse_jsonl(lines(WINDOW, {**todo, "claimed_at": at(20.5)}, nudge), source="h")

    prepared = prepare(history)

    assert claims_by_wake == prepared.claims_by_wake
    assert prepared.recorded is not None
    assert [outcome] == [n.outcome for n in prepared.recorded]  # still compared with the replay
    unreached = "1 recorded nudge(s) reached no receiver"
    assert (claims_by_wake[2] == 1) == any(unreached in note for note in prepared.notes)
