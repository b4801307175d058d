"""The privileges a sweeping role needs: what a role lacks, and the grants that give them.

``migrate --grant ROLE`` grants ROLE each privilege it lacks (held neither
directly, nor through PUBLIC, nor through a role it belongs to) and records
exactly those; ``uninstall`` revokes exactly those on the host's objects
(ours go with our objects). A privilege the role already held is the
host's: never recorded, never revoked. A grant on the host's objects this
role may not give goes to a DBA.

A privilege is written "kind|target|column|privilege", its target as
``Privilege.target`` has it (the host's ``@`` and ``@todos``, ours
qualified): so the record holds whichever schema the host's tables are in.

SELECT on the host's endpoint names is needed exactly where our view of
endpoints reads them: migrate asks whether the host has them (the view it
makes will), the start-up check whether the view reads them now.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from adapters.postgres.sql import queries, quote_ident

from ._catalog import MigrationError
from ._manifest import (
    ENDPOINT_NAME_PRIVILEGE,
    SWEEPER_PRIVILEGES,
    Privilege,
    on_host,
    qualified,
)
from ._steps import Step, literal
from ._types import Connection

__all__ = [
    "NAME_ENTRY",
    "SWEEPER_ENTRIES",
    "describe_entry",
    "grant_statement",
    "missing_privileges",
    "plan_grants",
    "recorded_revokes",
    "sweeper_entries",
]

_SQL = queries("adapters.postgres", "migrate.sql")


def _entries(privileges: Sequence[Privilege]) -> tuple[str, ...]:
    return tuple(
        f"{p.kind.removesuffix('s')}|{p.target}|{column}|{privilege}"
        for p in privileges
        for privilege in p.privileges
        for column in (p.columns or ("",))
    )


#: Every privilege a sweeping role needs, one each, in SWEEPER_PRIVILEGES order (schemas first).
SWEEPER_ENTRIES: tuple[str, ...] = _entries(SWEEPER_PRIVILEGES)
#: SELECT on the host's endpoint names (``ENDPOINT_NAME_PRIVILEGE``).
(NAME_ENTRY,) = _entries((ENDPOINT_NAME_PRIVILEGE,))
_AFTER = 1 + max(i for i, e in enumerate(SWEEPER_ENTRIES) if e.split("|")[1] == "@endpoints")
_NAMED = (*SWEEPER_ENTRIES[:_AFTER], NAME_ENTRY, *SWEEPER_ENTRIES[_AFTER:])


def sweeper_entries(endpoint_name: bool) -> tuple[str, ...]:
    """Every privilege a sweeping role needs where our view of endpoints reads the host's
    name (``endpoint_name``) or not: SWEEPER_ENTRIES, and NAME_ENTRY after endpoints' own."""
    return _NAMED if endpoint_name else SWEEPER_ENTRIES


def _concrete(entry: str, host_schema: str) -> str:
    """``entry`` as ``has_privileges`` asks about it: the target named in SQL."""
    kind, target, column, privilege = entry.split("|")
    named = host_schema if target == "@" else target
    if kind != "schema":
        named = qualified(target, host_schema)
    return f"{kind}|{named}|{column}|{privilege}"


def describe_entry(entry: str, host_schema: str) -> str:
    """One privilege as a DBA grants it: ``SELECT (id) on "sb"."todos"``."""
    kind, target, column, privilege = _concrete(entry, host_schema).split("|")
    if kind == "schema":
        return f"{privilege} on schema {target}"
    if kind == "table":
        return f"{privilege} on {target}"
    return f"{privilege} ({column}) on {target}"


def grant_statement(entry: str, role: str, host_schema: str, *, revoke: bool = False) -> str:
    """The GRANT (or REVOKE) of one privilege for ``role``."""
    kind, target, column, privilege = entry.split("|")
    what = f"{privilege} ({quote_ident(column)})" if kind == "column" else privilege
    on = f"SCHEMA {qualified(target, host_schema)}" if kind == "schema" else "TABLE "
    if kind != "schema":
        on += qualified(target, host_schema)
    if revoke:
        return f"REVOKE {what} ON {on} FROM {quote_ident(role)}"
    return f"GRANT {what} ON {on} TO {quote_ident(role)}"


async def _lacking(
    conn: Connection, role: str, host_schema: str, asked: Sequence[str]
) -> list[str]:
    """The entries of ``asked`` that ``role`` holds neither directly, via PUBLIC nor a group."""
    concrete = {_concrete(e, host_schema): e for e in asked}
    rows = await conn.fetch(_SQL["has_privileges"], role, list(concrete))
    lacking = {concrete[r["p"]] for r in rows}
    return [e for e in asked if e in lacking]


async def missing_privileges(conn: Connection, host_schema: str | None) -> list[str]:
    """What this session's role lacks of a sweeping role's privileges, one line each.

    USAGE on a schema comes first, alone: a table in a schema the role may
    not use cannot even be looked up. ``host_schema`` is the one migrate
    recorded (``recorded_schema``); without one (no record, or this role may
    not read it) only our objects are asked about.
    """
    who: str = await conn.fetchval("SELECT pg_catalog.current_user()")
    named = host_schema is not None and bool(await conn.fetchval(_SQL["view_reads_name"]))
    entries = [
        e
        for e in sweeper_entries(named)
        if host_schema is not None or not _target(e).startswith("@")
    ]
    schema = "" if host_schema is None else host_schema
    for schemas in (True, False):
        asked = [e for e in entries if e.startswith("schema|") == schemas]
        lacking = await _lacking(conn, who, schema, asked)
        if lacking:
            return [describe_entry(e, schema) for e in lacking]
    return []


def _target(entry: str) -> str:
    return entry.split("|")[1]


async def plan_grants(
    conn: Connection,
    host_schema: str,
    *,
    grant: str | None,
    recorded: Mapping[str, Collection[str]],
    absent: Collection[str],
    endpoint_name: bool = False,
) -> tuple[list[Step], list[str], tuple[tuple[str, int], ...]]:
    """Grants for ``grant`` (a sweeping role to be) and for each ``recorded`` role that lacks some.

    ``recorded``: the roles migrate recorded and what it gave each.
    ``absent``: targets of ours the plan creates (none of their privileges is
    held yet). ``endpoint_name``: whether our view of endpoints will read the
    host's name (``sweeper_entries``). Returns the steps (each privilege its own GRANT, then the
    record of what was given), the grants on the host's objects this role may
    not give (for a DBA), and (role, how many it already held) for ``grant``.
    """
    roles = list(recorded)
    if grant is not None:
        await _refuse_unfit(conn, grant)
        if grant not in roles:
            roles.append(grant)
    steps: list[Step] = []
    for_dba: list[str] = []
    held: tuple[tuple[str, int], ...] = ()
    needed = sweeper_entries(endpoint_name)
    for role in roles:
        present = [e for e in needed if _target(e) not in absent]
        lacking = [
            *(e for e in needed if _target(e) in absent),
            *await _lacking(conn, role, host_schema, present),
        ]
        lacking.sort(key=needed.index)
        if role == grant:
            held = ((role, len(needed) - len(lacking)),)
        not_mine = await _not_grantable(
            conn, host_schema, [e for e in lacking if on_host(_target(e))]
        )
        given = []
        for entry in lacking:
            sql = grant_statement(entry, role, host_schema)
            if entry in not_mine:
                for_dba.append(sql)
                continue
            why = f"grants: role {role} lacks {describe_entry(entry, host_schema)}"
            steps.append(Step(sql=sql, why=why))
            given.append(entry)
        if given or role not in recorded:
            array = "ARRAY[" + ", ".join(literal(e) for e in given) + "]::text[]"
            steps.append(
                Step(
                    sql="INSERT INTO stall_nudge.grants AS g (role, given, granted_at) "
                    f"VALUES ({literal(role)}, {array}, now()) ON CONFLICT (role) DO UPDATE "
                    "SET given = ARRAY(SELECT DISTINCT e FROM unnest(g.given || EXCLUDED.given) "
                    "AS e ORDER BY e)",
                    why=steps[-1].why if given else f"grants: record role {role}",
                )
            )
    return steps, for_dba, held


async def _refuse_unfit(conn: Connection, role: str) -> None:
    """A role --grant may not be given: none, a superuser, or one of PostgreSQL's own."""
    row = await conn.fetchrow(_SQL["role_kind"], role)
    if row is None:
        raise MigrationError(f"role {role!r} does not exist: create it first (CREATE ROLE)")
    if row["predefined"]:
        raise MigrationError(
            f"role {role!r} is one of PostgreSQL's predefined roles: grant a login role of "
            "the sweep's own instead"
        )
    if row["superuser"]:
        raise MigrationError(
            f"role {role!r} is a superuser: it needs no grant, and a sweep should not run as "
            "one; grant a login role of the sweep's own instead"
        )


async def _not_grantable(conn: Connection, host_schema: str, entries: list[str]) -> set[str]:
    """Which of ``entries`` (on the host's objects) this role may not give."""
    if not entries:
        return set()
    concrete = {_concrete(e, host_schema): e for e in entries}
    rows = await conn.fetch(_SQL["not_grantable"], list(concrete))
    return {concrete[r["p"]] for r in rows}


def recorded_revokes(recorded: Mapping[str, Collection[str]], host_schema: str) -> list[Step]:
    """The REVOKE of each privilege on the host's objects that migrate gave and recorded."""
    return [
        Step(
            sql=grant_statement(entry, role, host_schema, revoke=True),
            why=f"uninstall: the privileges granted to role {role}",
        )
        for role, given in recorded.items()
        for entry in sorted(given, key=_order)
        if on_host(_target(entry))
    ]


def _order(entry: str) -> int:
    return _NAMED.index(entry) if entry in _NAMED else len(_NAMED)
