"""stall_core.printable: a sender's name as a person reads it, escaped and cut (D22)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stall_core import printable

#: Characters that must never reach a person raw, each with its escape.
HIDDEN = [
    ("\x00", "\\x00"),  # C0
    ("\x1b", "\\x1b"),
    ("\n", "\\x0a"),
    ("\x7f", "\\x7f"),  # DEL
    ("\x85", "\\x85"),  # C1
    ("\u00a0", "\\xa0"),  # no-break space: looks like a space
    ("\u00ad", "\\xad"),  # soft hyphen
    ("\u061c", "\\u061c"),  # Arabic letter mark
    ("\u200b", "\\u200b"),  # zero-width space
    ("\u200d", "\\u200d"),  # zero-width joiner
    ("\u200e", "\\u200e"),  # left-to-right mark
    ("\u2028", "\\u2028"),  # line separator
    ("\u202e", "\\u202e"),  # right-to-left override
    ("\u2060", "\\u2060"),  # word joiner
    ("\u2066", "\\u2066"),  # left-to-right isolate
    ("\u3000", "\\u3000"),  # ideographic space
    ("\u3164", "\\u3164"),  # Hangul filler (a letter that shows nothing)
    ("\ufe0f", "\\ufe0f"),  # variation selector 16
    ("\ufeff", "\\ufeff"),  # byte order mark
    ("\ue000", "\\ue000"),  # private use
    ("\u0378", "\\u0378"),  # unassigned
    ("\ud800", "\\ud800"),  # a lone surrogate
    ("\U000e0000", "\\U000e0000"),  # tag block, unassigned
    ("\U000e0001", "\\U000e0001"),  # language tag
    ("\U000e0041", "\\U000e0041"),  # tag latin capital A
    ("\U000e007f", "\\U000e007f"),  # cancel tag
    ("\U000e0100", "\\U000e0100"),  # variation selector 17
    ("\U000f0000", "\\U000f0000"),  # supplementary private use
]

#: Every category Unicode files invisible or control characters under.
ESCAPED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"}


@pytest.mark.parametrize(("char", "escape"), HIDDEN, ids=[e for _, e in HIDDEN])
def test_every_hidden_or_control_character_is_escaped(char: str, escape: str) -> None:
    """Controls, format, private-use, unassigned and look-alike space characters show as escapes."""
    assert f"lane{escape}l" == printable(f"lane{char}l")


def test_visible_text_and_the_plain_space_stand_as_they_are() -> None:
    """Letters of any script, emoji, punctuation and the space are shown unchanged."""
    name = 'ü🙂 日本 lane-l: a/b <c> \\ "d" é'

    assert name == printable(name)


def test_a_huge_name_is_cut_to_the_name_width_with_a_marker() -> None:
    """A 1 MiB name shows as 61 characters and the marker: 64 code points."""
    assert "q" * 61 + "..." == printable("q" * (1 << 20))


def test_a_name_of_exactly_the_width_is_whole() -> None:
    """64 code points fit; 65 are cut."""
    assert ("q" * 64, "q" * 61 + "...") == (printable("q" * 64), printable("q" * 65))


def test_an_escape_is_kept_whole_or_dropped_at_the_cut() -> None:
    """A cut never splits an escape: one that does not fit before the marker is left out."""
    assert "abcdef..." == printable("abcdef\u202eghij", width=9)
    assert "ab\\u202e..." == printable("ab\u202ecdefgh", width=11)


def test_a_hidden_character_past_the_width_does_not_change_what_is_shown() -> None:
    """Only the first width + 1 characters are read: whatever follows is not looked at."""
    head = "lane-" * 13

    assert printable(head + "x" * (1 << 20)) == printable(head + "\u202e" * 10)


def test_a_width_too_small_for_the_marker_is_refused() -> None:
    """A width under the marker's length is a programming mistake, raised at once."""
    with pytest.raises(ValueError, match="at least 3"):
        printable("lane", width=2)


@given(text=st.text(), width=st.integers(3, 80))
def test_what_is_shown_is_bounded_visible_and_escaped_again_unchanged(
    text: str, width: int
) -> None:
    """At most ``width`` code points, none of them hidden, and a second pass changes nothing."""
    shown = printable(text, width)

    assert len(shown) <= width
    assert set() == {c for c in shown if unicodedata.category(c) in ESCAPED_CATEGORIES} - {" "}
    assert shown == printable(shown, width)
    assert shown == printable(shown, width + 100)


@given(text=st.text(min_size=1), width=st.integers(3, 80))
def test_a_cut_shows_the_escape_of_a_prefix_and_the_marker(text: str, width: int) -> None:
    """What fits is the whole escaped text; else the escape of a prefix, then ``...``."""
    shown = printable(text, width)
    whole = printable(text, len(text) * 10 + 3)

    if len(whole) <= width:
        assert whole == shown
    else:
        assert any(printable(text[:i], 10 * width) + "..." == shown for i in range(width))
