"""Reading the host's ``todo_ready`` NOTIFY payload, tolerantly.

The payload is exactly ``"<endpoint_id>:<queue>"`` (SPEC-0038 keeps it so;
older builds parse it too). Any process may NOTIFY on the channel, so a
LISTEN loop must survive whatever arrives: ``parse_todo_ready`` returns
``None`` for anything it cannot read and never raises.

The endpoint id is everything before the FIRST ``:``; the queue is the rest,
colons included. Switchboard generates endpoint ids (no ``:``); queue names
are the user's. An endpoint id that itself contains ``:`` cannot round-trip
through this payload: it parses as another pair, which a LISTEN loop treats
like a wake for a pair with nothing to claim. The wake is lost, never the
work: the sweep surfaces the pair after the threshold.
"""

from __future__ import annotations

__all__ = ["TODO_READY_CHANNEL", "parse_todo_ready"]

TODO_READY_CHANNEL = "todo_ready"


def parse_todo_ready(payload: object) -> tuple[str, str] | None:
    """``(endpoint_id, queue)`` from a todo_ready payload, or None when it is malformed.

    Accepts ``str`` or UTF-8 ``bytes``; None for any other type, undecodable
    bytes, a payload without ``:``, an empty endpoint id or queue, or a NUL
    character (which no todos row can hold). Whitespace is kept as sent.
    """
    if isinstance(payload, bytes | bytearray | memoryview):
        try:
            payload = bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(payload, str) or "\x00" in payload:
        return None
    endpoint_id, sep, queue = payload.partition(":")
    if not sep or not endpoint_id or not queue:
        return None
    return endpoint_id, queue
