"""Test PostgreSQL: the server at STALL_TEST_DSN, else a throwaway embedded one.

One template database per session holds the migrated schema; each test gets
a fresh clone (CREATE DATABASE ... TEMPLATE), which takes milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from stall_testing import create_database, drop_database, embedded_postgres, with_database


@contextmanager
def test_server() -> Iterator[str]:
    """The DSN of the server tests use: STALL_TEST_DSN when set, else an embedded one."""
    dsn = os.environ.get("STALL_TEST_DSN")
    if dsn:
        yield dsn
    else:
        with embedded_postgres() as embedded:
            yield embedded


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def with_user(dsn: str, user: str) -> str:
    """The same DSN, logging in as ``user`` with no password (the test server trusts loopback)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{host}"))


@asynccontextmanager
async def login_role(
    server_dsn: str, db_dsn: str, prefix: str = "stall_role"
) -> AsyncIterator[tuple[str, str]]:
    """A throwaway LOGIN role, granted nothing: yields its (unique) name and ``db_dsn`` as it.

    On exit it drops what the role owns or was granted in ``db_dsn``'s database
    (so that database must still exist), then the role itself.
    """
    role = unique_name(prefix)
    server = await asyncpg.connect(server_dsn)
    try:
        await server.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            yield role, with_user(db_dsn, role)
        finally:
            conn = await asyncpg.connect(db_dsn)
            try:
                await conn.execute(f'DROP OWNED BY "{role}"')
            finally:
                await conn.close()
            await server.execute(f'DROP ROLE "{role}"')
    finally:
        await server.close()


#: Every schema, relation, function and trigger of ours, by name.
OURS = """
SELECT nspname AS name FROM pg_namespace WHERE nspname = 'stall_nudge'
UNION ALL
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'stall_nudge' OR c.relname LIKE 'stall\\_nudge%'
    OR c.relname = 'queue_stall_nudges'
UNION ALL
SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'stall_nudge' OR p.proname LIKE 'stall\\_nudge%'
UNION ALL
SELECT tgname FROM pg_trigger WHERE tgname LIKE 'stall\\_nudge\\_%'
"""


async def ours(db: asyncpg.Connection | str) -> set[str]:
    """Every schema, relation, function and trigger of ours by name, on a connection or a DSN."""
    if isinstance(db, str):
        conn = await asyncpg.connect(db)
        try:
            return await ours(conn)
        finally:
            await conn.close()
    return {r["name"] for r in await db.fetch(OURS)}


async def psql_file(dsn: str, sql: str, tmp_path: Path) -> tuple[int | None, bytes]:
    """Apply ``sql`` by hand, as docs/host-schema.md offers: psql -f, stopping at an error.

    Returns psql's exit status and what it wrote on stderr; skips the test where
    psql is not installed.
    """
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    script = tmp_path / "printed.sql"
    script.write_text(sql)
    proc = await asyncio.create_subprocess_exec(
        psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(script),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, errors = await asyncio.wait_for(proc.communicate(), 600)
    return proc.returncode, errors


__all__ = [
    "create_database",
    "drop_database",
    "login_role",
    "ours",
    "psql_file",
    "test_server",
    "unique_name",
    "with_database",
    "with_user",
]
