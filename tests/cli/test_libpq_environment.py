"""A good DSN connects to the loopback PostgreSQL, with the libpq variables the CLI honours.

asyncpg ignores PGAPPNAME, PGTZ, PGDATESTYLE, PGGEQO and PGCONNECT_TIMEOUT;
the command line hands them on as DSN parameters (``with_libpq_environment``)
and ``stall_nudge.connect`` sends or honours them. These run in-process: the
command's own wiring is covered once, in test_bad_input.py.
"""

from __future__ import annotations

import asyncio

import pytest

from stall_nudge import StartupError, connect
from stall_nudge.cli.common import with_libpq_environment
from tests.postgres.proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

SETTINGS = (
    "SELECT current_setting('application_name'), current_setting('TimeZone'),"
    " current_setting('DateStyle'), current_setting('geqo')"
)


async def _settings(dsn: str) -> tuple[str, ...]:
    async with connect(dsn, timeout=30) as pool:
        return tuple(await pool.fetchrow(SETTINGS))


async def test_a_good_dsn_connects_as_stall_nudge(pg_dsn: str) -> None:
    """With no variable set, the session is named stall-nudge and keeps the server's geqo."""
    name, _, _, geqo = await _settings(pg_dsn)

    assert ("stall-nudge", "on") == (name, geqo)


async def test_honoured_variables_reach_the_server_and_the_dsns_own_setting_wins(
    pg_dsn: str,
) -> None:
    """PGTZ, PGDATESTYLE and PGGEQO become settings; the DSN's application_name beats PGAPPNAME."""
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}application_name=from-dsn"
    env = {
        "PGAPPNAME": "from-env",
        "PGTZ": "Asia/Tokyo",
        "PGDATESTYLE": "SQL, DMY",
        "PGGEQO": "off",
    }

    assert ("from-dsn", "Asia/Tokyo", "SQL, DMY", "off") == await _settings(
        with_libpq_environment(dsn, env)
    )


async def test_pgconnect_timeout_bounds_connecting(pg_dsn: str) -> None:
    """With PGCONNECT_TIMEOUT=1 a silent server fails connecting, not the hour-long bound."""
    async with BlackHoleProxy(pg_dsn) as proxy:
        proxy.freeze()
        dsn = with_libpq_environment(proxy.dsn, {"PGCONNECT_TIMEOUT": "1"})
        # A guard far under the hour connecting would take were the variable ignored.
        async with asyncio.timeout(60):
            with pytest.raises(StartupError) as caught:
                async with connect(dsn, timeout=3600):
                    pass

    assert str(caught.value).endswith(": timed out (no answer from PostgreSQL)"), caught.value
