"""Running a plan: serialised across processes, index builds concurrent, host locks short.

``migrate`` takes the migrations' advisory lock, plans, and runs the plan
in its three phases: statements outside any transaction first (index
builds with their progress, trigger drops each under a short lock timeout,
tried again), then one transaction, then concurrent index drops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import attrs

from adapters.postgres.sql import queries, script

from ._catalog import MigrationError, guest_session
from ._plan import make_plan
from ._steps import LOCK_TIMEOUT, SCHEMA_VERSION, Plan, Step
from ._types import Connection

__all__ = [
    "HOST_ID_TYPES",
    "PROGRESS_EVERY",
    "MigrationReport",
    "Say",
    "host_schema_sql",
    "migrate",
    "run_plan",
]

_SQL = queries("adapters.postgres", "migrate.sql")

#: Id types the reference host schema can be built with (a real host may use any type
#: with a text form; these are the ones the suite runs on).
HOST_ID_TYPES = ("text", "varchar", "uuid", "bigint")

#: How often a long index build reports its progress, in seconds.
PROGRESS_EVERY = 5.0

#: How many times a statement that locks a host table is tried, each waiting LOCK_TIMEOUT.
LOCK_TRIES = 100

#: Where ``migrate`` says what it does, a line at a time (the CLI prints it).
Say = Callable[[str], None]


@attrs.frozen(kw_only=True)
class MigrationReport:
    """What a migrate run did: the problems it repaired, and what it left for a DBA."""

    version: int
    repaired: tuple[str, ...]
    used: tuple[tuple[str, str], ...]
    for_dba: tuple[str, ...] = ()
    #: For the role ``grant`` named: (role, how many of its privileges it already held).
    held: tuple[tuple[str, int], ...] = ()


def _done(problem: str) -> str:
    """What was done about ``problem``, as a line: a first install creates, a later one repairs."""
    for found, done in (("missing: ", "created "), ("migrations not applied: ", "applied ")):
        if problem.startswith(found):
            return done + problem.removeprefix(found)
    if problem.startswith("grants: role ") and " lacks " in problem:
        role, _, privilege = problem.removeprefix("grants: role ").partition(" lacks ")
        return f"granted {privilege} to {role}"
    if problem.startswith("grants: record role "):
        return f"recorded {problem.removeprefix('grants: record ')} as a sweeping role"
    return f"repaired {problem}"


def host_schema_sql(id_type: str = "text") -> str:
    """The reference host schema (demos and tests) with ids of ``id_type``."""
    if id_type not in HOST_ID_TYPES:
        raise ValueError(f"host id type must be one of {', '.join(HOST_ID_TYPES)}: {id_type!r}")
    text = script("adapters.postgres", "host_schema.sql")
    return text.replace("text /* id type */", f"{id_type} /* id type */")


async def migrate(
    conn: Connection,
    *,
    host_schema: bool = False,
    host_id_type: str = "text",
    schema: str | None = None,
    grant: str | None = None,
    monitor: Connection | None = None,
    say: Say | None = None,
    progress_every: float = PROGRESS_EVERY,
) -> MigrationReport:
    """Bring this database to this build: run ``plan``, serialised across processes.

    Index builds on the host's tables run concurrently first (their progress
    goes to ``say`` every ``progress_every`` seconds when a second
    connection, ``monitor``, is given), then one transaction, then
    concurrent drops. With ``host_schema`` the reference host tables are
    created first (demos and tests). ``schema`` names the host's schema
    where more than one holds its tables (else the one recorded, or the only
    one). Grants this role may not give on the host's tables are in the
    report's ``for_dba``, not run; a privilege the role already held is
    neither granted nor recorded.
    """
    tell: Say = say if say is not None else (lambda _line: None)
    if host_schema:
        async with conn.transaction():
            await conn.execute(host_schema_sql(host_id_type))
    async with guest_session(conn, lock=True, schema=schema) as found:
        todo = await make_plan(conn, found, grant=grant)
        await run_plan(conn, todo, monitor, tell, progress_every)
    for line in todo.problems:
        tell(_done(line))
    for ours, theirs in todo.used:
        tell(f"uses the host's index {theirs} instead of building {ours}")
    for role, held in todo.held:
        tell(f"{role} already held {held} of the {todo.needed} privileges it needs")
    return MigrationReport(
        version=SCHEMA_VERSION,
        repaired=todo.problems,
        used=todo.used,
        for_dba=todo.for_dba,
        held=todo.held,
    )


async def run_plan(
    conn: Connection, todo: Plan, monitor: Connection | None, say: Say, every: float
) -> None:
    for step in (s for s in todo.steps if s.phase == "before"):
        if step.locks_host:
            await _with_short_lock(conn, step.sql, say)
        elif step.index is not None:
            await _build_index(conn, step, monitor, say, every)
        else:
            await conn.execute(step.sql)
    transactional = [s for s in todo.steps if s.phase == "transaction"]
    if transactional:
        async with conn.transaction():
            for step in transactional:
                await conn.execute(step.sql)
    for step in (s for s in todo.steps if s.phase == "after"):
        await conn.execute(step.sql)


async def _with_short_lock(conn: Connection, sql: str, say: Say) -> None:
    """Run a statement that locks a host table, waiting at most LOCK_TIMEOUT each try."""
    for attempt in range(1, LOCK_TRIES + 1):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                await conn.execute(sql)
            return
        except asyncpg.LockNotAvailableError:
            say(f"the host's table is busy (try {attempt} of {LOCK_TRIES}): {sql}")
            await asyncio.sleep(min(attempt * 0.05, 1.0))
    raise MigrationError(
        f"could not take the lock for {sql!r} in {LOCK_TRIES} tries of {LOCK_TIMEOUT}: "
        "the host's writes hold it; nothing after it was run"
    )


async def _build_index(
    conn: Connection, step: Step, monitor: Connection | None, say: Say, every: float
) -> None:
    """Build one index concurrently, reporting progress; refuse a result left invalid."""
    build = asyncio.ensure_future(conn.execute(step.sql))
    pid = conn.get_server_pid()
    while not build.done():
        done, _ = await asyncio.wait({build}, timeout=every)
        if not done and monitor is not None:
            row = await monitor.fetchrow(_SQL["index_progress"], pid)
            if row is not None:
                say(
                    f"index {step.index}: {row['phase']}, "
                    f"blocks {row['blocks_done']}/{row['blocks_total']}, "
                    f"tuples {row['tuples_done']}/{row['tuples_total']}"
                )
    await build
    if not await conn.fetchval(
        "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)", step.index
    ):
        raise MigrationError(
            f"index {step.index} is invalid after its build (see the server log); "
            "run stall-nudge migrate again"
        )
