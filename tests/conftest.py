"""Fixtures shared by every suite: a test PostgreSQL with a migrated template."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from adapters.postgres import migrate
from tests import pg


@pytest.fixture(name="pg_server", scope="session")
def _pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL (STALL_TEST_DSN, or embedded)."""
    with pg.test_server() as dsn:
        yield dsn


@pytest.fixture(name="pg_template", scope="session")
def _pg_template(pg_server: str) -> Iterator[str]:
    """A template database holding the host schema and our migration."""
    name = pg.unique_name("stall_template")

    async def build() -> None:
        await pg.create_database(pg_server, name)
        conn = await asyncpg.connect(pg.with_database(pg_server, name))
        try:
            await migrate(conn, host_schema=True)
        finally:
            await conn.close()

    asyncio.run(build())
    yield name
    asyncio.run(pg.drop_database(pg_server, name))


@pytest.fixture(name="pg_dsn")
async def _pg_dsn(pg_server: str, pg_template: str) -> AsyncIterator[str]:
    """A fresh migrated database for one test, dropped afterwards."""
    name = pg.unique_name("stall_test")
    await pg.create_database(pg_server, name, template=pg_template)
    yield pg.with_database(pg_server, name)
    await pg.drop_database(pg_server, name)


@pytest.fixture(name="pg_pool")
async def _pg_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A small asyncpg pool on the test's database."""
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    yield pool
    await pool.close()
