"""Every statement the Postgres adapter sends, as a reviewer reads it: one place to print or diff.

Rules are expanded and comments kept; what is sent is the same less its
comments and indentation. ``expanded/`` in this package holds them, one file
per source (a test keeps it current), and ``stall-nudge sql`` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.postgres.sql import expanded

from ._ledger import readable_statements
from ._migrate import _steps, host_indexes, migrations

__all__ = ["shipped_sql"]


def shipped_sql() -> Mapping[str, Mapping[str, str]]:
    """{source: {name: statement}} for every source of statements the adapter ships.

    The trigger functions pin the host's schema in their search_path; here it
    is ``public``, as on the reference host.
    """
    schema: dict[str, str] = {}
    for migration in migrations():
        for name, sql in migration.steps.items():
            schema[f"{migration.version:04d}_{migration.name}.{name}"] = sql
    for index in host_indexes():
        schema[f"host_indexes.{index.name}"] = index.sql
    for filename in (
        "footprint_incremental.sql",
        "footprint_lean.sql",
        "earlier_builds.sql",
        "uninstall.sql",
    ):
        for name, sql in _steps(filename).items():
            schema[f"{filename.removesuffix('.sql')}.{name}"] = sql
    return {
        "ledger": readable_statements(),
        "hooks": expanded("adapters.postgres", "hooks.sql"),
        "migrate": expanded("adapters.postgres", "migrate.sql"),
        "schema": schema,
    }
