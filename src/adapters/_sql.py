"""Named SQL for every adapter: ``.sql`` files hold queries under ``-- name: NAME`` headers.

Files ship inside their adapter's package and are parsed once, at first use,
into read-only dicts; a query's first comment line after its header is its
description and stays in the text.
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
def queries(package: str, filename: str) -> Mapping[str, str]:
    """The named queries of one ``.sql`` file shipped in ``package``."""
    return parse_queries(script(package, filename))


@functools.cache
def script(package: str, filename: str) -> str:
    """One ``.sql`` file shipped in ``package``, whole (migrations run as a single script)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")
