"""Test PostgreSQL: the server at STALL_TEST_DSN, else a throwaway embedded one.

One template database per session holds the migrated schema; each test gets
a fresh clone (CREATE DATABASE ... TEMPLATE), which takes milliseconds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

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


__all__ = [
    "create_database",
    "drop_database",
    "test_server",
    "unique_name",
    "with_database",
    "with_user",
]
