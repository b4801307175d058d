"""Time helpers the suites share; the clock itself is stall_testing's."""

from __future__ import annotations

import os
from datetime import timedelta

from stall_testing import T0, FakeClock

__all__ = ["T0", "FakeClock", "examples", "minutes"]


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def examples(count: int) -> int:
    """``count`` Hypothesis examples, or a tenth of them under the quick ``dev`` profile."""
    if os.environ.get("HYPOTHESIS_PROFILE") == "dev":
        return max(2, count // 10)
    return count
