"""A server that cannot be used, and a refused setting, through the command's entry point: one line.

Each case runs ``stall_nudge.cli.main`` in process with an environment of its
own. The password in every DSN (and in PGPASSWORD) is a marker that must
appear nowhere in the output. Which settings are refused, and how each is
named, is tested on the library (tests/unit/test_connect.py); here a refused
one is run once through the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from stall_testing import EmbeddedUnavailable, embedded_postgres
from tests.cli.conftest import cli

pytestmark = pytest.mark.postgres

MARKER = "s3cret-MARKER-42"
COMMANDS = (("migrate",), ("sweep", "--once"), ("status",))


@pytest.fixture(name="checking_server", scope="module")
def _checking_server() -> Iterator[str]:
    """A private embedded PostgreSQL that checks passwords (scram); yields its DSN without one."""

    async def run(dsn: str, statement: str) -> str:
        conn = await asyncpg.connect(dsn)
        try:
            return str(await conn.fetchval(statement))
        finally:
            await conn.close()

    try:
        with embedded_postgres() as dsn:
            asyncio.run(run(dsn, "ALTER ROLE CURRENT_USER PASSWORD 'the-right-one'"))
            hba = Path(asyncio.run(run(dsn, "SHOW hba_file")))
            hba.write_text("local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n")
            asyncio.run(run(dsn, "SELECT pg_reload_conf()"))
            yield dsn
    except EmbeddedUnavailable as exc:
        pytest.skip(str(exc))


def dsn_with(dsn: str, *, password: str | None = None, **params: str | None) -> str:
    """``dsn`` with its host and port moved into the query, then ``params`` set (None drops one).

    The query form spells a TCP server and a Unix socket (the embedded
    server's) alike, so every case runs against either.
    """
    url = urlsplit(dsn)
    query = dict(parse_qsl(url.query))
    if url.hostname:
        query.setdefault("host", url.hostname)
    if url.port:
        query.setdefault("port", str(url.port))
    for name, value in params.items():
        query.pop(name, None)
        if value is not None:
            query[name] = value
    # Set as given, unquoted: one case is a password that is not UTF-8.
    secret = url.password if password is None else password
    credentials = url.username or "" if secret is None else f"{url.username}:{secret}"
    return urlunsplit((url.scheme, f"{credentials}@", url.path, urlencode(query), ""))


def cases(pg_dsn: str, checking_server: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Each bad input as (DSN, extra environment), by name."""
    return {
        "statement_timeout=1 in options": (
            dsn_with(pg_dsn, password=MARKER, options="-c statement_timeout=1"),
            {},
        ),
        "refused port": (dsn_with(pg_dsn, password=MARKER, port="1"), {}),
        "bad password": (dsn_with(checking_server, password=MARKER), {}),
        "bad password from PGPASSWORD": (checking_server, {"PGPASSWORD": MARKER}),
    }


@contextlib.asynccontextmanager
async def tables_locked(dsn: str) -> AsyncIterator[None]:
    """Hold our ledger and schema tables locked against every reader meanwhile."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "LOCK TABLE stall_nudge.queue_stall_nudges, stall_nudge.migrations,"
                " stall_nudge.settings, stall_nudge.ticks IN ACCESS EXCLUSIVE MODE"
            )
            yield
    finally:
        await conn.close()


#: Each case by name: its exit status (1: the server could not be used), and what its line says.
EXPECTED = {
    "statement_timeout=1 in options": (1, "canceling statement due to statement timeout"),
    "refused port": (1, "cannot reach PostgreSQL"),
    "bad password": (1, 'password authentication failed for user "postgres"'),
    "bad password from PGPASSWORD": (1, 'password authentication failed for user "postgres"'),
}
CASES = tuple(EXPECTED)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("case", CASES)
async def test_bad_input_gets_one_line_and_no_secret(
    pg_dsn: str, checking_server: str, command: tuple[str, ...], case: str
) -> None:
    """One clear line on stderr naming the fault, exit 1, no password."""
    dsn, extra = cases(pg_dsn, checking_server)[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | extra

    # With our tables locked, every command's first read outlasts a 1 ms statement timeout.
    locked = case == "statement_timeout=1 in options"
    async with tables_locked(pg_dsn) if locked else contextlib.nullcontext():
        result = await cli(*command, "--dsn", dsn, env=env)

    status, reason = EXPECTED[case]
    assert status == result.status, result.err
    assert "" == result.out
    assert [] == [line for line in result.err.splitlines() if not line.startswith("stall-nudge")]
    assert 1 == len(result.err.splitlines()), result.err
    assert "Traceback" not in result.err
    assert MARKER not in result.err
    assert reason in result.err, result.err


async def test_a_refused_setting_is_one_usage_line_naming_it() -> None:
    """PGPORT=abc, refused by asyncpg before dialing: exit 2, one line naming PGPORT, no secret."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"PGPORT": "abc"}

    result = await cli("sweep", "--once", "--dsn", f"postgresql://u:{MARKER}@127.0.0.1/x", env=env)

    assert (2, "", 1) == (result.status, result.out, len(result.err.splitlines())), result.err
    assert result.err.startswith("stall-nudge: error: asyncpg refuses the DSN or PGPORT: ")
    assert (False, False) == (MARKER in result.err, "abc" in result.err)
