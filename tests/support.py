"""Time helpers and the tick log's duration pattern, shared by the suites."""

from __future__ import annotations

import os
from datetime import timedelta

from stall_testing import T0, FakeClock

__all__ = ["JUDGED_IN", "T0", "FakeClock", "examples", "minutes"]

#: How a tick's debug log line ends: the pairs it judged, then how long the tick took.
JUDGED_IN = r" pair\(s\) in (\d+ms|\d+(\.\d+)?s)"


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def examples(count: int) -> int:
    """``count`` Hypothesis examples, or a tenth of them under the quick ``dev`` profile."""
    if os.environ.get("HYPOTHESIS_PROFILE") == "dev":
        return max(2, count // 10)
    return count
