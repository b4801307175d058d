"""The one test clock: a settable instant that tests, the demo and the contract suite move."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["T0", "FakeClock"]

#: Where test time starts (the spec's date).
T0 = datetime(2026, 10, 15, 9, 0, tzinfo=UTC)


class FakeClock:
    """A ``stall_core.Clock`` moved by hand: a ledger's time authority in tests and the demo."""

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
