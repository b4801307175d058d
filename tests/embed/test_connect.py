"""stall_nudge.connect against real PostgreSQL: libpq's connect_timeout and the session's name."""

from __future__ import annotations

import asyncio

import pytest

import stall_nudge
from tests.postgres.proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

#: Far longer than any test here runs: only the DSN's connect_timeout can end a connect first.
HOUR = 3600.0


def _with(dsn: str, parameter: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}{parameter}"


async def test_a_dsn_connect_timeout_bounds_connecting(pg_dsn: str) -> None:
    """Through a silent proxy, connect_timeout=1 ends the connect, not the hour-long timeout."""
    async with BlackHoleProxy(pg_dsn) as proxy:
        proxy.freeze()
        # A guard, not a measurement: should the parameter be ignored, fail instead of hanging.
        async with asyncio.timeout(HOUR / 6):
            with pytest.raises(stall_nudge.StartupError) as caught:
                async with stall_nudge.connect(_with(proxy.dsn, "connect_timeout=1"), timeout=HOUR):
                    pass

    assert str(caught.value).endswith(": timed out (no answer from PostgreSQL)"), caught.value


async def test_a_dsn_connect_timeout_is_not_sent_to_the_server(pg_dsn: str) -> None:
    """asyncpg alone would send connect_timeout as a setting, which PostgreSQL refuses."""
    async with stall_nudge.connect(_with(pg_dsn, "connect_timeout=5")) as pool:
        assert 1 == await pool.fetchval("SELECT 1")


async def test_connections_are_named_stall_nudge_unless_the_dsn_names_them(pg_dsn: str) -> None:
    """application_name is stall-nudge by default; the DSN's own wins, as libpq's defaults yield."""
    names = []
    for dsn in (pg_dsn, _with(pg_dsn, "application_name=billing-sidecar")):
        async with stall_nudge.connect(dsn) as pool:
            names.append(await pool.fetchval("SELECT current_setting('application_name')"))

    assert ["stall-nudge", "billing-sidecar"] == names
