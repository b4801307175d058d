"""Text a sender controls (queue names, titles, ids) made safe for an operator's terminal."""

from __future__ import annotations

import re

__all__ = ["CUT", "clip", "printable"]

#: C0 and C1 controls, DEL, and the bidirectional overrides and isolates that reorder a
#: line on screen (a fake line, a cleared screen, text that reads other than it is).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: What ends a cell that was cut.
CUT = "..."


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


def clip(text: str, width: int) -> str:
    """``printable(text)`` in at most ``width`` characters, ending in ``...`` when cut.

    Only the first ``width`` characters are read, so a 1 MiB name costs what a
    short one does; an escape is kept whole or dropped, never split.
    """
    shown = printable(text[: width + 1])
    if len(shown) <= width:
        return shown
    kept, room = [], width - len(CUT)
    for char in text:
        piece = printable(char)
        room -= len(piece)
        if room < 0:
            break
        kept.append(piece)
    return "".join(kept) + CUT
