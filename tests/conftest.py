"""Fixtures shared by every suite: a test PostgreSQL with a migrated template."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from adapters.postgres import migrate
from tests import pg


@pytest.fixture(name="pg_server", scope="session")
def _pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL (STALL_TEST_DSN, or embedded)."""
    with pg.test_server() as dsn:
        yield dsn


def _template(pg_server: str, footprint: str) -> Iterator[str]:
    """A template database holding the host schema and our migration in ``footprint``."""
    name = pg.unique_name(f"stall_template_{footprint}")

    async def build() -> None:
        await pg.create_database(pg_server, name)
        conn = await asyncpg.connect(pg.with_database(pg_server, name))
        try:
            await migrate(conn, host_schema=True, footprint=footprint)
        finally:
            await conn.close()

    asyncio.run(build())
    yield name
    asyncio.run(pg.drop_database(pg_server, name))


@pytest.fixture(name="pg_template", scope="session")
def _pg_template(pg_server: str) -> Iterator[str]:
    """A template database with the host schema, migrated in the lean footprint (the default)."""
    yield from _template(pg_server, "lean")


@pytest.fixture(name="pg_template_incremental", scope="session")
def _pg_template_incremental(pg_server: str) -> Iterator[str]:
    """A template database with the host schema, migrated in the incremental footprint."""
    yield from _template(pg_server, "incremental")


@asynccontextmanager
async def _clone(pg_server: str, template: str) -> AsyncIterator[str]:
    name = pg.unique_name("stall_test")
    await pg.create_database(pg_server, name, template=template)
    try:
        yield pg.with_database(pg_server, name)
    finally:
        await pg.drop_database(pg_server, name)


@pytest.fixture(name="pg_dsn")
async def _pg_dsn(pg_server: str, pg_template: str) -> AsyncIterator[str]:
    """A fresh database for one test (lean), dropped afterwards."""
    async with _clone(pg_server, pg_template) as dsn:
        yield dsn


@pytest.fixture(name="pg_dsn_incremental")
async def _pg_dsn_incremental(pg_server: str, pg_template_incremental: str) -> AsyncIterator[str]:
    """A fresh database for one test (incremental), dropped afterwards."""
    async with _clone(pg_server, pg_template_incremental) as dsn:
        yield dsn


@pytest.fixture(name="pg_pool")
async def _pg_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A small asyncpg pool on the test's (lean) database."""
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture(name="pg_pool_incremental")
async def _pg_pool_incremental(pg_dsn_incremental: str) -> AsyncIterator[asyncpg.Pool]:
    """A small asyncpg pool on the test's incremental database."""
    pool = await asyncpg.create_pool(pg_dsn_incremental, min_size=1, max_size=4)
    yield pool
    await pool.close()
