"""Test PostgreSQL: the server at STALL_TEST_DSN, else a throwaway embedded one.

One template database per session holds the migrated schema; each test gets
a fresh clone (CREATE DATABASE ... TEMPLATE), which takes milliseconds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

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


__all__ = [
    "create_database",
    "drop_database",
    "login_role",
    "test_server",
    "unique_name",
    "with_database",
    "with_user",
]
