"""Named SQL: each ``.sql`` file holds plain PostgreSQL statements under ``-- name: NAME`` headers.

A statement's first comment line after its header is its description; the
rest of its comments explain it to a reader. What is sent is the same text
less those other comments and less indentation, so a statement stays short
enough for asyncpg to keep it prepared. ``stall-nudge sql`` prints the files
as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

__all__ = [
    "parse_queries",
    "queries",
    "quote_ident",
    "script",
    "sendable",
]

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier, whatever it holds."""
    return '"' + name.replace('"', '""') + '"'


def parse_queries(text: str) -> Mapping[str, str]:
    """Split ``text`` into {name: statement}; refuses a repeated name or a statement with no SQL."""
    pieces = _HEADER.split(text)
    found: dict[str, str] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in found:
            raise ValueError(f"statement {name!r} is defined twice")
        body = body.strip()
        if not any(line and not line.startswith("--") for line in body.splitlines()):
            raise ValueError(f"statement {name!r} has no SQL")
        found[name] = body
    return MappingProxyType(found)


def sendable(sql: str) -> str:
    """``sql`` as sent: its description line, then its code lines unindented, comments dropped."""
    first, _, rest = sql.partition("\n")
    kept = (line.strip() for line in rest.splitlines())
    return "\n".join([first, *(line for line in kept if line and not line.startswith("--"))])


@functools.cache
def queries(package: str, filename: str) -> Mapping[str, str]:
    """The named statements of one ``.sql`` file in ``package``, as sent (read once)."""
    parsed = parse_queries(script(package, filename))
    return MappingProxyType({name: sendable(sql) for name, sql in parsed.items()})


@functools.cache
def script(package: str, filename: str) -> str:
    """One ``.sql`` file shipped in ``package``, whole."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")
