"""libpq's variables the command line honours itself, seen by the real server a command talks to.

asyncpg reads PGHOST, PGPORT, PGSSLMODE and the like; PGAPPNAME, PGTZ,
PGDATESTYLE, PGGEQO and PGCONNECT_TIMEOUT it ignores, so `stall-nudge` hands
them on (stall_nudge.cli.common.LIBPQ_VARIABLES). Each case runs the real
command in a subprocess.
"""

from __future__ import annotations

import os

import asyncpg
import pytest

from tests.cli.conftest import cli
from tests.postgres.proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

#: Records the settings of every session that writes the fleet's sweep record.
RECORD_SETTINGS = """
CREATE TABLE public.seen_settings (
    application_name text, timezone text, datestyle text, geqo text
);
CREATE FUNCTION public.record_settings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen_settings VALUES (
        current_setting('application_name'), current_setting('TimeZone'),
        current_setting('DateStyle'), current_setting('geqo'));
    RETURN NEW;
END $$;
CREATE TRIGGER record_settings BEFORE INSERT OR UPDATE ON stall_nudge.sweeps
    FOR EACH ROW EXECUTE FUNCTION public.record_settings();
"""


def _no_pg(extra: dict[str, str]) -> dict[str, str]:
    """This environment without any PG* variable, then ``extra``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | extra


async def _sweep_settings(dsn: str, env: dict[str, str]) -> list[tuple[str, ...]]:
    """Run `sweep --once` with ``env``; the settings its session wrote the sweep record with."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(RECORD_SETTINGS)
        result = await cli("sweep", "--once", "--dsn", dsn, env=_no_pg(env))
        assert 0 == result.status, result.err
        rows = await conn.fetch("SELECT DISTINCT * FROM public.seen_settings")
    finally:
        await conn.close()
    return [tuple(row) for row in rows]


async def test_session_variables_reach_the_server(pg_dsn: str) -> None:
    """PGAPPNAME, PGTZ, PGDATESTYLE and PGGEQO are the sweep's session settings."""
    env = {
        "PGAPPNAME": "billing sidecar",
        "PGTZ": "Asia/Tokyo",
        "PGDATESTYLE": "SQL, DMY",
        "PGGEQO": "off",
    }

    assert [("billing sidecar", "Asia/Tokyo", "SQL, DMY", "off")] == await _sweep_settings(
        pg_dsn, env
    )


async def test_without_them_the_session_keeps_its_name_and_the_servers_defaults(
    pg_dsn: str,
) -> None:
    """Unset, the sweep's session is named stall-nudge and keeps the server's geqo."""
    [(name, _, _, geqo)] = await _sweep_settings(pg_dsn, {})

    assert ("stall-nudge", "on") == (name, geqo)


async def test_the_dsns_own_setting_wins_over_its_variable(pg_dsn: str) -> None:
    """As in libpq, a DSN naming application_name or TimeZone beats PGAPPNAME and PGTZ."""
    dsn = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}application_name=from-dsn&TimeZone=UTC"
    env = {"PGAPPNAME": "from-env", "PGTZ": "Asia/Tokyo"}

    [(name, timezone, _, _)] = await _sweep_settings(dsn, env)

    assert ("from-dsn", "UTC") == (name, timezone)


async def test_pgconnect_timeout_bounds_connecting(pg_dsn: str) -> None:
    """With PGCONNECT_TIMEOUT=1 a silent server fails the command, not the 60 s statement bound."""
    async with BlackHoleProxy(pg_dsn) as proxy:
        proxy.freeze()
        # limit is a guard well under the 60 s the command would wait without the variable.
        result = await cli(
            "status", "--dsn", proxy.dsn, env=_no_pg({"PGCONNECT_TIMEOUT": "1"}), limit=30
        )

    assert (1, "", True) == (
        result.status,
        result.out,
        result.err.rstrip().endswith(": timed out (no answer from PostgreSQL)"),
    ), result.err
