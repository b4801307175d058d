"""Time helpers the suites share; the clock itself is stall_testing's."""

from __future__ import annotations

from datetime import timedelta

from stall_testing import T0, FakeClock

__all__ = ["T0", "FakeClock", "minutes"]


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)
