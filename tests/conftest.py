"""Fixtures shared by every suite: a test PostgreSQL, its host set-ups, a migrated template.

With pytest-xdist the controlling process starts the one embedded server the
workers share (they read its DSN from STALL_TEST_DSN) and stops it at the end;
SIGTERM ends a run the way Ctrl-C does, so an interrupted run leaves no
server and no data directory behind. Hypothesis reads its profile from
HYPOTHESIS_PROFILE: ``ci`` (the default, full example counts) or ``dev``.
What the inner loop leaves out is marked ``slow`` here, in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from fnmatch import fnmatch
from types import FrameType

import asyncpg
import pytest
from hypothesis import settings

from adapters.postgres import migrate
from stall_testing import Receiver
from tests import pg

settings.register_profile("ci", deadline=None)
settings.register_profile("dev", deadline=None, max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: What the inner loop (``-m "not slow"``) leaves out, by where a test lives: what an edit need
#: not wait for, each costing a process, a browser or a PostgreSQL set-up beyond ``dba``.
#: ``-m slow`` runs exactly these; the README command (no ``-m``) runs everything.
SLOW_FILES = {
    "tests/stress/*": "the races and the soak",
    "tests/postgres/test_*_benchmark*.py": "the benchmarks, run small",
    "tests/cli/test_benchmark_scripts.py": "the benchmarks, run small",
    "tests/cli/test_cli.py": "the command line's journeys, each a real process",
    "tests/embed/test_interrupted_run.py": "a real process interrupted by a signal",
    "tests/postgres/test_id_types.py": "contract scenarios again, on uuid and bigint hosts",
}
#: Doc blocks run by bash: ``stall-nudge`` as a process (tests/embed/test_doc_examples.py).
_SHELL_BLOCK = re.compile(r"\[.*:(sh|bash|console)\]$")


def _is_slow(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    if any(fnmatch(path, pattern) for pattern in SLOW_FILES):
        return True
    params = getattr(item, "callspec", None)
    if path == "tests/contract/test_postgres.py":  # the dba set-up stays; planted is the second
        return params is not None and params.params.get("site") != "dba"
    if path == "tests/embed/test_doc_examples.py":
        return bool(_SHELL_BLOCK.search(item.name))
    if path == "tests/ops/test_status_page.py":  # drives chromium
        code = getattr(getattr(item, "function", None), "__code__", None)
        return code is not None and "Browser" in code.co_names
    return False


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


_SHARED = pytest.StashKey[ExitStack]()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller owns the server
    # Even where the run started with SIGINT ignored (a background job), Ctrl-C stops it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    stack = ExitStack()
    config.stash[_SHARED] = stack
    if config.getoption("numprocesses", None) and not os.environ.get("STALL_TEST_DSN"):
        os.environ["STALL_TEST_DSN"] = stack.enter_context(pg.test_server())
        stack.callback(os.environ.pop, "STALL_TEST_DSN", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_SHARED, None)
    if stack is not None:
        stack.close()


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Undo what an in-process ``stall-nudge`` call set up (root handlers, our loggers' levels).

    ``cli.main`` configures logging for a process; run in a test, it would
    leave the library's loggers at warning for every later test in the worker.
    """
    root = logging.getLogger()
    ours = [logging.getLogger(name) for name in ("stall_core", "adapters", "stall_nudge")]
    handlers, level, levels = root.handlers[:], root.level, [lg.level for lg in ours]
    yield
    root.handlers[:], root.level = handlers, level
    for logger, was in zip(ours, levels, strict=True):
        logger.setLevel(was)


@pytest.fixture(name="pg_server", scope="session")
def _pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL (STALL_TEST_DSN, or embedded)."""
    with pg.test_server() as dsn:
        yield dsn


@pytest.fixture(name="pg_template", scope="session")
def _pg_template(pg_server: str) -> Iterator[str]:
    """A template database holding the reference host schema and our migration."""
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
    """A fresh database for one test, dropped afterwards: a superuser's, the host in public.

    The older shortcut: a new test takes ``site`` (a DBA's set-up) instead.
    """
    async with _clone(pg_server, pg_template) as dsn:
        yield dsn


@pytest.fixture(name="pg_pool")
async def _pg_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A small asyncpg pool on the test's database."""
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture(name="pg_sites", scope="session")
def _pg_sites(pg_server: str) -> Iterator[pg.Sites]:
    """The host set-ups (pg.SETUPS): the roles made once, a template per set-up on first use."""
    sites = asyncio.run(pg.Sites.start(pg_server))
    yield sites
    asyncio.run(sites.close())


@pytest.fixture(name="site")
async def _site(request: pytest.FixtureRequest, pg_sites: pg.Sites) -> AsyncIterator[pg.Site]:
    """A fresh host database as a DBA sets one up, migrated by a role that is no superuser.

    ``dba`` unless a test parametrizes ``site`` indirectly with another of pg.SETUPS.
    """
    async with pg_sites.clone(getattr(request, "param", "dba"), migrated=True) as site:
        yield site


@pytest.fixture(name="pools")
async def _pools(site: pg.Site) -> AsyncIterator[pg.Pools]:
    """The site's pools: the host's application, the sweeping role, and a superuser."""
    async with site.pools() as pools:
        yield pools


@pytest.fixture(name="bare_site")
async def _bare_site(request: pytest.FixtureRequest, pg_sites: pg.Sites) -> AsyncIterator[pg.Site]:
    """The same host database with nothing of ours installed yet."""
    async with pg_sites.clone(getattr(request, "param", "dba"), migrated=False) as site:
        yield site


@pytest.fixture(name="receiver")
async def _receiver() -> AsyncIterator[Receiver]:
    """Notify hooks on loopback that verify, record and answer each request (204 unless told)."""
    async with Receiver() as receiver:
        yield receiver
