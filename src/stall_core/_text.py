"""What a sender wrote (endpoint ids, queue names, todo ids, titles), as a person reads it (D22).

Theory of operation
-------------------
One rule for every surface a person reads: the ``status`` table, ``sweep``'s
lines, every log line (the core's own included) and the status page. JSON
keeps names whole; JSON's own escaping is enough there.

- **Escaped**: every character that does not show as itself. By Unicode
  category (``unicodedata``): controls (Cc: C0, DEL, C1), format characters
  (Cf: the bidi controls, zero-width space and joiners, the word joiner,
  the BOM, the soft hyphen, the tag characters), surrogates (Cs), private
  use (Co), unassigned code points (Cn), and every separator but the plain
  space (Zs, Zl, Zp: no-break and other look-alike spaces, line and
  paragraph separators). Also the code points Unicode calls default
  ignorable that it files under letters or marks (Hangul fillers, variation
  selectors, the combining grapheme joiner), the Braille blank, and the
  whole tag block U+E0000-U+E0FFF.
- **How**: as Python writes it, ``\\xNN`` below U+0100, ``\\uNNNN`` in the BMP,
  ``\\UNNNNNNNN`` above: plain ASCII, and each escape ends where its form
  says. A backslash stands as itself, so escaping is idempotent: a log
  formatter may escape a whole line that already holds an escaped name.
  (Two names that differ only by a typed ``\\u200b`` and a real one are told
  apart by ``--json``.)
- **Cut**: at most ``width`` code points of output, the marker ``...``
  included; an escape is kept whole or dropped, never split. Only the
  first ``width + 1`` characters are read, so a 1 MiB name costs what a
  short one does.

Standard library only: the core's own log lines use it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["CUT", "NAME_WIDTH", "TEXT_WIDTH", "printable", "printable_text"]

#: The most code points a name takes where a person reads it: a UUID and then some.
NAME_WIDTH = 64
#: The most an error text takes in a log line: it may quote names, but it is ours.
TEXT_WIDTH = 1024
#: What ends text that was cut.
CUT = "..."

#: Categories whose characters never show as themselves (the plain space excepted).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
#: Invisible code points outside those categories (inclusive ranges): Unicode's
#: default ignorables filed under letters or marks, the Braille blank, the tag block.
_INVISIBLE = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors
    (0x2800, 0x2800),  # Braille pattern blank
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xE0000, 0xE0FFF),  # tags and variation selectors supplement
)


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _piece(char: str) -> str:
    """One character as shown: itself, or its escape."""
    if char == " ":
        return char
    code = ord(char)
    if unicodedata.category(char) in _ESCAPED_CATEGORIES or any(
        low <= code <= high for low, high in _INVISIBLE
    ):
        return _escape(code)
    return char


def printable(text: str, width: int = NAME_WIDTH) -> str:
    """``text`` for a person: invisible and control characters escaped, cut to ``width``.

    At most ``width`` code points, ending in ``...`` when cut; the rule is in
    this module's docstring. Pure, and it reads at most ``width + 1``
    characters of ``text``.
    """
    if width < len(CUT):
        raise ValueError(f"width must be at least {len(CUT)}, got {width}")
    head = text[: width + 1]
    if head.isascii() and head.isprintable():  # U+0020-U+007E only: nothing to escape
        return text if len(text) <= width else head[: width - len(CUT)] + CUT
    pieces: list[str] = []
    used = kept = 0
    for char in head:
        piece = _piece(char)
        used += len(piece)
        if used > width:
            break
        pieces.append(piece)
        if used <= width - len(CUT):
            kept = len(pieces)
    else:
        if len(text) <= width:
            return "".join(pieces)
    return "".join(pieces[:kept]) + CUT


def printable_text(text: str) -> str:
    """An error text or a reason, ours but possibly quoting names: escaped, cut to TEXT_WIDTH."""
    return printable(text, width=TEXT_WIDTH)
