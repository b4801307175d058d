"""Test PostgreSQL: the server at STALL_TEST_DSN, else a throwaway embedded one.

One template database per session and set-up; each test gets a fresh clone
(CREATE DATABASE ... TEMPLATE), which takes milliseconds. A set-up is a host
database as a DBA leaves it (``Site``): switchboard's tables in schema
``sb``, owned by a role of their own and on no role's search_path; the
host's application role already holding its grants there; a sweeping role
that reads the host through a group role; and a migrating role that is no
superuser. In ``planted``, a role with ordinary rights also acted before we
installed (``PLANT``). ``pg_dsn`` is the older, unrealistic shortcut: a
superuser's database with the host's tables in public.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import attrs
import pytest

from adapters.postgres import PostgresHooks, PostgresLedger, host_schema_sql, migrate
from stall_core import HookDirectory, LedgerPort, LedgerRow, PairKey
from stall_testing import (
    FakeClock,
    Operated,
    PostgresDriver,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)


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
    """A throwaway LOGIN role, granted nothing: yields its name and ``db_dsn`` as it.

    On exit it drops what the role owns or was granted in ``db_dsn``'s database
    (so that database must still exist), then the role.
    """
    role = unique_name(prefix)
    await execute(server_dsn, f'CREATE ROLE "{role}" LOGIN')
    try:
        yield role, with_user(db_dsn, role)
    finally:
        await execute(db_dsn, f'DROP OWNED BY "{role}" CASCADE')
        await execute(server_dsn, f'DROP ROLE "{role}"')


async def execute(dsn: str, sql: str) -> None:
    """Run ``sql`` (one or more statements) on a connection of its own."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


#: The host's schema in every set-up.
HOST_SCHEMA = "sb"
#: The set-ups a test's host database comes in; ``dba`` is every test's default.
SETUPS = ("dba", "planted")
#: A careless embedder's search_path: whatever is planted in public wins every tie.
CARELESS = "public, pg_catalog"

#: What a role with CREATE on public and on the host's schema plants before we install, for
#: a varchar host: an ``=``, ``>`` and ``<>`` for varchar, functions shadowing ones our
#: statements call, and tables under the names of ours (in public, and the ledger's in the
#: host's schema) that any role may read. Every planted function raises, and every planted
#: table holds a row its policy runs one on: if any of it ran or was read, the statement fails.
PLANT = """
CREATE FUNCTION public.planted(varchar, varchar) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'planted code ran'; END $$;
CREATE FUNCTION public.planted() RETURNS boolean LANGUAGE plpgsql
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
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['public.queue_stall_nudges', 'public.held', 'public.ticks',
                             'public.settings', 'public.host_todos', 'sb.queue_stall_nudges'] LOOP
        EXECUTE format('CREATE TABLE %s (x int)', t);
        EXECUTE format('INSERT INTO %s VALUES (1)', t);
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY planted ON %s USING (public.planted())', t);
        EXECUTE format('GRANT ALL ON %s TO PUBLIC', t);
    END LOOP;
END $$;
"""


@attrs.frozen(kw_only=True)
class Cast:
    """The roles that act on a host database, made once a session (their names unique to it).

    ``owner`` owns the host's schema and tables; ``app``, the host's
    application, already holds its grants there; ``sweeper`` reads the host
    through the group role ``readers``; ``migrator`` is no superuser, only a
    member of ``owner`` with CREATE on the database; ``planter`` has ordinary
    rights (in ``planted``, CREATE on public and on the host's schema).
    """

    owner: str
    app: str
    readers: str
    sweeper: str
    migrator: str
    planter: str


@attrs.frozen
class Pools:
    """A site's pools: the host's application, the sweeping role, a superuser (``admin``)."""

    host: asyncpg.Pool
    sweeper: asyncpg.Pool
    admin: asyncpg.Pool


@attrs.frozen(kw_only=True)
class Site:
    """A fresh host database in one set-up; ``dsn`` is a superuser's, for the test's own hand."""

    setup: str
    database: str
    dsn: str
    cast: Cast

    def as_role(self, role: str) -> str:
        return with_user(self.dsn, role)

    def host_pool(self) -> asyncpg.Pool:
        """A pool as the host's application, with the host's schema as its search_path."""
        return asyncpg.create_pool(
            self.as_role(self.cast.app),
            min_size=1,
            max_size=2,
            server_settings={"search_path": HOST_SCHEMA},
        )

    def sweeper_pool(self) -> asyncpg.Pool:
        """A pool as the sweeping role: its own search_path, in ``planted`` a careless one."""
        settings = {"search_path": CARELESS} if self.setup == "planted" else {}
        return asyncpg.create_pool(
            self.as_role(self.cast.sweeper), min_size=1, max_size=4, server_settings=settings
        )

    @asynccontextmanager
    async def pools(self) -> AsyncIterator[Pools]:
        """The host's application, the sweeping role, and a superuser for writes of ours."""
        async with (
            self.host_pool() as host,
            self.sweeper_pool() as sweeper,
            asyncpg.create_pool(
                self.dsn, min_size=1, max_size=1, server_settings={"search_path": HOST_SCHEMA}
            ) as admin,
        ):
            yield Pools(host, sweeper, admin)

    @asynccontextmanager
    async def driver(self, clock: FakeClock | None = None) -> AsyncIterator[SiteDriver]:
        """The host's verbs on its own pool, the ledger on the sweeping role's."""
        async with self.host_pool() as host, self.sweeper_pool() as sweeper:
            yield SiteDriver(host, sweeper, clock)

    @asynccontextmanager
    async def connect(self, role: str | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A connection as ``role`` (the migrating role, most often), else as the superuser."""
        conn = await asyncpg.connect(self.dsn if role is None else self.as_role(role))
        try:
            yield conn
        finally:
            await conn.close()


class SiteDriver(PostgresDriver):
    """The contract's board with the host and the sweep as different roles, on pools of their own.

    ``PostgresDriver`` runs both on one pool; a DBA's database gives them
    different rights and search_paths, so the ledger here is the sweeper's.
    """

    def __init__(
        self, host: asyncpg.Pool, sweeper: asyncpg.Pool, clock: FakeClock | None = None
    ) -> None:
        super().__init__(host, clock)
        self.sweeper = sweeper
        self.sweeping = PostgresLedger(sweeper, clock=self.clock)

    @property
    def ledger(self) -> LedgerPort:
        return self.sweeping

    @property
    def operated(self) -> Operated:
        """The operator's verbs as the sweeping role: it holds every grant they need."""
        return self.sweeping

    @property
    def hooks(self) -> HookDirectory:
        """The hooks' health as the sweeping role books it."""
        return PostgresHooks(self.sweeper, ttl=0)

    def hold_tick(self) -> AbstractAsyncContextManager[None]:
        return self.sweeping.hold_tick()

    async def ledger_rows(self) -> Mapping[PairKey, LedgerRow]:
        return await self.sweeping.ledger_rows()


class Sites:
    """The session's cast, a template per set-up (built on first use), and a clone per test."""

    def __init__(self, server: str, cast: Cast) -> None:
        self.server = server
        self.cast = cast
        self._templates: dict[tuple[str, bool], str] = {}

    @classmethod
    async def start(cls, server: str) -> Sites:
        cast = Cast(**{f.name: unique_name(f"stall_{f.name}") for f in attrs.fields(Cast)})
        roles = "".join(
            f'CREATE ROLE "{n}" {"NOLOGIN" if n in (cast.owner, cast.readers) else "LOGIN"};'
            for n in attrs.astuple(cast)
        )
        await execute(
            server,
            f'{roles} GRANT "{cast.readers}" TO "{cast.sweeper}";'
            f' GRANT "{cast.owner}" TO "{cast.migrator}"',
        )
        return cls(server, cast)

    async def close(self) -> None:
        """Drop the templates, then the cast (every clone is gone by now)."""
        for name in self._templates.values():
            await drop_database(self.server, name)
        await execute(self.server, "".join(f'DROP ROLE "{n}";' for n in attrs.astuple(self.cast)))

    @asynccontextmanager
    async def clone(self, setup: str, *, migrated: bool) -> AsyncIterator[Site]:
        """A fresh database in ``setup``: migrated by the migrating role (granting the
        sweeping role), or with nothing of ours yet."""
        name = unique_name(f"stall_{setup}")
        site = await self._create(setup, name, await self._template(setup, migrated=migrated))
        try:
            yield site
        finally:
            await drop_database(self.server, name)

    async def _create(self, setup: str, name: str, template: str) -> Site:
        await create_database(self.server, name, template=template)
        # A clone does not inherit its template's database privileges: grant them again.
        await execute(self.server, f'GRANT CREATE ON DATABASE "{name}" TO "{self.cast.migrator}"')
        dsn = with_database(self.server, name)
        return Site(setup=setup, database=name, dsn=dsn, cast=self.cast)

    async def _template(self, setup: str, *, migrated: bool) -> str:
        if (setup, migrated) not in self._templates:
            name = unique_name(f"stall_template_{setup}")
            if migrated:
                site = await self._create(setup, name, await self._template(setup, migrated=False))
                async with site.connect(self.cast.migrator) as conn:
                    await migrate(conn, grant=self.cast.sweeper)
            else:
                await create_database(self.server, name, template="template0")
                await self._host(setup, with_database(self.server, name))
            self._templates[setup, migrated] = name
        return self._templates[setup, migrated]

    async def _host(self, setup: str, dsn: str) -> None:
        """The host's schema, tables and grants as a DBA sets them up, and what a planter did."""
        c, sb = self.cast, HOST_SCHEMA
        await execute(
            dsn,
            f'CREATE SCHEMA {sb} AUTHORIZATION "{c.owner}"; SET ROLE "{c.owner}";'
            f" SET search_path = {sb};"
            + host_schema_sql("varchar" if setup == "planted" else "text")
            + (" ALTER TABLE todos ALTER COLUMN queue TYPE varchar;" if setup == "planted" else "")
            + f' GRANT USAGE ON SCHEMA {sb} TO "{c.app}", "{c.readers}";'
            f' GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {sb} TO "{c.app}";'
            f' GRANT SELECT ON todos, endpoints TO "{c.readers}"; RESET ROLE;',
        )
        if setup == "planted":
            await execute(dsn, f'GRANT USAGE, CREATE ON SCHEMA public, {sb} TO "{c.planter}"')
            await execute(with_user(dsn, c.planter), PLANT)


#: Every schema, relation, function and trigger of ours, by name.
OURS = """
SELECT nspname AS name FROM pg_namespace WHERE nspname = 'stall_nudge'
UNION ALL
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'stall_nudge' OR c.relname LIKE 'stall\\_nudge%'
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
    """Apply ``sql`` by hand, as docs/operations.md offers: psql -f, stopping at an error.

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
    "CARELESS",
    "HOST_SCHEMA",
    "PLANT",
    "SETUPS",
    "Cast",
    "Site",
    "SiteDriver",
    "Sites",
    "create_database",
    "drop_database",
    "execute",
    "login_role",
    "ours",
    "psql_file",
    "test_server",
    "unique_name",
    "with_database",
    "with_user",
]
