"""Applying, checking and removing what stall-nudge installs (and, for demos and tests, the host).

What a database holds of ours is three things, each recorded in our schema
``stall_nudge``: the numbered migrations applied (``migrations/NNNN_*.sql``,
each once, in its own transaction), the footprint (lean: nothing on the
host's tables but the indexes our reads need; incremental: triggers that log
what changed, ``footprint_incremental.sql``), and every object migrate made
or relies on with its definition (``stall_nudge.objects``), which
``check`` compares with the catalog. Indexes on the host's tables are built
CONCURRENTLY outside any transaction (``host_indexes.sql``), or not at all
where the host keeps its own index that fits.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from importlib import resources

import attrs

from adapters.postgres.sql import parse_queries, queries, script, with_rules

from ._ledger import fleet_record, ledger_statements
from ._types import Connection

__all__ = [
    "FOOTPRINTS",
    "HOST_ID_TYPES",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "OUR_TABLES",
    "SCHEMA_VERSION",
    "CheckReport",
    "HostIndex",
    "Installed",
    "Migration",
    "MigrationError",
    "MigrationReport",
    "MissingHostTables",
    "check",
    "host_indexes",
    "host_schema_sql",
    "installed",
    "migrate",
    "migration_sql",
    "migrations",
    "missing_tables",
    "uninstall",
    "uninstall_sql",
]

LEDGER_TABLE = "queue_stall_nudges"
HOST_TABLES = ("endpoints", "deliveries", "todos", "notify_hooks")
#: Id types the reference host schema can be built with (a real host may use any type
#: with a text form; these are the ones the contract suite runs on).
HOST_ID_TYPES = ("text", "uuid", "bigint")
#: The footprints a database can have (docs/host-schema.md).
FOOTPRINTS = ("lean", "incremental")
#: Every table of ours: the ledger (in the host's schema, the spec's name), the rest in ours.
OUR_TABLES = (
    LEDGER_TABLE,
    "stall_nudge.migrations",
    "stall_nudge.settings",
    "stall_nudge.objects",
    "stall_nudge.sweeps",
    "stall_nudge.claims",
    "stall_nudge.changes",
    "stall_nudge.held",
)
#: Indexes earlier builds made on the host's tables (and on no table of this build):
#: migrate drops them concurrently.
RETIRED_INDEXES = (
    "stall_nudge_todos_pending",
    "stall_nudge_todos_claimed",
    "stall_nudge_todos_pending_short",
    "stall_nudge_todos_pending_long",
    "stall_nudge_deliveries_unverified",
    "stall_nudge_hooks_endpoint",
    "stall_nudge_endpoints_key",
)
#: How often a long index build reports its progress, in seconds.
PROGRESS_EVERY = 5.0
#: How often a migration waiting for another one tries the lock again, in seconds.
LOCK_RETRY = 0.1

_PACKAGE = "adapters.postgres"
_SQL = queries(_PACKAGE, "migrate.sql")
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_INDEX_HEADER = re.compile(r"^-- index: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FITS = re.compile(r"^-- fits: (\w+) \(([^)]*)\) where (.+)$", re.MULTILINE)
_ON_TABLE = re.compile(r"^\s*ON (\w+) ", re.MULTILINE)

Say = Callable[[str], None]


class MigrationError(Exception):
    """The database cannot be migrated as it is; the message says why in one line."""


class MissingHostTables(MigrationError):
    """The host tables our indexes and queries read are absent."""


@attrs.frozen(kw_only=True)
class Migration:
    """One numbered migration file: its version, name and transactional steps."""

    version: int
    name: str
    steps: Mapping[str, str]


@attrs.frozen(kw_only=True)
class HostIndex:
    """One index our reads need on a host table, and the host indexes that would serve instead."""

    name: str
    table: str
    sql: str
    #: The leading plain columns a host's own index must have to serve; empty: only ours.
    fits_columns: tuple[str, ...] = ()
    #: The predicates (as the catalog prints them; '' for none) such an index may have.
    fits_predicates: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class MigrationReport:
    """What a migrate run did: the version and footprint it left, what it created and removed."""

    version: int
    footprint: str
    #: Objects created, as "kind name [on table]": tables, indexes, triggers, functions.
    created: tuple[str, ...]
    removed: tuple[str, ...]
    #: Host indexes used instead of building ours: (ours, the host's).
    used: tuple[tuple[str, str], ...]


@attrs.frozen(kw_only=True)
class Installed:
    """What a database records of ours: the schema version and the footprint."""

    version: int
    footprint: str


@attrs.frozen(kw_only=True)
class CheckReport:
    """``check``'s findings: problems (a person must act; exit 3) and advice (said, not failed)."""

    problems: tuple[str, ...]
    advice: tuple[str, ...] = ()


def migrations() -> tuple[Migration, ...]:
    """The numbered migration files, in order; their steps have every rule expanded."""
    found = []
    for entry in resources.files(_PACKAGE).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            continue
        steps = with_rules(_PACKAGE, parse_queries(entry.read_text(encoding="utf-8")))
        found.append(Migration(version=int(match[1]), name=match[2], steps=steps))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a number: {versions}")
    return tuple(found)


#: The schema version this build needs and migrate writes: its last migration's number.
SCHEMA_VERSION = migrations()[-1].version


def host_indexes() -> tuple[HostIndex, ...]:
    """The indexes of host_indexes.sql, in file order, rules expanded."""
    text = script(_PACKAGE, "host_indexes.sql")
    pieces = _INDEX_HEADER.split(text)
    found = []
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        sql = with_rules(_PACKAGE, {name: body.strip()})[name]
        table = _ON_TABLE.search(sql)
        if table is None:
            raise MigrationError(f"index {name} names no table")
        fits = _FITS.search(sql)
        columns: tuple[str, ...] = ()
        predicates: tuple[str, ...] = ()
        if fits is not None:
            columns = tuple(c.strip() for c in fits[2].split(","))
            predicates = tuple("" if p.strip() == "none" else p.strip() for p in fits[3].split("|"))
        body_sql = "\n".join(
            line for line in sql.splitlines() if not line.lstrip().startswith("--")
        )
        found.append(
            HostIndex(
                name=name,
                table=table[1],
                sql=body_sql.strip().rstrip(";"),
                fits_columns=columns,
                fits_predicates=predicates,
            )
        )
    return tuple(found)


def _steps(filename: str, host_schema: str = "public") -> Mapping[str, str]:
    """The named steps of one script, rules expanded, the host's schema filled in."""
    text = script(_PACKAGE, filename).replace("@host_schema@", host_schema)
    return with_rules(_PACKAGE, parse_queries(text))


def host_schema_sql(id_type: str = "text") -> str:
    """The reference host schema (demos and tests) with ids of ``id_type``."""
    if id_type not in HOST_ID_TYPES:
        raise ValueError(f"host id type must be one of {', '.join(HOST_ID_TYPES)}: {id_type!r}")
    text = script(_PACKAGE, "host_schema.sql")
    return text.replace("text /* id type */", f"{id_type} /* id type */")


def _check_footprint(footprint: str | None) -> None:
    if footprint is not None and footprint not in FOOTPRINTS:
        raise ValueError(f"footprint must be one of {', '.join(FOOTPRINTS)}: {footprint!r}")


async def _lock(conn: Connection) -> None:
    """Wait for the migrations' lock, trying it again and again (see migrate.sql's lock)."""
    # Polling is the point (ASYNC110): the other migration is in another process.
    while not await conn.fetchval(_SQL["lock"]):  # noqa: ASYNC110
        await asyncio.sleep(LOCK_RETRY)


async def _existing(conn: Connection, names: tuple[str, ...]) -> list[str]:
    rows = await conn.fetch(_SQL["existing_relations"], list(names))
    return [r["n"] for r in rows]


async def missing_tables(conn: Connection) -> list[str]:
    """The host tables and then our own tables that this database lacks."""
    wanted = (*HOST_TABLES, *OUR_TABLES)
    present = set(await _existing(conn, wanted))
    return [t for t in wanted if t not in present]


async def _require_host_tables(conn: Connection) -> None:
    missing = [t for t in HOST_TABLES if t not in await _existing(conn, HOST_TABLES)]
    if missing:
        raise MissingHostTables(
            f"host tables missing: {', '.join(missing)} "
            "(switchboard's schema must exist first; for a demo or test database "
            "use --host-schema)"
        )


async def installed(conn: Connection) -> Installed | None:
    """The schema version and footprint this database records, or None before a migration."""
    present = set(await _existing(conn, ("stall_nudge.migrations", "stall_nudge.settings")))
    if "stall_nudge.migrations" not in present:
        return None
    versions = [r["version"] for r in await conn.fetch(_SQL["applied"])]
    if not versions:
        return None
    footprint = None
    if "stall_nudge.settings" in present:
        footprint = await conn.fetchval(_SQL["footprint"])
    return Installed(version=max(versions), footprint=footprint or "lean")


async def _applied(conn: Connection) -> set[int]:
    if not await _existing(conn, ("stall_nudge.migrations",)):
        return set()
    return {r["version"] for r in await conn.fetch(_SQL["applied"])}


async def _recorded_footprint(conn: Connection) -> str | None:
    if not await _existing(conn, ("stall_nudge.settings",)):
        return None
    footprint: str | None = await conn.fetchval(_SQL["footprint"])
    return footprint


async def _earlier_build(conn: Connection) -> bool:
    """Whether an earlier build's schema (versions 1 to 3) is here: its claim log."""
    return bool(await _existing(conn, ("stall_nudge_claims",)))


async def _target_footprint(conn: Connection, footprint: str | None) -> str:
    """The footprint this run leaves: the one asked for, else the one recorded, else lean.

    A database an earlier build migrated had its triggers: incremental.
    """
    if footprint is not None:
        return footprint
    recorded = await _recorded_footprint(conn)
    if recorded is not None:
        return recorded
    return "incremental" if await _earlier_build(conn) else "lean"


async def _fitting(conn: Connection, index: HostIndex) -> str | None:
    """The host's own index that serves instead of ``index``, if any."""
    if not index.fits_columns:
        return None
    name: str | None = await conn.fetchval(
        _SQL["fitting_index"], index.table, list(index.fits_columns), list(index.fits_predicates)
    )
    return name


async def _objects(conn: Connection) -> dict[tuple[str, str, str], str]:
    """Our objects in the catalog now: (kind, name, on_table) -> definition."""
    rows = await conn.fetch(_SQL["our_objects"])
    return {(r["kind"], r["name"], r["on_table"]): r["definition"] for r in rows}


def _label(key: tuple[str, str, str]) -> str:
    kind, name, on_table = key
    return f"{kind} {name}" + (f" on {on_table}" if on_table else "")


async def _build_index(
    conn: Connection, index: HostIndex, monitor: Connection | None, say: Say, every: float
) -> None:
    """Build one index concurrently, reporting progress; rebuild it once if left invalid."""
    for attempt in (1, 2):
        valid = await conn.fetchval(_SQL["index_valid"], index.name)
        if valid:
            return
        if valid is False:
            say(f"index {index.name} is invalid (a build was interrupted): rebuilding it")
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(index.name)}")
        build = asyncio.ensure_future(conn.execute(index.sql))
        pid = conn.get_server_pid()
        while not build.done():
            done, _ = await asyncio.wait({build}, timeout=every)
            if not done and monitor is not None:
                row = await monitor.fetchrow(_SQL["index_progress"], pid)
                if row is not None:
                    say(
                        f"index {index.name} on {index.table}: {row['phase']}, "
                        f"blocks {row['blocks_done']}/{row['blocks_total']}, "
                        f"tuples {row['tuples_done']}/{row['tuples_total']}"
                    )
        await build
        if await conn.fetchval(_SQL["index_valid"], index.name):
            return
        if attempt == 2:
            raise MigrationError(
                f"index {index.name} on {index.table} is still invalid after a rebuild "
                f"(see the server log), nothing else was changed"
            )


async def migrate(
    conn: Connection,
    *,
    host_schema: bool = False,
    host_id_type: str = "text",
    footprint: str | None = None,
    monitor: Connection | None = None,
    say: Say | None = None,
    progress_every: float = PROGRESS_EVERY,
) -> MigrationReport:
    """Bring this database to this build's schema, in ``footprint`` (None: keep the one it has).

    Serialised across processes by an advisory lock. Indexes on the host's
    tables are built concurrently first (progress goes to ``say`` every few
    seconds, ``progress_every``, when a second connection, ``monitor``, is
    given), then the
    migrations and the footprint are applied in one transaction, then
    earlier builds' indexes are dropped concurrently and what is there is
    recorded. With ``host_schema`` the reference host tables are created first.
    """
    _check_footprint(footprint)
    tell: Say = say if say is not None else (lambda _line: None)
    if host_schema:
        async with conn.transaction():
            await conn.execute(host_schema_sql(host_id_type))
    await _require_host_tables(conn)
    await _lock(conn)
    try:
        before = await _objects(conn)
        target = await _target_footprint(conn, footprint)
        used: list[tuple[str, str]] = []
        for index in host_indexes():
            fitting = await _fitting(conn, index)
            if fitting is None:
                await _build_index(conn, index, monitor, tell, progress_every)
            else:
                used.append((index.name, fitting))
        await conn.execute(_SQL["bootstrap"])
        applied = await _applied(conn)
        host_schema_name: str = await conn.fetchval(_SQL["host_schema"])
        # A table of ours gone (dropped by hand) is restored by applying the recorded
        # migrations again: every migration file is idempotent.
        restore = bool(applied) and bool(set(OUR_TABLES) - set(await _existing(conn, OUR_TABLES)))
        async with conn.transaction():
            for migration in migrations():
                if migration.version in applied and not restore:
                    continue
                for sql in migration.steps.values():
                    await conn.execute(sql)
                if migration.version not in applied:
                    await conn.execute(_SQL["record_migration"], migration.version, migration.name)
            for sql in await _earlier_removal(conn):
                await conn.execute(sql)
            await _apply_footprint(conn, target, host_schema_name)
            await conn.execute(_SQL["next_tick_full_pass"])
        present = await _objects(conn)
        indexes = {name for kind, name, _ in present if kind == "index"}
        for name in (*RETIRED_INDEXES, *(ours for ours, _ in used)):
            if name in indexes:
                await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(name)}")
        after = await _record(conn, used)
    finally:
        await conn.execute(_SQL["unlock"])
    created = tuple(_label(k) for k in sorted(after.keys() - before.keys()))
    removed = tuple(_label(k) for k in sorted(before.keys() - after.keys()))
    for line in created:
        tell(f"created {line}")
    for line in removed:
        tell(f"removed {line}")
    for ours, theirs in used:
        tell(f"uses the host's index {theirs} instead of building {ours}")
    return MigrationReport(
        version=SCHEMA_VERSION, footprint=target, created=created, removed=removed, used=tuple(used)
    )


def _earlier(key: tuple[str, str, str]) -> bool:
    """Whether an object of ours by name is an earlier build's: this build never uses its name."""
    kind, name, _ = key
    if kind == "trigger":
        return name.startswith("stall_nudge_log_")
    if kind in ("table", "function"):
        return name.startswith("stall_nudge_")
    return kind == "index" and name in RETIRED_INDEXES


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _earlier_removal(conn: Connection) -> list[str]:
    """The statements that fold an earlier build's claim log into ours and drop its objects.

    Triggers first, then functions, then tables, so no host write meets a
    trigger whose table is gone. Its indexes are dropped concurrently later.
    """
    present = [k for k in await _objects(conn) if _earlier(k)]
    statements = []
    if ("table", "stall_nudge_claims", "") in present:
        statements += list(_steps("earlier_builds.sql").values())
    for kind, name, on_table in sorted(
        present, key=lambda k: ("trigger", "function", "table", "index").index(k[0])
    ):
        if kind == "trigger":
            statements.append(f"DROP TRIGGER IF EXISTS {_ident(name)} ON {_ident(on_table)}")
        elif kind == "function":
            statements.append(f"DROP FUNCTION IF EXISTS {_ident(name)}()")
        elif kind == "table":
            statements.append(f"DROP TABLE IF EXISTS {_ident(name)}")
    return statements


async def _apply_footprint(conn: Connection, target: str, host_schema_name: str) -> None:
    """Install or remove the incremental footprint's triggers so the database has ``target``.

    Run only when needed: creating a trigger locks out the host's writes to
    its table for a moment, and migrate may run on a busy host.
    """
    triggers = {k for k in await _objects(conn) if k[0] in ("trigger", "function")}
    steps = _steps("footprint_incremental.sql", host_schema_name)
    if target == "incremental":
        if _wanted_incremental(steps) - triggers or (
            await _recorded_footprint(conn) != "incremental"
        ):
            for sql in steps.values():
                await conn.execute(sql)
    elif triggers & _wanted_incremental(steps) or await _recorded_footprint(conn) != "lean":
        for sql in _steps("footprint_lean.sql").values():
            await conn.execute(sql)
    await conn.execute(_SQL["set_footprint"], target)


def _wanted_incremental(steps: Mapping[str, str]) -> set[tuple[str, str, str]]:
    """The triggers and functions the incremental footprint has, as _objects keys."""
    wanted: set[tuple[str, str, str]] = set()
    for sql in steps.values():
        for name in re.findall(r"FUNCTION (stall_nudge\.\w+)\(\) RETURNS", sql):
            wanted.add(("function", name, ""))
        for name, table in re.findall(r"TRIGGER (\w+)\s+AFTER [A-Z ,_a-z]*? ON (\w+)", sql):
            wanted.add(("trigger", name, table))
    return wanted


async def _record(conn: Connection, used: list[tuple[str, str]]) -> dict[tuple[str, str, str], str]:
    """Record every object of ours and every host index we use, with its definition; return ours."""
    present = await _objects(conn)
    async with conn.transaction():
        await conn.execute(_SQL["clear_record"])
        for (kind, name, on_table), definition in present.items():
            await conn.execute(_SQL["record_object"], kind, name, on_table, True, definition)
        for _ours, theirs in used:
            row = await conn.fetchrow(_SQL["index_definition"], theirs)
            if row is not None:
                await conn.execute(
                    _SQL["record_object"],
                    "index",
                    theirs,
                    row["on_table"],
                    False,
                    row["definition"],
                )
    return present


async def check(conn: Connection) -> CheckReport:
    """Compare this database with this build: every object missing, extra or different.

    Problems: host tables missing, migrations not applied (or newer than this
    build), and each object migrate recorded that is gone or changed, or an
    object of ours it did not record (an earlier build's). Advice: a full pass
    that takes more than a tenth of the fleet's interval.
    """
    missing_host = [t for t in HOST_TABLES if t not in await _existing(conn, HOST_TABLES)]
    if missing_host:
        return CheckReport(problems=(f"host tables missing: {', '.join(missing_host)}",))
    state = await installed(conn)
    if state is None:
        return CheckReport(problems=("not migrated: run stall-nudge migrate",))
    problems: list[str] = []
    applied = await _applied(conn)
    pending = [m for m in migrations() if m.version not in applied]
    if pending:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
        problems.append(f"migrations not applied: {names} (run stall-nudge migrate)")
    if state.version > SCHEMA_VERSION:
        problems.append(
            f"schema version {state.version} is newer than this build's "
            f"{SCHEMA_VERSION}: upgrade stall-nudge"
        )
    recorded = {
        (r["kind"], r["name"], r["on_table"]): (r["ours"], r["definition"])
        for r in await conn.fetch(_SQL["recorded_objects"])
    }
    present = await _objects(conn)
    for key, (ours, definition) in sorted(recorded.items()):
        if not ours:
            row = await conn.fetchrow(_SQL["index_definition"], key[1])
            if row is None:
                problems.append(f"missing: the host's index {key[1]}, which the sweep reads")
            elif row["definition"] != definition:
                problems.append(f"different: the host's index {key[1]} changed since migrate")
        elif key not in present:
            problems.append(f"missing: {_label(key)}")
        elif present[key] != definition:
            problems.append(f"different: {_label(key)} is not as migrate made it")
    for key in sorted(present.keys() - recorded.keys()):
        whose = "an earlier build's" if _earlier(key) else "not made by migrate"
        problems.append(f"extra: {_label(key)} ({whose})")
    if problems and not pending:
        problems.append("stall-nudge migrate repairs these")
    return CheckReport(problems=tuple(problems), advice=await _advice(conn))


async def _advice(conn: Connection) -> tuple[str, ...]:
    """Say so when the fleet's full pass takes more than a tenth of its interval."""
    if not await _existing(conn, ("stall_nudge.sweeps", "stall_nudge.settings")):
        return ()
    record = await conn.fetchrow(ledger_statements()["sweep_record"])
    assert record is not None  # one row, even before the first sweep
    return fleet_record(record).advice


async def migration_sql(conn: Connection, *, footprint: str | None = None) -> str:
    """The SQL ``migrate`` would run on this database, for a DBA to read or run by hand."""
    _check_footprint(footprint)
    await _require_host_tables(conn)
    target = await _target_footprint(conn, footprint)
    applied = await _applied(conn)
    host_schema_name: str = await conn.fetchval(_SQL["host_schema"])
    out = [
        f"-- stall-nudge schema version {SCHEMA_VERSION}, footprint {target}: "
        "what migrate would run on this database.",
        "",
        "-- 1. Indexes on the host's tables, each outside any transaction (CONCURRENTLY does",
        "--    not block the host's writes; one left INVALID is dropped and built again).",
    ]
    for index in host_indexes():
        fitting = await _fitting(conn, index)
        if fitting is not None:
            out.append(f"-- {index.name}: the host's own index {fitting} serves; none built.")
        else:
            out.append(f"{index.sql};")
    out += ["", "-- 2. Then, in one transaction:", _SQL["bootstrap"], "BEGIN;"]
    for migration in migrations():
        if migration.version in applied:
            continue
        out.append(f"-- migration {migration.version:04d}_{migration.name}")
        out += [f"{sql.rstrip().rstrip(';')};" for sql in migration.steps.values()]
        out.append(
            f"INSERT INTO stall_nudge.migrations (version, name, applied_at) "
            f"VALUES ({migration.version}, '{migration.name}', now());"
        )
    if target != await _recorded_footprint(conn):
        fp_file = f"footprint_{target}.sql"
        out.append(f"-- footprint {target} ({fp_file})")
        steps = _steps(fp_file, host_schema_name)
        out += [f"{sql.rstrip().rstrip(';')};" for sql in steps.values()]
        out.append(f"UPDATE stall_nudge.settings SET footprint = '{target}', changed_at = now();")
    out += [_SQL["next_tick_full_pass"].rstrip(";") + ";", "COMMIT;", ""]
    out.append("-- 3. Indexes of earlier builds, dropped without blocking the host's writes:")
    out += [f"DROP INDEX CONCURRENTLY IF EXISTS {name};" for name in RETIRED_INDEXES]
    return "\n".join(out) + "\n"


async def uninstall_sql(conn: Connection) -> str:
    """The SQL ``uninstall`` runs, for a DBA to read first."""
    ours = [i.name for i in host_indexes()]
    out = [
        "-- stall-nudge uninstall: every object stall-nudge made; the host's rows stay as they",
        "-- are.",
        "-- 1. Our indexes on the host's tables, outside any transaction:",
        *(f"DROP INDEX CONCURRENTLY IF EXISTS {name};" for name in (*ours, *RETIRED_INDEXES)),
        "",
        "-- 2. Then, in one transaction:",
        "BEGIN;",
        *(f"{sql.rstrip().rstrip(';')};" for sql in _steps("uninstall.sql").values()),
        "COMMIT;",
    ]
    return "\n".join(out) + "\n"


async def uninstall(conn: Connection, *, say: Say | None = None) -> tuple[str, ...]:
    """Remove every object stall-nudge made (never a host index it used); return what went."""
    tell: Say = say if say is not None else (lambda _line: None)
    await _require_host_tables(conn)
    await _lock(conn)
    try:
        before = await _objects(conn)
        for name in (*(i.name for i in host_indexes()), *RETIRED_INDEXES):
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(name)}")
        async with conn.transaction():
            for sql in _steps("uninstall.sql").values():
                await conn.execute(sql)
        after = await _objects(conn)
    finally:
        await conn.execute(_SQL["unlock"])
    removed = tuple(_label(k) for k in sorted(before.keys() - after.keys()))
    for line in removed:
        tell(f"removed {line}")
    return removed
