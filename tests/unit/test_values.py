"""The core's value checks: the two number validators every port and command uses (so the
errors read alike), and the kinds of tick an outcome may report."""

from __future__ import annotations

import math

import pytest

from stall_core import TICK_KINDS, ChargeOutcome, positive_int, positive_seconds
from tests.support import T0


@pytest.mark.parametrize("value", [1, 7, 10**12])
def test_a_positive_integer_passes(value: int) -> None:
    """An integer of 1 or more comes back as it is."""
    assert value == positive_int("limit", value)


@pytest.mark.parametrize("value", [0, -3, True, 1.0, "2", None])
def test_anything_else_is_refused_naming_the_field(value: object) -> None:
    """Zero, negatives, bools and non-integers are refused, naming the field."""
    with pytest.raises(ValueError, match=r"^limit must be an integer >= 1, got "):
        positive_int("limit", value)


@pytest.mark.parametrize("value", [0.001, 1, 30.0, 3600])
def test_a_positive_finite_number_of_seconds_passes(value: float) -> None:
    """A finite number of seconds above zero comes back as it is."""
    assert value == positive_seconds("timeout", value)


@pytest.mark.parametrize("value", [0, -1, -0.5, math.inf, math.nan, True, "5"])
def test_zero_negative_infinite_nan_or_not_a_number_is_refused(value: object) -> None:
    """Zero, negatives, infinity, NaN, bools and strings are refused, naming the field."""
    with pytest.raises(ValueError, match=r"^timeout must be a positive number of seconds, got "):
        positive_seconds("timeout", value)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [*TICK_KINDS, None])
def test_an_outcome_reports_a_delta_a_full_pass_or_no_pass(kind: str | None) -> None:
    """ChargeOutcome takes "delta", "full" or None (a skipped tick) as its kind."""
    assert kind == ChargeOutcome(now=T0, kind=kind).kind


@pytest.mark.parametrize("kind", ["lean", "FULL", ""])
def test_any_other_kind_of_tick_is_refused(kind: str) -> None:
    """Any other kind of tick is refused, naming the kinds there are."""
    with pytest.raises(ValueError, match=r"^kind must be one of \('delta', 'full'\) or None"):
        ChargeOutcome(now=T0, kind=kind)
