"""The privileges a sweeping role needs: what a role lacks, and the grants that give them.

``migrate --grant ROLE`` records the role; every later plan grants a
recorded role what it lacks, and ``uninstall`` revokes what was given.
A grant on the host's tables this role may not give goes to a DBA.
"""

from __future__ import annotations

from adapters.postgres.sql import queries, quote_ident

from ._catalog import MigrationError, recorded_schema
from ._manifest import SWEEPER_PRIVILEGES, Privilege, on_host, qualified
from ._steps import Step, literal
from ._types import Connection

__all__ = [
    "grant_statement",
    "missing_privileges",
    "plan_grants",
]

_SQL = queries("adapters.postgres", "migrate.sql")


def _entries(privilege: Privilege, host_schema: str) -> list[str]:
    """One privilege as ``has_privileges`` reads it: "kind|target|column|privilege" each."""
    target = qualified(privilege.target, host_schema)
    if privilege.kind == "schema":
        name = host_schema if privilege.target == "@" else privilege.target
        return [f"schema|{name}||{p}" for p in privilege.privileges]
    if privilege.kind == "table":
        return [f"table|{target}||{p}" for p in privilege.privileges]
    return [f"column|{target}|{c}|{p}" for p in privilege.privileges for c in privilege.columns]


def grant_statement(
    privilege: Privilege, role: str, host_schema: str, *, revoke: bool = False
) -> str:
    """The GRANT (or REVOKE) statement of one privilege for ``role``."""
    target = qualified(privilege.target, host_schema)
    columns = ", ".join(quote_ident(c) for c in privilege.columns)
    privileges = ", ".join(
        f"{p} ({columns})" if privilege.kind == "columns" else p for p in privilege.privileges
    )
    what = f"SCHEMA {target}" if privilege.kind == "schema" else f"TABLE {target}"
    if revoke:
        return f"REVOKE {privileges} ON {what} FROM {quote_ident(role)}"
    return f"GRANT {privileges} ON {what} TO {quote_ident(role)}"


async def missing_privileges(conn: Connection, role: str | None = None) -> list[str]:
    """What ``role`` (this session's by default) lacks of a sweeping role's privileges, one each.

    Each line names the privilege and its object, as a DBA grants it. USAGE
    on a schema comes first: without it nothing in the schema can be asked.
    The host's schema is the one migrate recorded, else the caller's
    search_path finds.
    """
    host_schema = await recorded_schema(conn) or await conn.fetchval(_SQL["host_schema"])
    if host_schema is None:
        return []  # no host tables to ask about: missing_tables says so
    lacking = await _lacking(conn, role, host_schema)
    return [_describe(entry) for p in SWEEPER_PRIVILEGES for entry in lacking.get(p, [])]


async def _lacking(
    conn: Connection, role: str | None, host_schema: str
) -> dict[Privilege, list[str]]:
    """The entries of each privilege ``role`` lacks (only privileges with one lacking).

    Schemas are asked about first: when USAGE on one is lacking, that is all
    there is to say (a table in it cannot even be looked up).
    """
    who = role if role is not None else await conn.fetchval("SELECT current_user")
    wanted = {e: p for p in SWEEPER_PRIVILEGES for e in _entries(p, host_schema)}
    lacking: dict[Privilege, list[str]] = {}
    for schemas in (True, False):
        asked = [e for e in wanted if e.startswith("schema|") == schemas]
        for row in await conn.fetch(_SQL["has_privileges"], who, asked):
            lacking.setdefault(wanted[row["p"]], []).append(row["p"])
        if lacking:
            break
    return lacking


def _describe(entry: str) -> str:
    kind, target, column, privilege = entry.split("|")
    if kind == "schema":
        return f"{privilege} on schema {target}"
    if kind == "table":
        return f"{privilege} on {target}"
    return f"{privilege} ({column}) on {target}"


async def plan_grants(
    conn: Connection, host_schema: str, *, ready: bool, grant: str | None
) -> tuple[list[Step], list[str]]:
    """Grants for ``grant`` (a sweeping role to be) and for each recorded role that lacks some.

    ``ready``: our tables are there to ask about; otherwise a new role gets
    every grant after the migrations that make them. A grant on the host's
    tables this role may not give goes to the DBA's list instead.
    """
    recorded: list[str] = []
    if ready:
        recorded = [r["role"] for r in await conn.fetch(_SQL["recorded_grants"])]
    roles = list(recorded)
    if grant is not None:
        if not await conn.fetchval(_SQL["role_exists"], grant):
            raise MigrationError(f"role {grant!r} does not exist: create it first (CREATE ROLE)")
        if grant not in roles:
            roles.append(grant)
    steps: list[Step] = []
    for_dba: list[str] = []
    for role in roles:
        lacking = await _lacking(conn, role, host_schema) if ready else {}
        if not ready or any(p.kind == "schema" for p in lacking):
            # Nothing of ours to ask about yet, or a schema the role may not use (nothing in
            # it can be asked about): every grant, each harmless when already held.
            lacking = {p: _entries(p, host_schema) for p in SWEEPER_PRIVILEGES}
        named = ", ".join(_describe(e) for p in SWEEPER_PRIVILEGES for e in lacking.get(p, []))
        why = f"grants: role {role} lacks {named}" if named else f"grants: record role {role}"
        for privilege in SWEEPER_PRIVILEGES:
            if privilege not in lacking:
                continue
            sql = grant_statement(privilege, role, host_schema)
            if on_host(privilege.target) and not await _may_grant(conn, privilege, host_schema):
                for_dba.append(sql)
            else:
                steps.append(Step(sql=sql, why=why))
        if role not in recorded:
            steps.append(
                Step(
                    sql="INSERT INTO stall_nudge.grants (role, granted_at) "
                    f"VALUES ({literal(role)}, now()) ON CONFLICT (role) DO NOTHING",
                    why=why,
                )
            )
    return steps, for_dba


async def _may_grant(conn: Connection, privilege: Privilege, host_schema: str) -> bool:
    """Whether this role may give ``privilege`` on the host's schema or table."""
    if privilege.kind == "schema":
        return bool(
            await conn.fetchval(
                "SELECT has_schema_privilege(current_user, $1, 'USAGE WITH GRANT OPTION')"
                " OR pg_has_role(current_user, (SELECT nspowner FROM pg_namespace"
                " WHERE nspname = $1), 'USAGE')",
                host_schema,
            )
        )
    target = qualified(privilege.target, host_schema)
    for p in privilege.privileges:
        if not await conn.fetchval(
            "SELECT has_table_privilege(current_user, $1::regclass, $2)",
            target,
            f"{p} WITH GRANT OPTION",
        ):
            return False
    return True
