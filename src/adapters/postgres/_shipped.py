"""Every statement the Postgres adapter ships, as written in its ``.sql`` files: one place to print.

``stall-nudge sql`` prints these. What is sent is the same less the comments
after each description (``sql.sendable``); the views and indexes migrate
makes name the host's schema, so ``migrate --print-sql`` prints those.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.postgres.sql import parse_queries, script

from ._manifest import migrations

__all__ = ["shipped_sql"]

#: The adapter's statement files, by the name ``stall-nudge sql`` gives each.
SOURCES = {
    "tick": "tick.sql",
    "ledger": "ledger.sql",
    "hooks": "hooks.sql",
    "migrate": "migrate.sql",
    "history": "history.sql",
}


def shipped_sql() -> Mapping[str, Mapping[str, str]]:
    """{source: {name: statement}}: every statement the adapter ships, as its file holds it."""
    found = {
        source: parse_queries(script("adapters.postgres", filename))
        for source, filename in SOURCES.items()
    }
    for migration in migrations():
        found[migration.label] = migration.steps
    return found
