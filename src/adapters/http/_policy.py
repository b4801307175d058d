"""How hard one delivery tries: every number of the retry rules (docs/architecture.md).

Theory of operation
-------------------
A delivery is one message to one hook. Attempt 1 goes out when a worker
takes it; after a retryable outcome (connection error, timeout, 5xx, 408,
429) attempt N + 1 waits ``retry_delays[N - 1]``, or longer when the
response's Retry-After asks for it, never longer than ``retry_after_cap``
for that reason. Any other outcome is final. A delivery whose attempts all
fail counts one failure against its hook; ``disable_after`` consecutive
failures disable the hook, and a success resets the count.

The defaults are the contract's numbers; tests shrink them to milliseconds.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from stall_core import positive_int

__all__ = ["DeliveryPolicy"]


def _not_negative(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, got {type(value).__name__}")
    if value < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {value}")


@attrs.frozen(kw_only=True)
class DeliveryPolicy:
    """Retry schedule, per-attempt timeout, Retry-After cap, disable threshold, read bound."""

    retry_delays: tuple[timedelta, ...] = (timedelta(seconds=5), timedelta(seconds=30))
    timeout: timedelta = timedelta(seconds=10)
    retry_after_cap: timedelta = timedelta(seconds=60)
    disable_after: int = 10
    #: Bytes of a response body read before the connection is let go.
    max_response_bytes: int = 64 * 1024

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.retry_delays, tuple):
            raise TypeError("retry_delays must be a tuple of timedeltas")
        for i, delay in enumerate(self.retry_delays):
            _not_negative(f"retry_delays[{i}]", delay)
        _not_negative("retry_after_cap", self.retry_after_cap)
        _not_negative("timeout", self.timeout)
        if self.timeout == timedelta(0):
            raise ValueError("timeout must be positive")
        for name in ("disable_after", "max_response_bytes"):
            positive_int(name, getattr(self, name))

    @property
    def attempts(self) -> int:
        """Attempts one delivery may make: the first plus one per retry delay."""
        return 1 + len(self.retry_delays)
