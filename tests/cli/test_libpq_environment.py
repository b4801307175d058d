"""The libpq variables the command line honours reach the loopback PostgreSQL as settings.

asyncpg ignores PGAPPNAME, PGTZ, PGDATESTYLE and PGGEQO; the command line
hands them on as DSN parameters (``with_libpq_environment``, its output
tested in tests/unit/test_connect.py) and ``stall_nudge.connect`` sends
them. PGCONNECT_TIMEOUT becomes the DSN's connect_timeout, whose bound is
tested in tests/embed/test_connect.py.
"""

from __future__ import annotations

import pytest

from stall_nudge import connect
from stall_nudge.cli.common import with_libpq_environment

pytestmark = pytest.mark.postgres

SETTINGS = (
    "SELECT current_setting('application_name'), current_setting('TimeZone'),"
    " current_setting('DateStyle'), current_setting('geqo')"
)


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

    async with connect(with_libpq_environment(dsn, env), timeout=30) as pool:
        shown = tuple(await pool.fetchrow(SETTINGS))

    assert ("from-dsn", "Asia/Tokyo", "SQL, DMY", "off") == shown
