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
async def roles(
    server_dsn: str, db_dsn: str, *specs: str, prefix: str = "stall_role"
) -> AsyncIterator[list[str]]:
    """Throwaway roles, one ``CREATE ROLE name <spec>`` each: yields their (unique) names.

    On exit it drops what each owns or was granted in ``db_dsn``'s database
    (so that database must still exist), then the roles themselves.
    """
    names = [unique_name(prefix) for _ in specs]
    server = await asyncpg.connect(server_dsn)
    try:
        for name, spec in zip(names, specs, strict=True):
            await server.execute(f'CREATE ROLE "{name}" {spec}')
        try:
            yield names
        finally:
            await execute(db_dsn, "".join(f'DROP OWNED BY "{n}" CASCADE;' for n in names))
            for name in reversed(names):
                await server.execute(f'DROP ROLE "{name}"')
    finally:
        await server.close()


@asynccontextmanager
async def login_role(
    server_dsn: str, db_dsn: str, prefix: str = "stall_role"
) -> AsyncIterator[tuple[str, str]]:
    """A throwaway LOGIN role, granted nothing: yields its name and ``db_dsn`` as it (``roles``)."""
    async with roles(server_dsn, db_dsn, "LOGIN", prefix=prefix) as [role]:
        yield role, with_user(db_dsn, role)


async def execute(dsn: str, sql: str) -> None:
    """Run ``sql`` (one or more statements) on a connection of its own."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


#: What a role that may CREATE in the host's schema plants for a varchar host: an ``=``,
#: ``>`` and ``<>`` for varchar, functions shadowing ones our statements call, and tables
#: named as ours. Every planted function raises: if any ran, its statement fails.
PLANT = """
CREATE FUNCTION public.planted(varchar, varchar) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.planted);
CREATE OPERATOR public.> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.planted);
CREATE OPERATOR public.<> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.planted);
CREATE FUNCTION public.md5(varchar) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE FUNCTION public.octet_length(varchar) RETURNS int LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE TABLE public.held (endpoint_id text, queue text, spent int, created_at timestamptz);
CREATE TABLE public.sweeps (swept_at timestamptz);
CREATE TABLE public.settings (host_schema text);
INSERT INTO public.settings VALUES ('elsewhere');
"""


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
    "PLANT",
    "create_database",
    "drop_database",
    "execute",
    "login_role",
    "ours",
    "psql_file",
    "roles",
    "test_server",
    "unique_name",
    "with_database",
    "with_user",
]
