"""The operator surface scripts rely on, in process: exit statuses, one line a mistake, JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger, migrate
from stall_testing import PostgresHost, Receiver
from tests import pg
from tests.cli.conftest import SECRET, cli, stalled

pytestmark = pytest.mark.postgres


def old(minutes: int) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes)


async def test_help_lists_every_command_and_version_names_the_program() -> None:
    """--help lists every subcommand and --version prints the version."""
    help_ = await cli("--help")
    version = await cli("--version")

    assert 0 == help_.status
    for command in ("migrate", "sweep", "status", "demo", "simulate", "sql"):
        assert command in help_.out
    assert (0, True) == (version.status, version.out.startswith("stall-nudge "))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("sweep", "--once"), "no database given"),
        (("sweep", "--once", "--dsn", "mysql://x"), "asyncpg refuses the DSN"),
        (("status", "--dsn", "postgresql://nobody@127.0.0.1:1/x"), "cannot connect"),
        (("sweep", "--interval", "0s", "--dsn", "postgresql://x@h/db"), "positive duration"),
        (("sweep", "--interval", "soon", "--dsn", "postgresql://x@h/db"), "expected a duration"),
        (("status", "--bogus"), "unrecognized arguments"),
    ],
)
async def test_user_mistakes_get_one_clear_line(args: tuple[str, ...], needle: str) -> None:
    """Each user mistake gets one clear line on stderr and a non-zero exit."""
    result = await cli(*args, env={"PATH": "/usr/bin:/bin"})

    assert 0 != result.status
    assert [True] == [needle in line for line in result.err.splitlines()], result.err


async def test_a_database_without_stall_nudge_says_to_run_migrate(pg_server: str) -> None:
    """sweep on a database with nothing of ours names the command to run, exit 1."""
    name = pg.unique_name("stall_bare")
    await pg.create_database(pg_server, name)
    try:
        bare = await cli("sweep", "--once", "--dsn", pg.with_database(pg_server, name))
    finally:
        await pg.drop_database(pg_server, name)

    assert 1 == bare.status
    assert "not installed in this database (run stall-nudge migrate)" in bare.err


async def test_a_sweep_while_another_instance_holds_the_tick_says_skipped(
    pg_dsn: str, pg_pool: asyncpg.Pool, board: PostgresHost, receiver: Receiver
) -> None:
    """While another instance holds the tick, `sweep --once` says skipped and wakes nothing."""
    async with PostgresLedger(pg_pool).hold_tick():
        text = await cli("sweep", "--once", "--dsn", pg_dsn)
        as_json = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    assert (0, 0) == (text.status, as_json.status)
    assert "tick 1: skipped (another instance holds the tick)" in text.out
    tick = json.loads(as_json.out)
    assert ("skipped", []) == (tick["outcome"], tick["charged"])
    assert [] == stalled(receiver)


async def test_status_check_exits_3_when_a_pair_needs_a_person(
    pg_dsn: str, pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """A capped pair: status --check exits 3, as a table (marked, counted) and as JSON.

    Which pairs need a person is tested on values (test_status_text.py); the
    sweep's board passing the check, in the operator's journey (test_cli.py).
    """
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-c")
    await host.add_hook(
        "hook-c", endpoint_id="ep-c", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.create_todo("c-0", endpoint_id="ep-c", queue="lane", created_at=old(180))
    await pg_pool.execute(
        "INSERT INTO stall_nudge.queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at) "
        "VALUES ('ep-c', 'lane', 5, now() - interval '1 minute')"
    )

    text = await cli("status", "--check", "--dsn", pg_dsn)
    as_json = await cli("status", "--check", "--json", "--dsn", pg_dsn)

    assert (3, 3) == (text.status, as_json.status), text.err
    assert [("capped", True)] == [
        (p["verdict"], p["needs_person"]) for p in json.loads(as_json.out)["pairs"]
    ]
    _, row, step, legend, _fleet = text.out.splitlines()
    assert ("!", "! needs a person: 1 of 1 pair") == (row[0], legend)
    assert step.startswith("! ep-c/lane: 5 nudges woke no consumer of lane: fix the consumer")


@pytest.fixture(name="role")
async def _role(pg_server: str, pg_dsn: str) -> AsyncIterator[str]:
    """A login role of its own, granted nothing; dropped, with what it was granted, afterwards."""
    async with pg.login_role(pg_server, pg_dsn, "stall_sweeper") as (role, _):
        yield role


async def test_a_role_without_its_grants_is_refused_at_start_in_one_line(
    pg_dsn: str, role: str
) -> None:
    """sweep --once as a role granted nothing: exit 1 before any tick, one line naming the fix."""
    result = await cli("sweep", "--once", "--json", "--dsn", pg.with_user(pg_dsn, role))

    assert (1, "") == (result.status, result.out)
    [line] = result.err.splitlines()
    assert line.startswith("stall-nudge: error: this role lacks "), line
    assert line.endswith("with stall-nudge migrate --grant ROLE"), line


async def test_a_failed_tick_is_a_json_record_and_exit_1(pg_dsn: str, role: str) -> None:
    """A sweeping role with every grant whose transactions are read-only (as on a standby)
    passes the start-up check; its tick fails: a failed record on stdout, one line, exit 1."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        report = await migrate(conn, grant=role)
        await conn.execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
    finally:
        await conn.close()

    result = await cli("sweep", "--once", "--json", "--dsn", pg.with_user(pg_dsn, role))

    assert () == report.for_dba
    assert 1 == result.status, result.err
    tick = json.loads(result.out)
    assert ("failed", 1, [], None) == (tick["outcome"], tick["tick"], tick["charged"], tick["at"])
    assert "read-only transaction" in tick["error"]
    assert 1 == len(result.err.splitlines()), result.err
