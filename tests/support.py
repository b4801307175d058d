"""Small test doubles shared by the suites: a settable clock and time helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 10, 15, 9, 0, tzinfo=UTC)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


class FakeClock:
    """A clock tests move by hand; the sweeper reads it through injection."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now

    def set(self, at: datetime) -> datetime:
        self.now = at
        return self.now
