"""Bad DSNs, options and environment through every command: one line, non-zero, no secret.

Each case runs the real `stall-nudge` in a subprocess. The password in every
DSN (and in PGPASSWORD) is a marker that must appear nowhere in the output.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from stall_testing import EmbeddedUnavailable, embedded_postgres
from tests.cli.conftest import cli

pytestmark = pytest.mark.postgres

MARKER = "s3cret-MARKER-42"
COMMANDS = (("migrate",), ("sweep", "--once"), ("status",))
#: A 64-character label: refused by the IDNA codec before any lookup (no DNS traffic).
UNKNOWN_HOST = "a" * 64 + ".invalid"


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


def with_password(dsn: str, password: str) -> str:
    scheme, _, rest = dsn.partition("://")
    user, _, host = rest.partition("@")
    return f"{scheme}://{user}:{password}@{host}"


def cases(pg_dsn: str, checking_server: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Each bad input as (DSN, extra environment), by name."""
    good = with_password(pg_dsn, MARKER)
    base = good.rsplit("?", 1)[0]
    return {
        "port 99999": (good.replace(":5432/", ":99999/", 1), {}),
        "PGPORT=abc": (base.replace(":5432/", "/", 1), {"PGPORT": "abc"}),
        "statement_timeout=1 in options": (
            f"{base}?options=-c%20statement_timeout%3D1",
            {},
        ),
        "unknown host": (good.replace("127.0.0.1", UNKNOWN_HOST, 1), {}),
        "refused port": (good.replace(":5432/", ":1/", 1), {}),
        "bad password": (with_password(checking_server, MARKER), {}),
        "bad password from PGPASSWORD": (checking_server, {"PGPASSWORD": MARKER}),
        "password not UTF-8": (with_password(pg_dsn, MARKER + "\udcff"), {}),
    }


CASES = (
    "port 99999",
    "PGPORT=abc",
    "statement_timeout=1 in options",
    "unknown host",
    "refused port",
    "bad password",
    "bad password from PGPASSWORD",
    "password not UTF-8",
)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("case", CASES)
async def test_bad_input_gets_one_line_and_no_secret(
    pg_dsn: str, checking_server: str, command: tuple[str, ...], case: str
) -> None:
    """One clear line on stderr, a non-zero exit, no traceback, and the password nowhere."""
    if ":5432/" not in pg_dsn:
        pytest.skip("the port cases rewrite a TCP DSN on port 5432 (set STALL_TEST_DSN)")
    dsn, extra = cases(pg_dsn, checking_server)[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | extra

    result = await cli(*command, "--dsn", dsn, env=env)

    assert 0 != result.status
    assert "" == result.out
    assert [] == [line for line in result.err.splitlines() if not line.startswith("stall-nudge")]
    assert 1 == len(result.err.splitlines()), result.err
    assert "Traceback" not in result.err
    assert MARKER not in result.err
