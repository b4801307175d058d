"""PacingPolicy: the spec's numbers as defaults, validation, and delay_before."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from stall_core import PacingPolicy
from tests.support import minutes


def test_defaults_are_the_spec_numbers() -> None:
    """The default policy holds SPEC-0038's threshold, schedule, cap and tick limit."""
    policy = PacingPolicy()

    assert minutes(2) == policy.threshold
    assert (minutes(5), minutes(20), timedelta(hours=1), timedelta(hours=6)) == policy.backoff
    assert 5 == policy.cap
    assert 4 == policy.tick_limit


def test_a_policy_is_a_frozen_keyword_only_value() -> None:
    """Changes go through attrs.evolve; positional numbers are refused; equal numbers, equal."""
    policy = PacingPolicy()

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.cap = 7  # type: ignore[misc]
    with pytest.raises(TypeError):
        PacingPolicy(minutes(2))  # type: ignore[call-arg]

    assert (7, 5) == (attrs.evolve(policy, cap=7).cap, policy.cap)
    assert PacingPolicy() == PacingPolicy(threshold=minutes(2))
    assert hash(PacingPolicy()) == hash(PacingPolicy(cap=5))


def test_other_valid_policies_are_accepted() -> None:
    """A simulation may use a one-step schedule, equal steps, and cap/limit of one."""
    policy = PacingPolicy(
        threshold=timedelta(seconds=1), backoff=(minutes(1), minutes(1)), cap=1, tick_limit=1
    )

    assert (minutes(1), minutes(1)) == policy.backoff


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"threshold": timedelta(0)}, ValueError, "threshold"),
        ({"threshold": -minutes(1)}, ValueError, "threshold"),
        ({"threshold": 120}, TypeError, "threshold"),
        ({"threshold": None}, TypeError, "threshold"),
        ({"backoff": ()}, ValueError, "backoff"),
        ({"backoff": [minutes(5)]}, ValueError, "backoff"),
        ({"backoff": (minutes(5), timedelta(0))}, ValueError, "backoff[1]"),
        ({"backoff": (-minutes(5),)}, ValueError, "backoff[0]"),
        ({"backoff": (minutes(5), 300)}, TypeError, "backoff[1]"),
        ({"backoff": (minutes(20), minutes(5))}, ValueError, "backoff"),
        ({"cap": 0}, ValueError, "cap"),
        ({"cap": -1}, ValueError, "cap"),
        ({"cap": True}, ValueError, "cap"),
        ({"cap": 5.0}, ValueError, "cap"),
        ({"cap": "5"}, ValueError, "cap"),
        ({"tick_limit": 0}, ValueError, "tick_limit"),
        ({"tick_limit": False}, ValueError, "tick_limit"),
        ({"tick_limit": True}, ValueError, "tick_limit"),
        ({"tick_limit": 4.5}, ValueError, "tick_limit"),
    ],
)
def test_invalid_values_raise_naming_the_field(
    kwargs: dict[str, Any], error: type[Exception], field: str
) -> None:
    """Every invalid number raises ValueError or TypeError whose message names its field."""
    with pytest.raises(error) as info:
        PacingPolicy(**kwargs)

    assert field in str(info.value)


def test_shrinking_schedule_message_names_both_steps() -> None:
    """A shrinking schedule names the offending step and the one before it."""
    with pytest.raises(ValueError, match="shrink") as info:
        PacingPolicy(backoff=(minutes(5), minutes(20), minutes(10)))

    assert "backoff[2]" in str(info.value)
    assert "backoff[1]" in str(info.value)


def test_delay_before_follows_the_schedule() -> None:
    """Nudge N (2..5) waits backoff[N - 2] after nudge N - 1; a refunded nudge 1, backoff[0]."""
    policy = PacingPolicy()

    assert [minutes(5), minutes(5), minutes(20), timedelta(hours=1), timedelta(hours=6)] == [
        policy.delay_before(n) for n in range(1, 6)
    ]


def test_delay_before_repeats_the_last_step() -> None:
    """Past the end of the schedule the last step repeats."""
    policy = PacingPolicy(backoff=(minutes(1), minutes(3)), cap=10)

    assert [minutes(1), minutes(3), minutes(3), minutes(3)] == [
        policy.delay_before(n) for n in (2, 3, 4, 9)
    ]


@pytest.mark.parametrize("nudge", [0, -3, True])
def test_delay_before_nudge_below_one_raises(nudge: int) -> None:
    """There is no nudge 0: asking for its delay is an error naming the value."""
    with pytest.raises(ValueError, match=f"got {nudge}"):
        PacingPolicy().delay_before(nudge)
