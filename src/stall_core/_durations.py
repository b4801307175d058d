"""Durations as people type and read them: ``250ms``, ``15s``, ``2m``, ``1h30m``, ``2d``.

One parser and one formatter for every command line, report and label, so a
duration printed by one command can be typed back into another.
"""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["format_duration", "format_seconds", "parse_duration"]

#: Each unit and its length; the parser and the formatter read the same table.
_UNITS: dict[str, timedelta] = {
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[dhms])", re.ASCII)
_BARE_SECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def parse_duration(text: str) -> timedelta:
    """A non-negative duration: unit parts (``1h30m``, ``1.5h``, ``250ms``) or bare seconds.

    Raises ValueError naming what was typed, for anything else.
    """
    cleaned = text.strip()
    try:
        if _BARE_SECONDS.fullmatch(cleaned):
            return timedelta(seconds=float(cleaned))
        parts = _PART.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"expected a duration like 250ms, 15s, 2m, 1h30m or 2d, got {text!r}")
        return sum((float(number) * _UNITS[unit] for number, unit in parts), timedelta(0))
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def format_seconds(seconds: float) -> str:
    """A duration given in seconds (a setting, a timeout), written as ``format_duration``."""
    return format_duration(timedelta(seconds=seconds))


def format_duration(delta: timedelta) -> str:
    """``delta`` in its two largest units (``1h30m``, ``2d4h``), or ms below a second.

    What is finer than the last unit shown is dropped, never rounded up, so a
    printed age is never more than the real one. Below a minute the seconds
    keep their milliseconds (``1.5s``).
    """
    if delta < timedelta(0):
        return "-" + format_duration(-delta)
    millis = delta // _UNITS["ms"]
    if millis < 1000:
        return f"{millis}ms"
    if delta < _UNITS["m"]:
        return f"{millis // 1000}.{millis % 1000:03d}".rstrip("0").rstrip(".") + "s"
    shown: list[str] = []
    rest = delta
    for unit in ("d", "h", "m", "s"):
        count, rest = divmod(rest, _UNITS[unit])
        if count or shown:
            shown.append(f"{count}{unit}" if count else "")
        if len(shown) == 2:
            break
    return "".join(shown)
