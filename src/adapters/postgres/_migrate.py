"""Applying our migration (and, for demos and tests, the reference host schema).

The migration is the list of named steps in ``migration.sql``, run in file
order in one transaction under an advisory lock. ``migration_sql`` prints
the same steps for a DBA; ``schema_behind`` says what a database lacks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from adapters.postgres.sql import parse_queries, queries, script, with_rules

from ._types import Connection

__all__ = [
    "CLAIMS_TABLE",
    "HOST_ID_TYPES",
    "HOST_TABLES",
    "LARGE_TABLE_ROWS",
    "LEDGER_TABLE",
    "SCHEMA_TABLE",
    "SCHEMA_VERSION",
    "MigrationError",
    "MigrationReport",
    "MissingHostTables",
    "host_schema_sql",
    "migrate",
    "migration_sql",
    "missing_tables",
    "schema_behind",
]

#: The version of our schema this build needs and ``migrate`` writes. 1 is the first
#: recorded one; a database with our tables but no record was migrated by an earlier build.
#: 2: a ledger row deleted by hand is logged stamped with its pair's oldest pending todo;
#: 3: with its oldest pending todo past the gate.
SCHEMA_VERSION = 3

LEDGER_TABLE = "queue_stall_nudges"
#: The progress log: claims not yet absorbed by a charge (filled by a trigger on todos).
CLAIMS_TABLE = "stall_nudge_claims"
#: What a tick reads besides the ledger and the claims: changes, held-back pairs, full passes.
TICK_TABLES = ("stall_nudge_changes", "stall_nudge_held", "stall_nudge_sweeps")
#: Which schema version the database holds (one row).
SCHEMA_TABLE = "stall_nudge_schema"
HOST_TABLES = ("endpoints", "deliveries", "todos", "notify_hooks")
#: Id types the reference host schema can be built with (a real host may use any type
#: with a text form; these are the ones the contract suite runs on).
HOST_ID_TYPES = ("text", "uuid", "bigint")
#: From this many rows (the planner's estimate), --print-sql builds a host table's
#: indexes with CREATE INDEX CONCURRENTLY, outside the migration's transaction.
LARGE_TABLE_ROWS = 100_000

_OWN_TABLES = (LEDGER_TABLE, CLAIMS_TABLE, *TICK_TABLES, SCHEMA_TABLE)
#: Our indexes, on our tables and (host_index_* steps) on the host's.
_OWN_INDEXES = (
    "stall_nudge_ledger_pair",
    "stall_nudge_ledger_due",
    "stall_nudge_claims_key",
    "stall_nudge_changes_due",
    "stall_nudge_held_pair",
    "stall_nudge_held_due",
    "stall_nudge_todos_pending_short",
    "stall_nudge_todos_pending_long",
    "stall_nudge_deliveries_unverified",
    "stall_nudge_hooks_endpoint",
)
#: Only on a host whose endpoint ids are not text (a text id's primary key serves).
_KEYED_INDEX = "stall_nudge_endpoints_key"
_KEYED_STEP = "host_index_endpoints_key"
#: Indexes of earlier builds on todos (step retired_indexes drops them).
_RETIRED_INDEXES = ("stall_nudge_todos_pending", "stall_nudge_todos_claimed")
_TRIGGERS = (
    ("todos", "stall_nudge_log_claim"),
    ("todos", "stall_nudge_log_claimed_insert"),
    ("todos", "stall_nudge_log_created"),
    ("todos", "stall_nudge_log_moved_todo"),
    ("todos", "stall_nudge_log_state"),
    ("todos", "stall_nudge_log_deleted"),
    ("endpoints", "stall_nudge_log_endpoint_state"),
    ("notify_hooks", "stall_nudge_log_hook"),
    ("deliveries", "stall_nudge_log_verified"),
    (LEDGER_TABLE, "stall_nudge_log_ledger_delete"),
)

_SQL = queries("adapters.postgres", "migrate.sql")


@attrs.frozen(kw_only=True)
class MigrationReport:
    """Which tables and indexes this run created (empty when nothing was needed)."""

    created: tuple[str, ...]


class MigrationError(Exception):
    """The database cannot be migrated as it is; the message says why in one line."""


class MissingHostTables(MigrationError):
    """The host tables our indexes and queries read are absent."""


def _steps() -> Mapping[str, str]:
    """migration.sql's steps by name, in file order, with this build's schema version."""
    text = script("adapters.postgres", "migration.sql")
    steps = parse_queries(text.replace("@schema_version@", str(SCHEMA_VERSION)))
    return with_rules("adapters.postgres", steps)


def host_schema_sql(id_type: str = "text") -> str:
    """The reference host schema (demos and tests) with ids of ``id_type``."""
    if id_type not in HOST_ID_TYPES:
        raise ValueError(f"host id type must be one of {', '.join(HOST_ID_TYPES)}: {id_type!r}")
    text = script("adapters.postgres", "host_schema.sql")
    return text.replace("text /* id type */", f"{id_type} /* id type */")


async def _existing(conn: Connection, names: tuple[str, ...]) -> set[str]:
    rows = await conn.fetch(_SQL["existing_relations"], list(names))
    return {r["relname"] for r in rows}


async def _ids_are_text(conn: Connection) -> bool:
    return bool(await conn.fetchval(_SQL["endpoint_ids_are_text"]))


async def _plan(conn: Connection) -> list[tuple[str, str]]:
    """The steps this database's migration runs: every step, less the keyed index on text ids."""
    text_ids = await _ids_are_text(conn)
    return [(n, sql) for n, sql in _steps().items() if not (n == _KEYED_STEP and text_ids)]


async def _wanted_indexes(conn: Connection) -> tuple[str, ...]:
    return _OWN_INDEXES if await _ids_are_text(conn) else (*_OWN_INDEXES, _KEYED_INDEX)


async def missing_tables(conn: Connection) -> list[str]:
    """The host tables and our own tables that this database lacks, in that order."""
    wanted = (*HOST_TABLES, *_OWN_TABLES)
    present = await _existing(conn, wanted)
    return [t for t in wanted if t not in present]


async def schema_behind(conn: Connection) -> list[str]:
    """Why this database's schema is behind this build, one reason a line; empty when current."""
    missing_host = [t for t in HOST_TABLES if t not in await _existing(conn, HOST_TABLES)]
    if missing_host:
        return [f"host tables missing: {', '.join(missing_host)}"]
    reasons = []
    present = await _existing(conn, _OWN_TABLES)
    absent = [t for t in _OWN_TABLES if t not in present and t != SCHEMA_TABLE]
    if absent:
        reasons.append(f"tables missing: {', '.join(absent)}")
    version = await conn.fetchval(_SQL["schema_version"]) if SCHEMA_TABLE in present else None
    if version is None or version < SCHEMA_VERSION:
        reasons.append(
            f"schema version {version or 'unrecorded'}, this build needs {SCHEMA_VERSION}"
        )
    elif version > SCHEMA_VERSION:
        reasons.append(
            f"schema version {version} is newer than this build's "
            f"{SCHEMA_VERSION}: upgrade stall-nudge"
        )
    indexes = await _wanted_indexes(conn)
    absent_indexes = [i for i in indexes if i not in await _existing(conn, indexes)]
    if absent_indexes:
        reasons.append(f"indexes missing: {', '.join(absent_indexes)}")
    invalid = await conn.fetch(_SQL["invalid_indexes"], list(indexes))
    if invalid:
        names = ", ".join(r["relname"] for r in invalid)
        reasons.append(
            f"indexes invalid (a failed CONCURRENTLY build): {names}; "
            "DROP INDEX them and migrate again"
        )
    triggers = {(r["table"], r["tgname"]) for r in await conn.fetch(_SQL["our_triggers"])}
    absent_triggers = [name for table, name in _TRIGGERS if (table, name) not in triggers]
    if absent_triggers:
        reasons.append(f"triggers missing: {', '.join(absent_triggers)}")
    return reasons


async def migration_sql(conn: Connection, *, concurrently: bool = False) -> str:
    """The SQL ``migrate`` would run on this database, for a DBA to read or run by hand.

    Host-table indexes of tables of at least ``LARGE_TABLE_ROWS`` rows (or all
    of them, with ``concurrently``) come first in their ``CREATE INDEX
    CONCURRENTLY`` form, to run outside any transaction; the migration's
    transaction then finds them and skips them.
    """
    plan = await _plan(conn)
    rows = {r["relname"]: r["rows"] for r in await conn.fetch(_SQL["table_rows"], HOST_TABLES)}
    ahead: list[str] = []
    body: list[str] = []
    for name, step in plan:
        sql = step.rstrip().rstrip(";")
        table = _host_index_table(sql) if name.startswith("host_index_") else None
        if table is not None and (concurrently or rows.get(table, 0) >= LARGE_TABLE_ROWS):
            ahead.append(
                f"-- {name} ({table}: about {rows.get(table, 0):,.0f} rows)\n"
                + sql.replace(
                    "CREATE INDEX IF NOT EXISTS", "CREATE INDEX CONCURRENTLY IF NOT EXISTS"
                )
                + ";"
            )
        else:
            body.append(f"-- step: {name}\n{sql};")
    if ahead:
        # Retired indexes on todos, dropped without locking out its writes.
        ahead += [f"DROP INDEX CONCURRENTLY IF EXISTS {name};" for name in _RETIRED_INDEXES]
    out = [
        f"-- stall-nudge schema version {SCHEMA_VERSION}: the migration of this database.",
        "-- Idempotent: every object is created only when missing.",
    ]
    if ahead:
        out += [
            "",
            "-- 1. Large host tables: build these first, one at a time, outside any transaction",
            "--    (CONCURRENTLY does not block the host's writes). If one fails it leaves an",
            "--    INVALID index: DROP INDEX it and run it again.",
            *ahead,
            "",
            "-- 2. Then the migration, in one transaction (it skips the indexes built above):",
        ]
    out += ["BEGIN;", _SQL["lock"].rstrip(";") + ";", *body, "COMMIT;"]
    return "\n".join(out) + "\n"


def _host_index_table(sql: str) -> str | None:
    """The table a step's CREATE INDEX is on (its "ON table" line)."""
    found = re.search(r"^\s*ON (\w+) ", sql, re.MULTILINE)
    return found.group(1) if found else None


async def migrate(
    conn: Connection, *, host_schema: bool = False, host_id_type: str = "text"
) -> MigrationReport:
    """Create our tables, triggers and indexes; with ``host_schema``, the host tables first.

    Idempotent, and all-or-nothing: it runs in one transaction under an
    advisory lock, so concurrent migrations neither race nor half-apply.
    ``host_id_type`` is the reference host schema's id type (text, uuid, bigint).
    """
    names = (*HOST_TABLES, *_OWN_TABLES, *_OWN_INDEXES, _KEYED_INDEX)
    host_sql = host_schema_sql(host_id_type) if host_schema else None
    async with conn.transaction():
        await conn.execute(_SQL["lock"])
        before = await _existing(conn, names)
        if host_sql is not None:
            await conn.execute(host_sql)
        missing = [t for t in HOST_TABLES if t not in await _existing(conn, HOST_TABLES)]
        if missing:
            raise MissingHostTables(
                f"host tables missing: {', '.join(missing)} "
                "(switchboard's schema must exist first; for a demo or test database "
                "use --host-schema)"
            )
        invalid = await conn.fetch(_SQL["invalid_indexes"], list(names))
        if invalid:
            listed = ", ".join(r["relname"] for r in invalid)
            raise MigrationError(
                f"indexes left invalid by a failed CREATE INDEX CONCURRENTLY: {listed} "
                "(DROP INDEX them, then migrate again)"
            )
        for _name, sql in await _plan(conn):
            await conn.execute(sql)
        after = await _existing(conn, names)
    return MigrationReport(created=tuple(n for n in names if n in after - before))
