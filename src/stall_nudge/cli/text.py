"""Whole lines for an operator's terminal: a log message, an error (names are cut narrower).

The rule is ``stall_core.printable``'s (escaped, then cut); what the
library's surfaces share lives in ``stall_nudge._text``. Imported when a
line is written, so building the parser loads neither.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """``text`` with every control and invisible character escaped, cut to one bounded line."""
    from stall_nudge._text import line

    return line(text)
