"""The core's two number validators: every port and command that takes a count or a
number of seconds checks it with one of these, so the errors read alike."""

from __future__ import annotations

import math

import pytest

from stall_core import positive_int, positive_seconds


@pytest.mark.parametrize("value", [1, 7, 10**12])
def test_a_positive_integer_passes(value: int) -> None:
    assert value == positive_int("limit", value)


@pytest.mark.parametrize("value", [0, -3, True, 1.0, "2", None])
def test_anything_else_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ValueError, match=r"^limit must be an integer >= 1, got "):
        positive_int("limit", value)


@pytest.mark.parametrize("value", [0.001, 1, 30.0, 3600])
def test_a_positive_finite_number_of_seconds_passes(value: float) -> None:
    assert value == positive_seconds("timeout", value)


@pytest.mark.parametrize("value", [0, -1, -0.5, math.inf, math.nan, True, "5"])
def test_zero_negative_infinite_nan_or_not_a_number_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"^timeout must be a positive number of seconds, got "):
        positive_seconds("timeout", value)  # type: ignore[arg-type]
