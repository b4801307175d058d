"""The todo.ready body (SPEC-0024 REQ-4 as docs/architecture.md reads it), as attrs values.

The same shape serves every reason; a consumer reads ``meta.todo_id`` and
claims, whatever ``reason`` says. cattrs turns the values into JSON-ready
dicts, so no body is ever assembled by hand.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Final

import attrs
import cattrs

from stall_core import aware

__all__ = [
    "CREATED",
    "REQUEUED",
    "STALLED",
    "ReadyMessage",
    "ReadyMeta",
    "ReadyTodo",
    "decode_message",
    "encode_message",
]

#: The reasons switchboard sends today; consumers treat any other as a plain wake.
CREATED: Final = "created"
REQUEUED: Final = "requeued"
STALLED: Final = "stalled"


def _aware(_: object, attribute: attrs.Attribute[datetime], value: datetime) -> None:
    aware(attribute.name, value)


@attrs.frozen(kw_only=True)
class ReadyMeta:
    endpoint_id: str
    queue: str
    todo_id: str
    reason: str
    sent_at: datetime = attrs.field(validator=_aware)


@attrs.frozen(kw_only=True)
class ReadyTodo:
    """The named todo; ``title`` is sender text, so only gate-passing todos get here."""

    id: str
    queue: str
    title: str | None
    created_at: datetime = attrs.field(validator=_aware)


@attrs.frozen(kw_only=True)
class ReadyMessage:
    """One todo.ready notification, the same for every hook it goes to."""

    meta: ReadyMeta
    todo: ReadyTodo
    type: str = "todo.ready"


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_unstructure_hook(datetime, lambda value: value.astimezone(UTC).isoformat())
    converter.register_structure_hook(
        datetime, lambda value, _: aware("timestamp", datetime.fromisoformat(value))
    )
    return converter


_CONVERTER = _converter()
# The wire order puts "type" first, as the contract lists it.
_KEYS = ("type", "meta", "todo")


def encode_message(message: ReadyMessage) -> bytes:
    """The exact body bytes that are signed and sent."""
    fields = _CONVERTER.unstructure(message)
    return json.dumps(
        {key: fields[key] for key in _KEYS}, separators=(",", ":"), ensure_ascii=False
    ).encode()


def decode_message(body: bytes | str) -> ReadyMessage:
    """Parse a body back into values (tests and consumers); raises on a malformed one."""
    return _CONVERTER.structure(json.loads(body), ReadyMessage)
