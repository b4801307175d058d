"""Text a sender controls (queue names, titles, ids) made safe for an operator's terminal."""

from __future__ import annotations

import re

__all__ = ["printable"]

#: C0 and C1 controls, DEL, and the bidirectional overrides and isolates that reorder a
#: line on screen (a fake line, a cleared screen, text that reads other than it is).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)
