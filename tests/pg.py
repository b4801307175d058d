"""Test PostgreSQL: the server at STALL_TEST_DSN, else a throwaway embedded one.

One template database per session holds the migrated schema; each test gets
a fresh clone (CREATE DATABASE ... TEMPLATE), which takes milliseconds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from adapters.postgres import embedded_postgres


@contextmanager
def test_server() -> Iterator[str]:
    """The DSN of the server tests use: STALL_TEST_DSN when set, else an embedded one."""
    dsn = os.environ.get("STALL_TEST_DSN")
    if dsn:
        yield dsn
    else:
        with embedded_postgres() as embedded:
            yield embedded


def with_database(dsn: str, database: str) -> str:
    """The same server DSN, naming another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


async def create_database(dsn: str, name: str, *, template: str | None = None) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await conn.close()


async def drop_database(dsn: str, name: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
