"""Planning: what makes this database agree with this build, and ``check``, which reports it.

Theory of operation
-------------------
``plan`` compares the database with this build (``_manifest``) and returns
the statements that make the two agree, each with the problem it repairs:
migrations not applied, an object of ours missing, extra (an earlier
build's, or not ours to keep), different from this build's definition or
left INVALID, the record of the host's schema, and the privileges of the
roles given a sweeping role's (``--grant``). ``migrate`` runs exactly that
plan, ``--print-sql`` prints it, and ``check`` reports its problems: the
three can never disagree.

This build's definitions are read back from the catalog (``_catalog``).
Every statement resolves names in pg_catalog alone and names the host's
tables with their schema, so nothing another role creates in the host's
schema runs as the migrating role.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from adapters.postgres.sql import queries, quote_ident

from ._catalog import (
    Found,
    Key,
    MigrationError,
    applied_versions,
    endpoint_name,
    fitting,
    guest_session,
    objects,
    owners,
    ownership,
    recorded_schema,
    this_build,
)
from ._grants import NAME_ENTRY, plan_grants, sweeper_entries
from ._manifest import (
    ENDPOINT_NAME,
    HOST_INDEXES,
    HOST_TABLES,
    OUR_SCHEMA,
    OUR_TABLES,
    VIEWS,
    migrations,
    qualified,
    view_sql,
)
from ._steps import (
    HUNG_ON_TABLES,
    RELATION_KINDS,
    SCHEMA_VERSION,
    Plan,
    Step,
    drop_host_index,
    drop_object,
    drop_trigger,
    literal,
    table_of,
)
from ._types import Connection

__all__ = [
    "CheckReport",
    "check",
    "make_plan",
    "plan",
]

_SQL = queries("adapters.postgres", "migrate.sql")


@attrs.frozen(kw_only=True)
class CheckReport:
    """``check``'s findings: problems (a person must act; exit 3) and advice (said, not failed)."""

    problems: tuple[str, ...]
    advice: tuple[str, ...] = ()


async def plan(conn: Connection, *, grant: str | None = None, schema: str | None = None) -> Plan:
    """What migrate would run on this database now (see the module's theory of operation)."""
    async with guest_session(conn, lock=False, schema=schema) as host_schema:
        return await make_plan(conn, host_schema, grant=grant)


#: The oldest server migrate installs on: views with security_invoker came in 15.
OLDEST_SERVER = 150000


async def make_plan(conn: Connection, host_schema: str, *, grant: str | None) -> Plan:
    version = int(await conn.fetchval("SELECT pg_catalog.current_setting('server_version_num')"))
    if version < OLDEST_SERVER:
        raise MigrationError(
            f"PostgreSQL {version // 10000} is too old: stall-nudge needs 15 or later "
            "(its views of the host's tables read with the reader's own privileges)"
        )
    steps: list[Step] = []
    applied = await applied_versions(conn)
    spaces = await conn.fetchrow(_SQL["namespaces"], host_schema)
    assert spaces is not None  # one row
    present = await objects(conn, spaces["ours"], spaces["host"])
    tables_missing = (
        [t for t in OUR_TABLES if ("table", t.rsplit(".", 1)[-1], "") not in present]
        if spaces["ours"] is not None
        else list(OUR_TABLES)
    )
    pending = [m for m in migrations() if m.version not in applied]
    if applied and max(applied) > SCHEMA_VERSION:
        raise MigrationError(
            f"schema version {max(applied)} is newer than this build's {SCHEMA_VERSION}: "
            "upgrade stall-nudge"
        )

    # 1. Triggers of ours on the host's tables (an earlier build's): each drop locks its
    #    table, so a short lock_timeout, tried again.
    for key in sorted(k for k in present if k[0] == "trigger"):
        steps.append(
            Step(
                sql=drop_trigger(key[1], key[2], host_schema),
                why=f"extra: trigger {key[1]} on {key[2]} (no build of ours keeps one)",
                phase="before",
                locks_host=True,
            )
        )

    # 2. Indexes on the host's tables: a fitting one of the host's, or ours as this build
    #    defines it, valid. Our view of endpoints reads the host's name where it has one
    #    (the view is made again when that changes).
    host_name = await endpoint_name(conn, host_schema)
    named = host_name is not None and host_name.readable
    expected = await this_build(conn, host_schema, endpoint_name=named)
    used: list[tuple[str, str]] = []
    wanted: set[Key] = set()
    for index in HOST_INDEXES:
        theirs = await fitting(conn, host_schema, index)
        key = ("index", index.name, index.table)
        if theirs is not None:
            used.append((index.name, theirs))
            continue
        wanted.add(key)
        found = present.get(key)
        sql = index.sql(host_schema)
        if found is None:
            steps.append(
                Step(
                    sql=sql,
                    why=f"missing: index {index.name} on {index.table}",
                    phase="before",
                    index=qualified(f"@{index.name}", host_schema),
                )
            )
            continue
        why = None
        if not found.valid:
            why = f"invalid: index {index.name} on {index.table} (an interrupted build)"
        elif expected is not None and expected[key].definition != found.definition:
            why = f"different: index {index.name} on {index.table}"
        if why is not None:
            drop = drop_host_index(index.name, host_schema)
            steps += [
                Step(sql=drop, why=why, phase="before"),
                Step(
                    sql=sql, why=why, phase="before", index=qualified(f"@{index.name}", host_schema)
                ),
            ]

    # 3. In one transaction: the migrations (all of them again when a table of ours is
    #    gone: each is idempotent), then what is extra, different or missing.
    restore = bool(applied) and bool(tables_missing)
    for migration in migrations():
        if migration.version in applied and not restore:
            continue
        why = (
            f"missing: {', '.join(tables_missing)}"
            if migration.version in applied
            else f"migrations not applied: {migration.label}"
        )
        steps += [Step(sql=sql, why=why) for sql in migration.steps.values()]
        if migration.version not in applied:
            steps.append(
                Step(
                    sql="INSERT INTO stall_nudge.migrations (version, name, applied_at) "
                    f"VALUES ({migration.version}, {literal(migration.name)}, now())",
                    why=why,
                )
            )
    made_by_migrations = bool(pending) or restore
    steps += _repairs(present, expected, wanted, host_schema, compare=not made_by_migrations)
    recorded = await recorded_schema(conn)
    made, view_steps = _views(
        present, expected, host_schema, moved=recorded not in (None, host_schema), named=named
    )
    steps += view_steps
    if recorded != host_schema:
        steps.append(
            Step(
                sql="INSERT INTO stall_nudge.settings (host_schema) "
                f"VALUES ({literal(host_schema)}) "
                "ON CONFLICT (singleton) DO UPDATE SET host_schema = EXCLUDED.host_schema",
                why=f"missing: the record of the host's schema ({host_schema})"
                if recorded is None
                else f"different: the host's schema is {host_schema}, the record says {recorded}",
            )
        )
    if any(s.phase != "after" for s in steps):
        # The schema changes: the fleet's next tick is a full pass. Part of the first
        # repair, not a problem of its own.
        steps.append(
            Step(
                sql="UPDATE stall_nudge.ticks SET judged_to = NULL, full_pass_at = NULL",
                why=steps[0].why,
            )
        )
    absent = {OUR_SCHEMA} if spaces["ours"] is None else set()
    absent |= {t if "." in t else f"@{t}" for t in tables_missing}
    # A view made anew holds no privileges yet.
    absent |= {f"{OUR_SCHEMA}.{view}" for view in made}
    recorded_roles = {}
    if "stall_nudge.grants" not in absent:
        recorded_roles = {r["role"]: r["given"] for r in await conn.fetch(_SQL["recorded_grants"])}
    if host_name is None and any(NAME_ENTRY in given for given in recorded_roles.values()):
        # The host dropped its names (and our view with them): nothing left to revoke.
        steps.append(
            Step(
                sql="UPDATE stall_nudge.grants "
                f"SET given = array_remove(given, {literal(NAME_ENTRY)})",
                why=f"extra: the record of SELECT ({ENDPOINT_NAME}) on endpoints, "
                "a column the host no longer has",
            )
        )
    grant_steps, for_dba, held = await plan_grants(
        conn, host_schema, grant=grant, recorded=recorded_roles, absent=absent, endpoint_name=named
    )
    steps += grant_steps

    # 4. Indexes of ours on the host's tables this build does not keep, and ours where
    #    the host's own serves, dropped without blocking the host's writes.
    for key in sorted(k for k in present if k[0] == "index" and k[2] in HOST_TABLES):
        if key in wanted:
            continue
        theirs = dict(used).get(key[1])
        why = (
            f"extra: index {key[1]} on {key[2]} (the host's {theirs} serves)"
            if theirs
            else f"extra: index {key[1]} on {key[2]} (this build does not use it)"
        )
        steps.append(
            Step(
                sql=drop_host_index(key[1], host_schema),
                why=why,
                phase="after",
            )
        )
    return Plan(
        steps=tuple(steps),
        for_dba=tuple(for_dba),
        used=tuple(used),
        held=held,
        needed=len(sweeper_entries(named)),
        compared=expected is not None,
        unread_name=None if host_name is None or named else host_name.type,
    )


def _repairs(
    present: Mapping[Key, Found],
    expected: Mapping[Key, Found] | None,
    wanted_host: set[Key],
    host_schema: str,
    *,
    compare: bool,
) -> list[Step]:
    """Drop what is extra in our schema and on our tables; repair what differs from this build.

    ``compare`` is off while migrations are to run: they make each object as
    this build defines it, and the next check compares.
    """
    steps: list[Step] = []
    ours = {k for k in present if not (k[0] in ("index", "trigger") and k[2] in HOST_TABLES)}
    build = (
        set()
        if expected is None
        else {k for k in expected if not (k[0] == "index" and k[2] in HOST_TABLES)}
    )
    extra = (
        sorted(ours - build)
        if expected is not None
        else sorted(
            k
            for k in ours
            if k[0] in ("function", *HUNG_ON_TABLES)
            or (
                k[0] in RELATION_KINDS
                and k[1] not in {*(t.rsplit(".", 1)[-1] for t in OUR_TABLES), *VIEWS.values()}
            )
        )
    )
    extra_tables = {name for kind, name, _ in extra if kind == "table"}
    for kind, name, on_table in extra:
        if kind == "trigger" or on_table in extra_tables:
            continue  # dropped before the transaction, or with its table
        why = f"extra: {kind} {name}" + (f" on {on_table}" if on_table else "")
        steps.append(Step(sql=drop_object(kind, name, on_table, host_schema), why=why))
    if not compare or expected is None:
        return steps
    for key in sorted(build):
        kind, name, on_table = key
        want = expected[key]
        found = present.get(key)
        label = f"{kind} {name}" + (f" on {on_table}" if on_table else "")
        if found is None:
            if kind == "index":
                steps.append(
                    Step(
                        sql=_create_index(name, on_table, want.definition, host_schema),
                        why=f"missing: {label}",
                    )
                )
            elif kind == "constraint":
                steps.append(
                    Step(
                        sql=f"ALTER TABLE {table_of(on_table, host_schema)} "
                        f"ADD CONSTRAINT {quote_ident(name)} {want.definition}",
                        why=f"missing: {label}",
                    )
                )
            continue
        if found.definition == want.definition and found.valid:
            continue
        why = f"{'different' if found.valid else 'invalid'}: {label}"
        if kind == "table":
            steps += [
                Step(sql=sql, why=why)
                for sql in _alter_columns(name, found.definition, want.definition, host_schema)
            ]
        elif kind == "index":
            steps += [
                Step(sql=drop_object(kind, name, on_table, host_schema), why=why),
                Step(sql=_create_index(name, on_table, want.definition, host_schema), why=why),
            ]
        elif kind == "constraint":
            table = table_of(on_table, host_schema)
            steps += [
                Step(sql=f"ALTER TABLE {table} DROP CONSTRAINT {quote_ident(name)}", why=why),
                Step(
                    sql=f"ALTER TABLE {table} ADD CONSTRAINT {quote_ident(name)} {want.definition}",
                    why=why,
                ),
            ]
    return steps


def _views(
    present: Mapping[Key, Found],
    expected: Mapping[Key, Found] | None,
    host_schema: str,
    *,
    moved: bool,
    named: bool,
) -> tuple[set[str], list[Step]]:
    """Make each view of a host table that is missing, differs from this build's, or reads
    the schema the host's tables were in before (``moved``): the views made, and the steps.

    ``named``: the view of endpoints reads the host's name. A view's definition
    holds the host's columns it reads, so a host that adds the name finds the
    view different.
    """
    steps: list[Step] = []
    made: set[str] = set()
    for table, view in VIEWS.items():
        key = ("view", view, "")
        found = present.get(key)
        sql = view_sql(table, host_schema, endpoint_name=named)
        create = Step(sql=sql, why=f"missing: view {view}")
        if found is None:
            steps.append(create)
            made.add(view)
            continue
        why = None
        if moved:
            why = f"different: view {view} reads the host's tables where they were"
        elif expected is not None and expected[key].definition != found.definition:
            why = f"different: view {view}"
        if why is not None:
            drop = f"DROP VIEW IF EXISTS {OUR_SCHEMA}.{quote_ident(view)}"
            steps += [Step(sql=drop, why=why), attrs.evolve(create, why=why)]
            made.add(view)
    return made, steps


def _create_index(name: str, on_table: str, definition: str, host_schema: str) -> str:
    """CREATE INDEX for one of our tables' indexes, from its definition as ``objects`` reads it."""
    unique = definition.startswith("unique ")
    using = definition.removeprefix("unique ")
    return (
        f"CREATE {'UNIQUE ' if unique else ''}INDEX IF NOT EXISTS {quote_ident(name)} "
        f"ON {table_of(on_table, host_schema)} USING {using}"
    )


def _alter_columns(table: str, found: str, want: str, host_schema: str) -> list[str]:
    """ALTER TABLE statements that give ``table`` this build's columns (json definitions)."""
    have = {c["name"]: c for c in json.loads(found)}
    need = {c["name"]: c for c in json.loads(want)}
    target = table_of(table, host_schema)
    out = []
    for name, column in need.items():
        col = quote_ident(name)
        if name not in have:
            default = f" DEFAULT {column['default']}" if column["default"] is not None else ""
            out.append(
                f"ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {col} {column['type']}{default}"
            )
            if column["not_null"]:
                out.append(f"ALTER TABLE {target} ALTER COLUMN {col} SET NOT NULL")
            continue
        now = have[name]
        if now["type"] != column["type"]:
            out.append(
                f"ALTER TABLE {target} ALTER COLUMN {col} TYPE {column['type']} "
                f"USING {col}::{column['type']}"
            )
        if now["not_null"] != column["not_null"]:
            out.append(
                f"ALTER TABLE {target} ALTER COLUMN {col} "
                f"{'SET' if column['not_null'] else 'DROP'} NOT NULL"
            )
        if now["default"] != column["default"]:
            out.append(
                f"ALTER TABLE {target} ALTER COLUMN {col} "
                + (
                    f"SET DEFAULT {column['default']}"
                    if column["default"] is not None
                    else "DROP DEFAULT"
                )
            )
    for name in have.keys() - need.keys():
        out.append(f"ALTER TABLE {target} DROP COLUMN IF EXISTS {quote_ident(name)}")
    return out


async def check(conn: Connection) -> CheckReport:
    """The problems migrate would repair now, and advice; never changes anything.

    Run by a role that may read but not migrate, it reports what it can see.
    """
    async with guest_session(conn, lock=False, trusting=False) as host_schema:
        foreign, advice = await ownership(conn, host_schema)
        if foreign:
            # Reading what another role made would run its code: say so, and no more.
            return CheckReport(
                problems=(*foreign, "stall-nudge migrate refuses these"), advice=tuple(advice)
            )
        applied = await applied_versions(conn)
        todo = await make_plan(conn, host_schema, grant=None)
        if not applied:
            left = [
                f"left by an interrupted migrate: {o.kind} {o.name}"
                + (f" on {o.on_table}" if o.on_table else "")
                for o in await owners(conn, host_schema)
            ] + [p for p in todo.problems if p.startswith("invalid: ")]
            return CheckReport(
                problems=(
                    "not migrated: run stall-nudge migrate"
                    + (" (an interrupted migrate left the objects below)" if left else ""),
                    *left,
                ),
                advice=tuple(advice),
            )
        others = [r[0] for r in await conn.fetch(_SQL["others_may_create"], host_schema)]
        if others:
            advice.append(
                f"roles other than its owner may create objects in the host's schema "
                f"{host_schema} ({', '.join(others)}): stall-nudge resolves nothing there, "
                "but other code may (REVOKE CREATE ON SCHEMA ... FROM ...)"
            )
        if not todo.compared:
            advice.append("this role may not create temporary tables: definitions not compared")
        if todo.unread_name is not None:
            advice.append(
                f"the host's endpoints.{ENDPOINT_NAME} is of type {todo.unread_name}, not one of "
                "PostgreSQL's own: its text form could run another role's code, so status "
                "shows endpoint ids alone"
            )
    problems = [*todo.problems, *(f"for a DBA: {sql}" for sql in todo.for_dba)]
    if todo.steps:
        problems.append("stall-nudge migrate repairs these")
    return CheckReport(problems=tuple(problems), advice=tuple(advice))
