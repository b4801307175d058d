"""What the database holds, read as a guest: the host's schema, our objects, this build's.

Every read resolves names in pg_catalog alone (``guest_session``), so
nothing another role creates in the host's schema runs as the migrating
role. This build's definitions are not text kept beside the code:
``this_build`` builds every object again in this session's temporary schema
(the migrations' ``table_*`` and ``index_*`` steps, and the host indexes
on empty copies of the host's tables), in a transaction it rolls back, and
the catalog prints both sides the same way, whatever the server version.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import attrs

from adapters.postgres.sql import for_host, queries, quote_ident

from ._manifest import HOST_TABLES, OUR_SCHEMA, OUR_TABLES, HostIndex, host_indexes, migrations
from ._types import Connection

__all__ = [
    "GUEST_SEARCH_PATH",
    "Found",
    "Installed",
    "Key",
    "MigrationError",
    "MissingHostTables",
    "applied_versions",
    "as_guest",
    "fitting",
    "guest_session",
    "installed",
    "missing_tables",
    "objects",
    "recorded_schema",
    "this_build",
]

_SQL = queries("adapters.postgres", "migrate.sql")

#: Where every statement of ours looks up functions, operators and types.
GUEST_SEARCH_PATH = "pg_catalog, pg_temp"

#: How often a migration waiting for another one tries the lock again, in seconds.
LOCK_RETRY = 0.1


class MigrationError(Exception):
    """The database cannot be migrated as it is; the message says why in one line."""


class MissingHostTables(MigrationError):
    """The host tables our indexes and queries read are absent."""


@attrs.frozen(kw_only=True)
class Installed:
    """What a database records of ours: the schema version and the host's schema."""

    version: int
    host_schema: str | None


@asynccontextmanager
async def guest_session(conn: Connection, *, lock: bool) -> AsyncIterator[str]:
    """Find the host's schema, then resolve names in pg_catalog alone until the block ends.

    With ``lock``, waits for the migrations' advisory lock first. Yields the
    host's schema; puts the caller's search_path back afterwards.
    """
    schema: str | None = await conn.fetchval(_SQL["host_schema"])
    if schema is None:
        raise MissingHostTables(
            "host tables missing: todos (switchboard's schema must exist first; for a demo "
            "or test database use --host-schema)"
        )
    missing = [t for t in HOST_TABLES if t not in await _host_tables(conn, schema)]
    if missing:
        raise MissingHostTables(
            f"host tables missing in schema {schema}: {', '.join(missing)} "
            "(for a demo or test database use --host-schema)"
        )
    before: str = await conn.fetchval(_SQL["search_path"])
    if lock:
        # Polling is the point (ASYNC110): the other migration is in another process.
        while not await conn.fetchval(_SQL["lock"]):  # noqa: ASYNC110
            await asyncio.sleep(LOCK_RETRY)
    try:
        await conn.execute(_SQL["set_search_path"], GUEST_SEARCH_PATH)
        try:
            yield schema
        finally:
            await conn.execute(_SQL["set_search_path"], before)
    finally:
        if lock:
            await conn.execute(_SQL["unlock"])


async def _host_tables(conn: Connection, schema: str) -> set[str]:
    rows = await conn.fetch(_SQL["host_tables"], schema, list(HOST_TABLES))
    return {r["name"] for r in rows}


async def as_guest(conn: Connection) -> None:
    """Resolve names in pg_catalog alone until this transaction ends (it must be in one)."""
    await conn.execute(_SQL["guest_path"], GUEST_SEARCH_PATH)


async def applied_versions(conn: Connection) -> set[int]:
    """The versions this database applied (none before the first migration)."""
    if await _missing(conn, ("stall_nudge.migrations",)):
        return set()
    return {r["version"] for r in await conn.fetch(_SQL["applied"])}


async def installed(conn: Connection) -> Installed | None:
    """The schema version and host schema this database records, or None before a migration."""
    versions = await applied_versions(conn)
    if not versions:
        return None
    return Installed(version=max(versions), host_schema=await recorded_schema(conn))


async def _missing(conn: Connection, tables: tuple[str, ...]) -> list[str]:
    rows = await conn.fetch(_SQL["missing_tables"], list(tables))
    return [r["t"] for r in rows]


async def missing_tables(conn: Connection) -> list[str]:
    """The host's tables then ours this database lacks (the host's as its search_path has it)."""
    return await _missing(conn, (*HOST_TABLES, *OUR_TABLES))


async def recorded_schema(conn: Connection) -> str | None:
    """The host schema migrate recorded (None: no record yet, or this role may not read it)."""
    if not await conn.fetchval(_SQL["record_readable"]):
        return None
    recorded: str | None = await conn.fetchval("SELECT host_schema FROM stall_nudge.settings")
    return recorded


Key = tuple[str, str, str]  # (kind, name, on_table)


@attrs.frozen
class Found:
    definition: str
    valid: bool


async def objects(conn: Connection, ours: int | None, host: int) -> dict[Key, Found]:
    rows = await conn.fetch(_SQL["objects"], ours, host, list(HOST_TABLES))
    return {(r["kind"], r["name"], r["on_table"]): Found(r["definition"], r["valid"]) for r in rows}


def _scratch_sql(sql: str) -> str:
    """A definition of ours aimed at the temporary schema instead of ours and the host's."""
    sql = for_host({"": sql.replace(f"{OUR_SCHEMA}.", "pg_temp.")}, "pg_temp")[""]
    return re.sub(r"CREATE (UNIQUE )?INDEX CONCURRENTLY", r"CREATE \1INDEX", sql)


async def this_build(conn: Connection, host_schema: str) -> dict[Key, Found] | None:
    """This build's objects, built in the temporary schema, read back, and rolled back.

    None when this role may not create temporary tables.
    """
    scratch = conn.transaction()
    await scratch.start()
    try:
        for table in HOST_TABLES:
            like = f"{quote_ident(host_schema)}.{table}"
            await conn.execute(f"CREATE TEMP TABLE {table} (LIKE {like})")
        for migration in migrations():
            for name, sql in migration.steps.items():
                if name.startswith(("table_", "index_")):
                    await conn.execute(_scratch_sql(sql))
        for index in host_indexes():
            await conn.execute(_scratch_sql(index.sql))
        oid = await conn.fetchval("SELECT pg_catalog.pg_my_temp_schema()")
        return await objects(conn, oid, oid)
    except asyncpg.InsufficientPrivilegeError:
        return None
    finally:
        await scratch.rollback()


async def fitting(conn: Connection, host_schema: str, index: HostIndex) -> str | None:
    """The host's own index that serves instead of ``index``, if any."""
    if not index.fits_columns:
        return None
    name: str | None = await conn.fetchval(
        _SQL["fitting_index"],
        f"{quote_ident(host_schema)}.{index.table}",
        list(index.fits_columns),
        list(index.fits_predicates),
    )
    return name
