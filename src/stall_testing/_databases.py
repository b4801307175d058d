"""Throwaway databases for the demo and the tests: DSN rewriting, create and drop."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

__all__ = ["create_database", "drop_database", "with_database"]


def with_database(dsn: str, database: str) -> str:
    """The same server DSN, naming another database (query options such as host= kept)."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


def _ident(name: str) -> str:
    # CREATE/DROP DATABASE take no parameters; quote the name as an identifier.
    return '"' + name.replace('"', '""') + '"'


async def create_database(dsn: str, name: str, *, template: str | None = None) -> None:
    """CREATE DATABASE ``name`` on the server of ``dsn`` (optionally cloning ``template``)."""
    conn = await asyncpg.connect(dsn)
    try:
        clause = f" TEMPLATE {_ident(template)}" if template else ""
        await conn.execute(f"CREATE DATABASE {_ident(name)}{clause}")
    finally:
        await conn.close()


async def drop_database(dsn: str, name: str) -> None:
    """DROP DATABASE ``name`` if it exists, disconnecting anyone still on it."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)")
    finally:
        await conn.close()
