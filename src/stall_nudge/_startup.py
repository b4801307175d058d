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
    SCHEMA_VERSION,
    Installed,
    as_guest,
    describe,
    installed,
    missing_privileges,
    missing_tables,
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
                # What the embedder's search_path finds, then as a guest.
                missing = await missing_tables(conn)
                lacking = await missing_privileges(conn)
                await as_guest(conn)
                schema = None if missing or lacking else await installed(conn)
    except TimeoutError:
        raise StartupError(f"the start-up check timed out after {format_seconds(within)}") from None
    except DATABASE_ERRORS as exc:
        raise StartupError(f"the start-up check failed: {describe(exc)}") from None
    host = [t for t in missing if t in HOST_TABLES]
    if host:
        raise StartupError(
            f"host tables missing: {', '.join(host)} "
            "(for a demo or test database: stall-nudge migrate --host-schema)"
        )
    if lacking:
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        raise StartupError(
            f"this role lacks {lacking[0]}{more}: a DBA grants a sweeping role what it needs "
            "with stall-nudge migrate --grant ROLE"
        )
    if missing:
        raise StartupError(
            f"stall-nudge's own tables missing: {', '.join(missing)} (run stall-nudge migrate)"
        )
    if schema is None or schema.version < SCHEMA_VERSION:
        raise StartupError(
            f"schema version {0 if schema is None else schema.version}, this build needs "
            f"{SCHEMA_VERSION} (run stall-nudge migrate)"
        )
    return schema
