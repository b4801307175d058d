"""Named queries from a ``.sql`` file: ``-- name: x --``, a one-line description, the SQL."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

import attrs

__all__ = ["Query", "hook_queries", "parse_queries"]

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*) --$")


@attrs.frozen(kw_only=True)
class Query:
    name: str
    description: str
    sql: str


def parse_queries(text: str) -> Mapping[str, Query]:
    """Split a query file; raises ValueError on a missing description, empty or repeated name."""
    found: dict[str, Query] = {}
    name: str | None = None
    description = ""
    body: list[str] = []

    def flush() -> None:
        if name is None:
            return
        sql = "\n".join(body).strip().rstrip(";").strip()
        if not sql:
            raise ValueError(f"query {name!r} has no SQL")
        found[name] = Query(name=name, description=description, sql=sql)

    for line in text.splitlines():
        match = _HEADER.match(line.strip())
        if match:
            flush()
            name, description, body = match["name"], "", []
            if name in found:
                raise ValueError(f"query {name!r} is defined twice")
        elif name is not None and not description and not body:
            if not line.startswith("-- ") or not line[3:].strip():
                raise ValueError(f"query {name!r} needs a one-line '-- description' after its name")
            description = line[3:].strip()
        elif name is not None:
            body.append(line)
    flush()
    return MappingProxyType(found)


@functools.cache
def hook_queries() -> Mapping[str, Query]:
    """The hook directory's queries, read from the package once."""
    return parse_queries(resources.files(__package__).joinpath("hooks.sql").read_text("utf-8"))
