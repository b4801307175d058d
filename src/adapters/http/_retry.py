"""What one attempt's outcome means: pure functions of (outcome, attempt, policy, now).

The whole retry table lives here so it can be read against docs/architecture.md: 2xx
delivers; 5xx, 408, 429, connection errors and timeouts retry while
attempts remain; every other status (3xx included: redirects are never
followed) is final.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

from ._policy import DeliveryPolicy

__all__ = ["is_delivered", "is_retryable", "parse_retry_after", "retry_delay"]

_RETRY_STATUSES = frozenset({408, 429})


def is_delivered(status: int) -> bool:
    return 200 <= status < 300


def is_retryable(status: int | None) -> bool:
    """True for a retryable outcome; None stands for a connection error or timeout."""
    return status is None or status in _RETRY_STATUSES or 500 <= status < 600


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """Retry-After as a delay (seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        # A hostile or absurd value must not crash the worker: the cap applies anyway.
        try:
            return timedelta(seconds=int(value))
        except (OverflowError, ValueError):
            return timedelta.max
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(timedelta(0), when - now)


def retry_delay(
    *, attempts_made: int, policy: DeliveryPolicy, retry_after: timedelta | None
) -> timedelta | None:
    """The wait before the next attempt of a retryable outcome; None when none is left.

    Retry-After can lengthen the scheduled wait up to ``retry_after_cap``,
    never shorten it.
    """
    if attempts_made >= policy.attempts:
        return None
    scheduled = policy.retry_delays[attempts_made - 1]
    if retry_after is None:
        return scheduled
    return max(scheduled, min(retry_after, policy.retry_after_cap))
