"""The todo.ready body: exactly docs/architecture.md's shape, built from values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from adapters.http import ReadyMessage, ReadyMeta, ReadyTodo, decode_message, encode_message

SENT = datetime(2026, 10, 15, 12, 5, 0, tzinfo=UTC)
CREATED = datetime(2026, 10, 15, 13, 0, 0, tzinfo=timezone(timedelta(hours=1)))


def _message(title: str | None = "Ship it") -> ReadyMessage:
    return ReadyMessage(
        meta=ReadyMeta(
            endpoint_id="e1", queue="lane-l", todo_id="t1", reason="stalled", sent_at=SENT
        ),
        todo=ReadyTodo(id="t1", queue="lane-l", title=title, created_at=CREATED),
    )


def test_body_has_exactly_the_contract_shape() -> None:
    """Type, meta and todo carry exactly the contract's fields, times in UTC ISO 8601."""
    assert {
        "type": "todo.ready",
        "meta": {
            "endpoint_id": "e1",
            "queue": "lane-l",
            "todo_id": "t1",
            "reason": "stalled",
            "sent_at": "2026-10-15T12:05:00+00:00",
        },
        "todo": {
            "id": "t1",
            "queue": "lane-l",
            "title": "Ship it",
            "created_at": "2026-10-15T12:00:00+00:00",
        },
    } == json.loads(encode_message(_message()))


def test_type_comes_first_on_the_wire() -> None:
    """The body lists type, meta, todo in the contract's order."""
    assert ["type", "meta", "todo"] == list(json.loads(encode_message(_message())))


def test_missing_title_is_null_and_text_is_kept_verbatim() -> None:
    """A todo without a title sends null; non-ASCII titles are sent as UTF-8, not escaped."""
    assert None is json.loads(encode_message(_message(title=None)))["todo"]["title"]
    assert "Grüße ✓".encode() in encode_message(_message(title="Grüße ✓"))


def test_body_round_trips_through_values() -> None:
    """decode_message reads back what encode_message wrote."""
    message = _message()

    assert message == decode_message(encode_message(message))


def test_naive_times_are_refused() -> None:
    """A naive sent_at cannot be put on the wire."""
    with pytest.raises(ValueError, match="sent_at"):
        ReadyMeta(
            endpoint_id="e1",
            queue="q",
            todo_id="t",
            reason="created",
            sent_at=datetime(2026, 1, 1),  # naive on purpose
        )
