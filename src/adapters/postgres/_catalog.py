"""What the database holds, read as a guest: the host's schema, our objects, this build's.

Every read resolves names in pg_catalog alone (``guest_session``), so
nothing another role creates in the host's schema runs as the migrating
role. This build's definitions are not text kept beside the code:
``this_build`` builds every object again in this session's temporary schema
(the migrations' ``table_*`` and ``index_*`` steps, and the host indexes
and our views on empty copies of the host's tables), in a transaction it rolls back, and
the catalog prints both sides the same way, whatever the server version.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import attrs

from adapters.postgres.sql import queries, quote_ident

from ._manifest import (
    HOST_INDEXES,
    HOST_TABLES,
    OUR_SCHEMA,
    OUR_TABLES,
    VIEWS,
    HostIndex,
    migrations,
    names_in_host_schema,
    view_sql,
)
from ._steps import GUEST_PATH
from ._types import Connection

__all__ = [
    "GUEST_SEARCH_PATH",
    "Found",
    "HostName",
    "Installed",
    "Key",
    "MigrationError",
    "MissingHostTables",
    "Owned",
    "applied_versions",
    "as_guest",
    "endpoint_name",
    "find_host_schema",
    "fitting",
    "guest_session",
    "installed",
    "missing_tables",
    "objects",
    "owners",
    "ownership",
    "recorded_schema",
    "refuse",
    "this_build",
    "untrusted",
    "untrusted_of",
]

_SQL = queries("adapters.postgres", "migrate.sql")

#: Where every statement of ours looks up functions, operators and types.
GUEST_SEARCH_PATH = GUEST_PATH

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
async def guest_session(
    conn: Connection, *, lock: bool, schema: str | None = None, trusting: bool = True
) -> AsyncIterator[str]:
    """Resolve names in pg_catalog alone, find the host's schema, and trust only what is ours.

    With ``lock``, waits for the migrations' advisory lock first. The host's
    schema is ``schema`` when a DBA names one, else the one migrate recorded,
    else the only schema holding the host's tables. With ``trusting``, an
    object under one of our names that this role does not own (or is of
    another kind) refuses the session before anything of it is read.
    Yields the host's schema; puts the caller's search_path back afterwards.
    """
    before: str = await conn.fetchval(_SQL["search_path"])
    if lock:
        # Polling is the point (ASYNC110): the other migration is in another process.
        while not await conn.fetchval(_SQL["lock"]):  # noqa: ASYNC110
            await asyncio.sleep(LOCK_RETRY)
    try:
        await conn.execute(_SQL["set_search_path"], GUEST_SEARCH_PATH)
        try:
            # Our schema's objects are judged before its record of the host's schema is read.
            ours_untrusted = (
                await untrusted(conn, None) if trusting else (await ownership(conn, None))[0]
            )
            if trusting:
                refuse(ours_untrusted)
            host_schema = await find_host_schema(conn, schema, record=not ours_untrusted)
            if trusting:
                refuse(await untrusted(conn, host_schema))
            yield host_schema
        finally:
            await conn.execute(_SQL["set_search_path"], before)
    finally:
        if lock:
            await conn.execute(_SQL["unlock"])


async def find_host_schema(
    conn: Connection, named: str | None = None, *, record: bool = True
) -> str:
    """The host's schema: ``named``, else the one recorded, else the only one holding its tables.

    A second schema holding look-alike tables (a ``"$user"`` schema, a copy)
    is never picked silently: migrate asks a DBA to name one. Without
    ``record`` the record is not read (our schema is not ours to trust).
    """
    holding = [r["name"] for r in await conn.fetch(_SQL["host_schemas"], list(HOST_TABLES))]
    recorded = await recorded_schema(conn) if record else None
    chosen = named if named is not None else recorded
    if chosen is not None:
        if chosen in holding:
            return chosen
        missing = await missing_tables(conn, chosen, ours=False)
        why = "the schema named" if named is not None else "the schema migrate recorded"
        raise MissingHostTables(
            f"host tables missing in schema {chosen} ({why}): {', '.join(missing)}; "
            "if switchboard's tables live elsewhere, name their schema: "
            "stall-nudge migrate --schema NAME"
        )
    if len(holding) == 1:
        only: str = holding[0]
        return only
    if holding:
        raise MigrationError(
            f"the host's tables are in more than one schema ({', '.join(holding)}): "
            "name switchboard's with stall-nudge migrate --schema NAME"
        )
    raise MissingHostTables(
        f"host tables missing: no schema holds all of {', '.join(HOST_TABLES)} "
        "(switchboard's own migrations make them, before stall-nudge's)"
    )


@attrs.frozen(kw_only=True)
class Owned:
    """An object under one of our names, and who owns it."""

    kind: str
    schema: str
    name: str
    on_table: str
    owner: str
    trusted: bool

    def __str__(self) -> str:
        on = f" on {self.on_table}" if self.on_table else ""
        where = "" if self.kind == "schema" else f"{self.schema}."
        return f"{self.kind} {where}{self.name}{on} (owner {self.owner})"


async def owners(conn: Connection, host_schema: str | None) -> list[Owned]:
    """Every object under one of our names: our schema and all in it, and (given the host's
    schema) every relation with our prefix there."""
    rows = await conn.fetch(_SQL["owners"], host_schema)
    return [Owned(**dict(r)) for r in rows]


async def untrusted(conn: Connection, host_schema: str | None) -> list[str]:
    """What carries one of our names but is not ours to trust, one line each.

    An object this role does not own (nor a role it is granted, nor a
    superuser), or one of another kind or on another table than ours under
    one of our names. The indexes on the host's tables are the host's
    tables' owner's by definition: only their kind and table are asked.
    """
    return untrusted_of(await owners(conn, host_schema), host_schema)


def untrusted_of(objects: list[Owned], host_schema: str | None) -> list[str]:
    """``untrusted`` of objects already read."""
    expected = names_in_host_schema()
    found = []
    for owned in objects:
        if owned.schema == host_schema and owned.name in expected:
            kind, on_table = expected[owned.name]
            if (owned.kind, owned.on_table) != (kind, on_table):
                on = f" on {on_table}" if on_table else ""
                found.append(f"{owned}: it holds the name of our {kind}{on}")
                continue
            if kind == "index" and on_table in HOST_TABLES:
                continue
        if not owned.trusted:
            found.append(
                f"{owned}: its owner is not this role, a role it is granted, or a superuser"
            )
    return found


async def ownership(conn: Connection, host_schema: str | None) -> tuple[list[str], list[str]]:
    """What under our names is not ours to trust, as check reports it, and advice.

    Judged as migrate judges it (this role's, a role it is granted, or a
    superuser's), but by a sweeping role (which owns nothing, and was given
    USAGE on our schema by its owner) relative to our schema's owner: what
    another role owns beside it is still found.
    """
    found = await owners(conn, host_schema)
    schema = next((o for o in found if o.kind == "schema"), None)
    superuser = await conn.fetchval(_SQL["superuser"])
    advice = []
    if (
        schema is not None
        and not schema.trusted
        and not superuser
        and await conn.fetchval(_SQL["given_our_schema"])
    ):
        advice.append(
            f"ownership judged against our schema's owner {schema.owner}, not this role: "
            "run check as the migrating role to judge that too"
        )
        judged = [attrs.evolve(o, trusted=o.owner == schema.owner or o.trusted) for o in found]
        problems = untrusted_of(judged, host_schema)
    else:
        problems = untrusted_of(found, host_schema)
    return [f"not ours: {p}" for p in problems], advice


def refuse(findings: list[str]) -> None:
    """Refuse to adopt what another role made: one line, naming the first object and its owner."""
    if findings:
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise MigrationError(
            f"refusing to adopt {findings[0]}{more}: stall-nudge trusts only objects the migrating "
            "role owns; a DBA drops or renames it after checking what it is, then runs migrate"
        )


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


async def _missing(
    conn: Connection, tables: tuple[str, ...], host_schema: str | None = None
) -> list[str]:
    rows = await conn.fetch(_SQL["missing_tables"], host_schema, list(tables))
    return [r["t"] for r in rows]


async def missing_tables(
    conn: Connection, host_schema: str | None, *, ours: bool = True
) -> list[str]:
    """The host's tables (in ``host_schema``, all when None) then ours this database lacks."""
    host = (
        list(HOST_TABLES) if host_schema is None else await _missing(conn, HOST_TABLES, host_schema)
    )
    return host + (await _missing(conn, OUR_TABLES, host_schema) if ours else [])


async def recorded_schema(conn: Connection) -> str | None:
    """The host schema migrate recorded (None: no record yet, or this role may not read it)."""
    if not await conn.fetchval(_SQL["record_readable"]):
        return None
    recorded: str | None = await conn.fetchval(_SQL["recorded"])
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
    """A definition of ours aimed at the temporary schema instead of ours."""
    return sql.replace(f"{OUR_SCHEMA}.", "pg_temp.").replace(" CONCURRENTLY", "")


async def this_build(
    conn: Connection, host_schema: str, *, endpoint_name: bool = False
) -> dict[Key, Found] | None:
    """This build's objects, built in the temporary schema, read back, and rolled back.

    ``endpoint_name``: whether our view of endpoints reads the host's name.
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
        for index in HOST_INDEXES:
            await conn.execute(_scratch_sql(index.sql("pg_temp")))
        for table in VIEWS:
            sql = view_sql(table, "pg_temp", endpoint_name=endpoint_name)
            await conn.execute(_scratch_sql(sql))
        oid = await conn.fetchval("SELECT pg_catalog.pg_my_temp_schema()")
        return await objects(conn, oid, oid)
    except asyncpg.InsufficientPrivilegeError:
        return None
    finally:
        await scratch.rollback()


@attrs.frozen
class HostName:
    """The host's column endpoints.name: its type, and whether our view may read it."""

    type: str
    #: Of a type of PostgreSQL's own (or a domain over one): its text form runs no code
    #: another role wrote.
    readable: bool


async def endpoint_name(conn: Connection, host_schema: str) -> HostName | None:
    """The host's name for its endpoints, if it keeps one (``ENDPOINT_NAME``)."""
    row = await conn.fetchrow(_SQL["endpoint_name"], host_schema)
    return None if row is None else HostName(type=row["type"], readable=row["own"])


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
