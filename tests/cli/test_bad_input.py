"""Bad DSNs, options and environment through every command: one line, the right exit, no secret.

Each case runs the real `stall-nudge` in a subprocess. The password in every
DSN (and in PGPASSWORD) is a marker that must appear nowhere in the output.
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

from stall_nudge.cli.common import LIBPQ_VARIABLES, Handling
from stall_testing import EmbeddedUnavailable, embedded_postgres
from tests.cli.conftest import Result, cli

pytestmark = pytest.mark.postgres

MARKER = "s3cret-MARKER-42"
COMMANDS = (("migrate",), ("sweep", "--once"), ("status",))
#: A 64-character label: refused by the IDNA codec before any lookup (no DNS traffic).
UNKNOWN_HOST = "a" * 64 + ".invalid"
#: A loopback DSN for mistakes refused before any connection is tried.
NEVER_DIALED = f"postgresql://postgres:{MARKER}@127.0.0.1:1/x"
MISSING = "/nonexistent/stall-nudge/root.crt"


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
        "port 99999": (dsn_with(pg_dsn, password=MARKER, port="99999"), {}),
        "PGPORT=abc": (dsn_with(pg_dsn, password=MARKER, port=None), {"PGPORT": "abc"}),
        # Refused before any connection: asyncpg parses PGPORT even beside host:port.
        "PGPORT=abc beside host:port": (NEVER_DIALED, {"PGPORT": "abc"}),
        "unclosed IPv6 bracket": (f"postgresql://postgres:{MARKER}@[::1/x", {}),
        "raw @ in the password": (f"postgresql://postgres:{MARKER}@x@127.0.0.1:1/x", {}),
        "target_session_attrs=bogus": (
            dsn_with(pg_dsn, password=MARKER, target_session_attrs="bogus"),
            {},
        ),
        "sslrootcert missing": (
            dsn_with(pg_dsn, password=MARKER, sslmode="verify-full", sslrootcert=MISSING),
            {},
        ),
        "PGSSLROOTCERT missing": (
            dsn_with(pg_dsn, password=MARKER),
            {"PGSSLMODE": "verify-ca", "PGSSLROOTCERT": MISSING},
        ),
        "statement_timeout=1 in options": (
            dsn_with(pg_dsn, password=MARKER, options="-c statement_timeout=1"),
            {},
        ),
        "unknown host": (dsn_with(pg_dsn, password=MARKER, host=UNKNOWN_HOST), {}),
        "refused port": (dsn_with(pg_dsn, password=MARKER, port="1"), {}),
        "bad password": (dsn_with(checking_server, password=MARKER), {}),
        "bad password from PGPASSWORD": (checking_server, {"PGPASSWORD": MARKER}),
        "password not UTF-8": (dsn_with(pg_dsn, password=MARKER + "\udcff"), {}),
    }


@contextlib.asynccontextmanager
async def tables_locked(dsn: str) -> AsyncIterator[None]:
    """Hold our ledger and schema tables locked against every reader meanwhile."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "LOCK TABLE queue_stall_nudges, stall_nudge.migrations, stall_nudge.settings,"
                " stall_nudge.sweeps IN ACCESS EXCLUSIVE MODE"
            )
            yield
    finally:
        await conn.close()


#: Each case by name: its exit status (2 a usage mistake, 1 the server), and what its line says.
EXPECTED = {
    "port 99999": (2, "the DSN's port must be a number from 1 to 65535"),
    "PGPORT=abc": (2, "PGPORT must be a number from 1 to 65535"),
    "PGPORT=abc beside host:port": (2, "PGPORT must be a number from 1 to 65535"),
    "unclosed IPv6 bracket": (2, "the DSN's host: an IPv6 address must be written whole in"),
    "raw @ in the password": (2, "the user or password holds a raw '@': write it as %40"),
    "target_session_attrs=bogus": (
        2,
        "the DSN's target_session_attrs must be one of any, primary, standby, prefer-standby,",
    ),
    "sslrootcert missing": (2, "the DSN's sslrootcert names a file that does not exist"),
    "PGSSLROOTCERT missing": (2, "PGSSLROOTCERT names a file that does not exist"),
    "statement_timeout=1 in options": (1, "canceling statement due to statement timeout"),
    "unknown host": (2, "the DSN's host is not a valid DNS name"),
    "refused port": (1, "cannot reach PostgreSQL"),
    "bad password": (1, 'password authentication failed for user "postgres"'),
    "bad password from PGPASSWORD": (1, 'password authentication failed for user "postgres"'),
    "password not UTF-8": (2, "the DSN holds text that is not valid UTF-8"),
}
CASES = tuple(EXPECTED)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("case", CASES)
async def test_bad_input_gets_one_line_and_no_secret(
    pg_dsn: str, checking_server: str, command: tuple[str, ...], case: str
) -> None:
    """One clear line on stderr naming the fault, exit 2 for a DSN mistake, no password."""
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


# -- libpq's variables asyncpg would ignore: refused, never silently dropped -----------

#: Each variable the command line refuses, with what one line of stderr says after its name.
REFUSED = {
    name: row.reason for name, row in LIBPQ_VARIABLES.items() if row.handling is Handling.REFUSED
}


def _no_pg(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any PG* variable, then ``extra``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | extra


def _one_line(result: Result) -> str:
    """The single stderr line of a command that failed before doing anything."""
    assert ("", 1) == (result.out, len(result.err.splitlines())), result.err
    assert "Traceback" not in result.err
    assert MARKER not in result.err
    return result.err.strip()


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_a_libpq_variable_asyncpg_ignores_is_refused_by_name(name: str) -> None:
    """Set, each refused variable stops the sidecar with exit 2 naming it, before any connection."""
    result = await cli("sweep", "--once", "--dsn", NEVER_DIALED, env=_no_pg({name: MARKER}))

    line = _one_line(result)
    assert 2 == result.status, line
    assert line.startswith(f"stall-nudge: error: {name} is set, but {REFUSED[name]}; unset it"), (
        line
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
async def test_pgservice_is_refused_by_every_command(command: tuple[str, ...]) -> None:
    """PGSERVICE, which left the sidecar on the default host, is refused by every command."""
    result = await cli(*command, "--dsn", NEVER_DIALED, env=_no_pg({"PGSERVICE": MARKER}))

    assert (
        2,
        "stall-nudge: error: PGSERVICE is set, but asyncpg ignores it;"
        " unset it and name the server in --dsn or STALL_DSN",
    ) == (result.status, _one_line(result))


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"PGCONNECT_TIMEOUT": "0"}, "PGCONNECT_TIMEOUT must be a whole number of seconds from 1"),
        (
            {"PGCLIENTENCODING": "LATIN1"},
            "PGCLIENTENCODING must name UTF8: asyncpg speaks UTF-8 only",
        ),
    ],
)
async def test_an_honoured_libpq_variable_with_a_value_it_cannot_have_is_refused(
    env: dict[str, str], reason: str
) -> None:
    """PGCONNECT_TIMEOUT=0 (libpq's "forever") and a non-UTF-8 PGCLIENTENCODING exit 2."""
    result = await cli("status", "--dsn", NEVER_DIALED, env=_no_pg(env))

    assert (2, f"stall-nudge: error: {reason}") == (result.status, _one_line(result))
