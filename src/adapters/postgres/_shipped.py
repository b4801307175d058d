"""Every statement the Postgres adapter sends, as a reviewer reads it: one place to print or diff.

Rules are expanded and comments kept; what is sent is the same less its
comments and indentation. ``expanded/`` in this package holds them, one file
per source (a test keeps it current), and ``stall-nudge sql`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.postgres.sql import expanded

from ._ledger import readable_statements
from ._manifest import host_indexes, migrations

__all__ = ["shipped_sql"]


def shipped_sql() -> Mapping[str, Mapping[str, str]]:
    """{source: {name: statement}} for every source of statements the adapter ships.

    Host relations are written ``@name``, as in the files: the ledger names
    them with the host's schema when it sends them.
    """
    schema: dict[str, str] = {}
    for migration in migrations():
        for name, sql in migration.steps.items():
            schema[f"{migration.version:04d}_{migration.name}.{name}"] = sql
    for index in host_indexes():
        schema[f"host_indexes.{index.name}"] = index.sql
    return {
        "ledger": readable_statements(),
        "hooks": expanded("adapters.postgres", "hooks.sql"),
        "migrate": expanded("adapters.postgres", "migrate.sql"),
        "schema": schema,
    }
