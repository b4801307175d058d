"""How the operator surfaces (``status``, ``sweep``, logs, the status page) write text and ages.

Names a sender chose go through ``stall_core.printable`` (escaped, cut to
64 code points); the texts here are ours but may quote them (an error, a
readiness reason), so they are escaped and cut too, wider
(``stall_core.printable_text``, and ``line`` here for a whole line). Every
duration is written by ``stall_core.format_duration`` (``format_seconds``
for one given in seconds); an age or a wait, in whole seconds (``age``, ``until``), so a
printed age reads ``9s ago`` beside ``1m9s ago``, never ``9.066s ago``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from stall_core import format_duration, printable

__all__ = ["LINE_WIDTH", "age", "line", "until"]

#: The most one log line's message takes, its fields included.
LINE_WIDTH = 4096

_SECOND = timedelta(seconds=1)


def line(value: str) -> str:
    """A whole log line or error line, escaped and cut to ``LINE_WIDTH``."""
    return printable(value, width=LINE_WIDTH)


def age(delta: timedelta | None) -> str:
    """An age or a wait in whole seconds (``9s``, ``1m9s``, ``0s``); ``-`` for none.

    What is finer than a second is dropped, as ``format_duration`` drops
    what is finer than its last unit: a printed age is never more than the
    real one.
    """
    if delta is None:
        return "-"
    whole = delta // _SECOND if delta >= timedelta(0) else -(-delta // _SECOND)
    return format_duration(whole * _SECOND) if whole else "0s"


def until(at: datetime | None, now: datetime) -> str:
    """When ``at`` comes, seen at ``now``: ``-`` for never, ``now`` once due, else ``in 2m59s``."""
    if at is None:
        return "-"
    if at <= now:
        return "now"
    return "in " + age(at - now)
