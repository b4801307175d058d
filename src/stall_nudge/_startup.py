"""Whether a database can be swept, asked once at start: a refusal is one line naming the fix.

A sweep on a database without the host's tables, ours, or a privilege it
needs would fail every tick with the same error; refusing at start says
what is missing and what to run, before the loop begins.
"""

from __future__ import annotations

import asyncio

import asyncpg

from adapters.postgres import (
    DATABASE_ERRORS,
    HOST_TABLES,
    OUR_TABLES,
    SCHEMA_VERSION,
    Installed,
    as_guest,
    describe,
    installed,
    missing_privileges,
    missing_tables,
    recorded_schema,
)
from stall_core import format_seconds

__all__ = ["StartupError", "check_database"]


class StartupError(Exception):
    """The database cannot be used: a one-line reason that never quotes a password."""


async def check_database(pool: asyncpg.Pool, within: float) -> Installed:
    """Refuse a database that lacks the host's tables, ours, or a privilege the sweep needs.

    Returns the schema version and host schema the database records, for
    the start-up line.
    """
    try:
        async with asyncio.timeout(within):
            async with pool.acquire() as conn, conn.transaction():
                # The host's tables where migrate recorded them, whatever the search_path.
                await as_guest(conn)
                recorded = await recorded_schema(conn)
                missing = await missing_tables(conn, recorded)
                lacking = await missing_privileges(conn, recorded)
                schema = None if missing or lacking else await installed(conn)
    except TimeoutError:
        raise StartupError(f"the start-up check timed out after {format_seconds(within)}") from None
    except DATABASE_ERRORS as exc:
        raise StartupError(f"the start-up check failed: {describe(exc)}") from None
    host = [t for t in missing if t in HOST_TABLES]
    if host and recorded is not None:
        raise StartupError(
            f"host tables missing in schema {recorded}, the one migrate recorded: "
            f"{', '.join(host)} (if switchboard's tables moved, a DBA runs "
            "stall-nudge migrate --schema NAME)"
        )
    if lacking:
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        raise StartupError(
            f"this role lacks {lacking[0]}{more}: a DBA grants a sweeping role what it needs "
            "with stall-nudge migrate --grant ROLE"
        )
    ours = [t for t in missing if t not in HOST_TABLES]
    if recorded is None and len(ours) == len(OUR_TABLES):
        raise StartupError(
            "stall-nudge is not installed in this database (run stall-nudge migrate)"
        )
    if recorded is None or ours:
        raise StartupError(
            "stall-nudge's own tables missing: "
            f"{', '.join(ours or ['the record of the host schema'])} (run stall-nudge migrate)"
        )
    if schema is None or schema.version < SCHEMA_VERSION:
        raise StartupError(
            f"schema version {0 if schema is None else schema.version}, this build needs "
            f"{SCHEMA_VERSION} (run stall-nudge migrate)"
        )
    return schema
