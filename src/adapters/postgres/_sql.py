"""Named SQL: each ``.sql`` file here holds queries under ``-- name: NAME`` headers.

Files are parsed once, at first use, into read-only dicts; a query's first
comment line after its header is its description and stays in the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

__all__ = ["parse_queries", "queries", "script"]

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> Mapping[str, str]:
    """Split ``text`` into {name: query}; a repeated name or an empty query is an error."""
    parts = _HEADER.split(text)
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise ValueError(f"query {name!r} is defined twice")
        body = body.strip()
        if not any(line and not line.startswith("--") for line in body.splitlines()):
            raise ValueError(f"query {name!r} has no SQL")
        found[name] = body
    return MappingProxyType(found)


@functools.cache
def queries(filename: str) -> Mapping[str, str]:
    """The named queries of one packaged ``.sql`` file."""
    return parse_queries(script(filename))


@functools.cache
def script(filename: str) -> str:
    """One packaged ``.sql`` file, whole (migrations run as a single script)."""
    return resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
