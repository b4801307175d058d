"""The one JSON convention of every command (docs/operations.md, "JSON output").

- Keys are snake_case; a duration's key names its unit (``oldest_age_s``,
  ``duration_s``) and its value is a number of seconds.
- Times are ISO 8601 in UTC with an explicit offset (``2026-12-03T03:16:31.5+00:00``).
- Each record is one JSON object on one line; an empty answer is still an
  object (``{"pairs": []}``).
- Output is ASCII: every other character, control characters included, is a
  ``\\u`` escape, so a sender's queue name or title cannot drive the
  terminal, and a JSON parser gets the exact text back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["dumps", "seconds", "utc"]


def utc(at: datetime | None) -> str | None:
    """An instant as ISO 8601 in UTC, or None."""
    return None if at is None else at.astimezone(UTC).isoformat()


def seconds(delta: timedelta | None) -> float | None:
    """A duration as seconds, or None."""
    return None if delta is None else delta.total_seconds()


def dumps(record: dict[str, Any]) -> str:
    """One line of ASCII JSON; DEL is escaped too (JSON lets it through raw)."""
    return json.dumps(record, ensure_ascii=True, sort_keys=True).replace("\x7f", "\\u007f")
