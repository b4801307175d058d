"""The retry table and DeliveryPolicy: pure, no network."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.http import DeliveryPolicy, is_delivered, is_retryable, parse_retry_after, retry_delay

NOW = datetime(2026, 10, 15, 12, 0, tzinfo=UTC)


def test_default_policy_is_the_contracts_numbers() -> None:
    """3 attempts (now, +5 s, +30 s), 10 s timeout, Retry-After up to 60 s, disable after 10."""
    policy = DeliveryPolicy()

    assert (3, (timedelta(seconds=5), timedelta(seconds=30))) == (
        policy.attempts,
        policy.retry_delays,
    )
    assert (timedelta(seconds=10), timedelta(seconds=60), 10) == (
        policy.timeout,
        policy.retry_after_cap,
        policy.disable_after,
    )


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (None, True),
        (500, True),
        (503, True),
        (599, True),
        (408, True),
        (429, True),
        (400, False),
        (401, False),
        (404, False),
        (410, False),
        (301, False),
        (302, False),
        (307, False),
        (304, False),
    ],
)
def test_retryable_statuses(status: int | None, retryable: bool) -> None:
    """Connection errors, timeouts, 5xx, 408 and 429 retry; other 4xx and 3xx are final."""
    assert retryable is is_retryable(status)


@pytest.mark.parametrize(
    ("status", "delivered"), [(200, True), (204, True), (299, True), (300, False)]
)
def test_only_2xx_delivers(status: int, delivered: bool) -> None:
    """A 2xx answer is a delivery; nothing else is."""
    assert delivered is is_delivered(status)


def test_schedule_then_give_up() -> None:
    """After attempt 1 wait 5 s, after attempt 2 wait 30 s, after attempt 3 stop."""
    policy = DeliveryPolicy()

    assert [timedelta(seconds=5), timedelta(seconds=30), None] == [
        retry_delay(attempts_made=n, policy=policy, retry_after=None) for n in (1, 2, 3)
    ]


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        (timedelta(seconds=2), timedelta(seconds=5)),
        (timedelta(seconds=45), timedelta(seconds=45)),
        (timedelta(seconds=3600), timedelta(seconds=60)),
    ],
)
def test_retry_after_lengthens_up_to_the_cap(retry_after: timedelta, expected: timedelta) -> None:
    """Retry-After can only lengthen the first retry's wait, and never past 60 s."""
    assert expected == retry_delay(
        attempts_made=1, policy=DeliveryPolicy(), retry_after=retry_after
    )


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", timedelta(seconds=120)),
        (" 7 ", timedelta(seconds=7)),
        ("Thu, 15 Oct 2026 12:00:30 GMT", timedelta(seconds=30)),
        ("Thu, 15 Oct 2026 11:00:00 GMT", timedelta(0)),
        ("soon", None),
        ("-5", None),
        (None, None),
        # Absurd values are clamped by retry_after_cap later, never a crash here.
        ("99999999999999", timedelta.max),
        ("9" * 5000, timedelta.max),
    ],
)
def test_retry_after_forms(header: str | None, expected: timedelta | None) -> None:
    """Retry-After is read as seconds or an HTTP date; anything else is ignored."""
    assert expected == parse_retry_after(header, NOW)


@pytest.mark.parametrize(
    "changes",
    [
        {"retry_delays": (timedelta(seconds=-1),)},
        {"timeout": timedelta(0)},
        {"disable_after": 0},
        {"max_response_bytes": True},
        {"retry_delays": [timedelta(seconds=1)]},
    ],
)
def test_policy_rejects_nonsense(changes: dict[str, object]) -> None:
    """A policy with a negative delay, zero timeout or bad count is refused at construction."""
    with pytest.raises((ValueError, TypeError)):
        DeliveryPolicy(**changes)  # type: ignore[arg-type]
