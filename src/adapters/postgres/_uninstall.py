"""Removing every trace: our objects, on our schema and the host's tables, and the grants given.

The host's rows stay as they are, and so do the privileges its roles held
before ``--grant``: only what migrate recorded giving is revoked. ``uninstall_plan`` is what
``migrate --uninstall --print-sql`` prints; ``uninstall`` runs it.
"""

from __future__ import annotations

from adapters.postgres.sql import queries

from ._catalog import guest_session, objects
from ._grants import recorded_revokes
from ._manifest import HOST_TABLES, OUR_SCHEMA, PREFIX
from ._migrate import PROGRESS_EVERY, Say, run_plan
from ._steps import (
    RELATION_KINDS,
    Plan,
    Step,
    drop_host_index,
    drop_object,
    drop_trigger,
)
from ._types import Connection

__all__ = [
    "uninstall",
    "uninstall_plan",
]

_SQL = queries("adapters.postgres", "migrate.sql")


async def uninstall_plan(conn: Connection) -> Plan:
    """What ``uninstall`` would run: every object of ours and every grant recorded, nothing else."""
    async with guest_session(conn, lock=False) as host_schema:
        return await _uninstall_plan(conn, host_schema)


async def _uninstall_plan(conn: Connection, host_schema: str) -> Plan:
    spaces = await conn.fetchrow(_SQL["namespaces"], host_schema)
    assert spaces is not None  # one row
    present = await objects(conn, spaces["ours"], spaces["host"])
    steps: list[Step] = []
    for kind, name, on_table in sorted(present):
        if kind == "index" and on_table in HOST_TABLES:
            steps.append(
                Step(
                    sql=drop_host_index(name, host_schema),
                    why="uninstall: our indexes on the host's tables",
                    phase="before",
                )
            )
        elif kind == "trigger" and on_table in HOST_TABLES:
            steps.append(
                Step(
                    sql=drop_trigger(name, on_table, host_schema),
                    why="uninstall: our triggers on the host's tables",
                    phase="before",
                    locks_host=True,
                )
            )
    if ("table", "grants", "") in present:
        recorded = {r["role"]: r["given"] for r in await conn.fetch(_SQL["recorded_grants"])}
        steps += recorded_revokes(recorded, host_schema)
    for kind, name, on_table in sorted(present):
        if kind in ("function", *RELATION_KINDS) and name.startswith(PREFIX):
            steps.append(
                Step(
                    sql=drop_object(kind, name, on_table, host_schema),
                    why="uninstall: an earlier build's objects in the host's schema",
                )
            )
    if spaces["ours"] is not None:
        steps.append(
            Step(
                sql=f"DROP SCHEMA IF EXISTS {OUR_SCHEMA} CASCADE",
                why="uninstall: our schema and its tables",
            )
        )
    return Plan(steps=tuple(steps), command="migrate --uninstall")


async def uninstall(conn: Connection, *, say: Say | None = None) -> tuple[str, ...]:
    """Remove every object stall-nudge made and revoke its grants; return what went."""
    tell: Say = say if say is not None else (lambda _line: None)
    async with guest_session(conn, lock=True) as host_schema:
        todo = await _uninstall_plan(conn, host_schema)
        await run_plan(conn, todo, None, tell, PROGRESS_EVERY)
    for line in todo.problems:
        tell(f"removed: {line.removeprefix('uninstall: ')}")
    return todo.problems
