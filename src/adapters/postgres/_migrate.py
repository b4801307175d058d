"""Applying our migration (and, for demos and tests, the reference host schema)."""

from __future__ import annotations

import asyncpg
import attrs

from adapters._sql import queries, script

__all__ = [
    "CLAIMS_TABLE",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "MigrationReport",
    "MissingHostTables",
    "migrate",
    "missing_tables",
]

LEDGER_TABLE = "queue_stall_nudges"
#: The progress log: claims not yet absorbed by a charge (filled by a trigger on todos).
CLAIMS_TABLE = "stall_nudge_claims"
#: What a tick reads besides the ledger and the claims: changes, held-back pairs, full passes.
TICK_TABLES = ("stall_nudge_changes", "stall_nudge_held", "stall_nudge_sweeps")
HOST_TABLES = ("endpoints", "deliveries", "todos", "notify_hooks")
_OWN_INDEXES = (
    "stall_nudge_claims_pair",
    "stall_nudge_todos_pending",
    "stall_nudge_todos_claimed",
    "stall_nudge_deliveries_unverified",
    "stall_nudge_hooks_endpoint",
    "stall_nudge_changes_due",
    "stall_nudge_held_order",
    "stall_nudge_ledger_due",
)


_SQL = queries("adapters.postgres", "migrate.sql")


@attrs.frozen(kw_only=True)
class MigrationReport:
    """Which tables and indexes this run created (empty when nothing was needed)."""

    created: tuple[str, ...]


class MissingHostTables(Exception):
    """The host tables our indexes and queries read are absent."""


async def _existing(conn: asyncpg.Connection, names: tuple[str, ...]) -> set[str]:
    rows = await conn.fetch(_SQL["existing_relations"], list(names))
    return {r["relname"] for r in rows}


async def missing_tables(conn: asyncpg.Connection) -> list[str]:
    """The host tables and our own tables that this database lacks, in that order."""
    wanted = (*HOST_TABLES, LEDGER_TABLE, CLAIMS_TABLE, *TICK_TABLES)
    present = await _existing(conn, wanted)
    return [t for t in wanted if t not in present]


async def migrate(conn: asyncpg.Connection, *, host_schema: bool = False) -> MigrationReport:
    """Create the ledger table and our indexes; with ``host_schema``, the host tables first.

    Idempotent, and all-or-nothing: it runs in one transaction under an
    advisory lock, so concurrent migrations neither race nor half-apply.
    """
    names = (*HOST_TABLES, LEDGER_TABLE, CLAIMS_TABLE, *TICK_TABLES, *_OWN_INDEXES)
    async with conn.transaction():
        await conn.execute(_SQL["lock"])
        before = await _existing(conn, names)
        if host_schema:
            await conn.execute(script("adapters.postgres", "host_schema.sql"))
        missing = [t for t in HOST_TABLES if t not in await _existing(conn, HOST_TABLES)]
        if missing:
            raise MissingHostTables(
                f"host tables missing: {', '.join(missing)} "
                "(switchboard's schema must exist first; for a demo or test database "
                "use --host-schema)"
            )
        await conn.execute(script("adapters.postgres", "migration.sql"))
        after = await _existing(conn, names)
    return MigrationReport(created=tuple(n for n in names if n in after - before))
