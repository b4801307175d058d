"""The one duration parser and formatter every command and label uses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stall_core import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15", timedelta(seconds=15)),
        ("2.5", timedelta(seconds=2.5)),
        ("250ms", timedelta(milliseconds=250)),
        ("15s", timedelta(seconds=15)),
        ("2m", timedelta(minutes=2)),
        ("1.5h", timedelta(minutes=90)),
        ("1h30m", timedelta(minutes=90)),
        ("2d", timedelta(days=2)),
        (" 5m ", timedelta(minutes=5)),
        ("0s", timedelta(0)),
    ],
)
def test_parse_duration_reads_units_and_bare_seconds(text: str, expected: timedelta) -> None:
    """Every unit, combinations of them and a bare number of seconds parse."""
    assert expected == parse_duration(text)


@pytest.mark.parametrize("text", ["", "m", "5x", "-5s", "5 m", "1h 30m", "s5", "1e3", "nan", "٣s"])
def test_parse_duration_refuses_what_is_not_a_duration(text: str) -> None:
    """Anything else is a ValueError that quotes what was typed."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_parse_duration_refuses_an_overflow_clearly() -> None:
    """A duration past timedelta's range is a ValueError, not an OverflowError."""
    with pytest.raises(ValueError, match="too long"):
        parse_duration("99999999999d")


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(0), "0ms"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(hours=1, seconds=5), "1h"),
        (timedelta(hours=6), "6h"),
        (timedelta(days=2, hours=4, minutes=3), "2d4h"),
        (timedelta(minutes=-5), "-5m"),
    ],
)
def test_format_duration_shows_the_two_largest_units(delta: timedelta, expected: str) -> None:
    """The two largest units, milliseconds below a second, a sign when negative."""
    assert expected == format_duration(delta)


@given(st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=10_000)))
def test_a_formatted_duration_parses_back_within_its_shown_precision(delta: timedelta) -> None:
    """What one command prints, another reads back, to within the last unit shown."""
    shown = format_duration(delta)
    back = parse_duration(shown)
    assert back <= delta
    assert back == parse_duration(format_duration(back))
