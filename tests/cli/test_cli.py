"""The `stall-nudge` command, run as a subprocess against real PostgreSQL and a loopback hook."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import asyncpg
import pytest

from adapters.postgres import SCHEMA_VERSION, PostgresLedger
from stall_testing import PostgresHost, Receiver
from tests import pg
from tests.cli.conftest import SECRET, Result, cli, stalled

pytestmark = pytest.mark.postgres


async def test_help_and_version() -> None:
    """--help lists every subcommand and --version prints the version."""
    help_ = await cli("--help")
    version = await cli("--version")

    assert 0 == help_.status
    for command in ("migrate", "sweep", "status", "demo", "simulate"):
        assert command in help_.out
    assert version.out.startswith("stall-nudge ")


async def test_migrate_is_idempotent_and_asks_for_host_tables(pg_server: str) -> None:
    """migrate refuses a database without host tables, creates with --host-schema, then no-ops."""
    name = pg.unique_name("stall_cli")
    await pg.create_database(pg_server, name)
    dsn = pg.with_database(pg_server, name)
    try:
        bare = await cli("migrate", "--dsn", dsn)
        created = await cli("migrate", "--dsn", dsn, "--host-schema")
        again = await cli("migrate", "--dsn", dsn, "--host-schema")
    finally:
        await pg.drop_database(pg_server, name)

    assert 1 == bare.status
    assert "host tables missing: no schema holds all of" in bare.err
    assert "--host-schema" not in bare.err  # a demo's flag is no advice for production
    assert "Traceback" not in bare.err
    assert 0 == created.status, created.err
    assert "applied 0001_baseline\n" in created.out
    assert "created index stall_nudge_pending on todos\n" in created.out
    assert created.out.endswith(f"\nschema version {SCHEMA_VERSION}\n")
    assert (
        0,
        f"schema version {SCHEMA_VERSION}: nothing to do, the database is as this build makes it\n",
    ) == (again.status, again.out)


async def test_sweep_once_wakes_the_stalled_queue(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """Pending work with no new inbound webhook: `sweep --once` fires one signed stalled wake."""
    result = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    assert 0 == result.status, result.err
    assert [("l-0", "lane-l")] == stalled(receiver)
    report = json.loads(result.out)
    assert 1 == report["dispatch"]["delivered"]
    assert [1] == [n["nudge"] for n in report["charged"]]


async def test_concurrent_sweep_processes_fire_each_wake_once(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """Two instances, one wake: four `sweep --once` processes at once deliver one wake."""
    results = await asyncio.gather(*(cli("sweep", "--once", "--dsn", pg_dsn) for _ in range(4)))

    assert [0, 0, 0, 0] == [r.status for r in results]
    assert [("l-0", "lane-l")] == stalled(receiver)


async def test_sweep_skips_while_another_instance_holds_the_tick(
    pg_dsn: str, pg_pool: asyncpg.Pool, board: PostgresHost, receiver: Receiver
) -> None:
    """While another instance holds the tick, `sweep --once` says skipped and wakes nothing."""
    async with PostgresLedger(pg_pool).hold_tick():
        text = await cli("sweep", "--once", "--dsn", pg_dsn)
        as_json = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)
    held_stalled = stalled(receiver)
    released = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    assert (0, 0, 0) == (text.status, as_json.status, released.status)
    assert "tick 1: skipped (another instance holds the tick)" in text.out
    tick = json.loads(as_json.out)
    assert ("skipped", []) == (tick["outcome"], tick["charged"])
    assert [] == held_stalled
    assert [("l-0", "lane-l")] == stalled(receiver)
    assert "ok" == json.loads(released.out)["outcome"]


async def test_status_reports_verdicts(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """status answers 'is my queue drained?' per pair, as a table and as JSON."""
    before = await cli("status", "--json", "--dsn", pg_dsn)
    await cli("sweep", "--once", "--dsn", pg_dsn)
    after = await cli("status", "--json", "--dsn", pg_dsn)
    table = await cli("status", "--dsn", pg_dsn)

    def verdicts(result: Result) -> dict[str, str]:
        return {row["queue"]: row["verdict"] for row in json.loads(result.out)["pairs"]}

    assert {"lane-l": "due", "fresh": "fresh"} == verdicts(before)
    assert {"lane-l": "backing-off", "fresh": "fresh"} == verdicts(after)
    assert "VERDICT" in table.out.splitlines()[0]
    assert SECRET not in table.out + after.out


async def test_sweep_loop_stops_cleanly_on_sigterm(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """The sidecar loop ticks until SIGTERM, then exits 0 after its wake was delivered."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stall_nudge.cli",
        "sweep",
        "--interval",
        "200ms",
        "--json",
        "--dsn",
        pg_dsn,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines = [await asyncio.wait_for(proc.stdout.readline(), 30) for _ in range(3)]
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)

    assert 0 == proc.returncode, err.decode()
    assert [1, 2, 3] == [json.loads(line)["tick"] for line in lines]
    assert [("l-0", "lane-l")] == stalled(receiver)


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
    """Each user mistake gets a clear message on stderr and a non-zero exit, no traceback."""
    result = await cli(*args, env={"PATH": "/usr/bin:/bin"})

    assert 0 != result.status
    assert needle in result.err
    assert "Traceback" not in result.err


async def test_missing_tables_are_named(pg_server: str, pg_dsn: str) -> None:
    """Ledger table missing or host tables missing: sweep names what to run."""
    name = pg.unique_name("stall_bare")
    await pg.create_database(pg_server, name)
    bare = await cli("sweep", "--once", "--dsn", pg.with_database(pg_server, name))
    await pg.drop_database(pg_server, name)
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("DROP TABLE stall_nudge.queue_stall_nudges")
    await conn.close()
    no_ledger = await cli("sweep", "--once", "--dsn", pg_dsn)

    assert 1 == bare.status
    assert "not installed in this database (run stall-nudge migrate)" in bare.err
    assert 1 == no_ledger.status
    assert (
        "stall-nudge's own tables missing: stall_nudge.queue_stall_nudges (run stall-nudge migrate)"
        in no_ledger.err
    )
    assert "Traceback" not in bare.err + no_ledger.err


async def test_demo_plays_the_reported_case(pg_server: str) -> None:
    """The reported case and the lost wake, end to end: the demo drains and falls silent."""
    result = await cli("demo", "--dsn", pg_server, limit=120)

    assert 0 == result.status, result.out + result.err
    assert "creation wake DROPPED" in result.out
    assert result.out.splitlines()[-1].startswith("verdict: OK: 4 of 4 todos claimed")


async def test_demo_runs_on_the_embedded_default() -> None:
    """With no arguments the demo starts its own embedded PostgreSQL and exits 0."""
    result = await cli("demo", limit=180)

    assert 0 == result.status, result.out + result.err
    assert "verdict: OK" in result.out


async def test_status_shows_the_last_tick_and_the_last_full_pass(
    pg_dsn: str, board: PostgresHost
) -> None:
    """status says the last tick's kind and pairs judged, and the last full pass's size and time."""
    never = await cli("status", "--json", "--dsn", pg_dsn)
    await cli("sweep", "--once", "--dsn", pg_dsn)
    swept = await cli("status", "--json", "--dsn", pg_dsn)
    table = await cli("status", "--dsn", pg_dsn)

    assert {
        "swept_at": None,
        "last_tick_kind": None,
        "full_pass_at": None,
        "full_pass_s": None,
    }.items() <= json.loads(never.out)["fleet"].items()
    fleet = json.loads(swept.out)["fleet"]
    # A ledger instance's first tick is a full pass; it judges both pairs of the board.
    assert ("full", 2, 2) == (
        fleet["last_tick_kind"],
        fleet["last_tick_judged"],
        fleet["full_pass_pairs"],
    )
    assert fleet["swept_at"] == fleet["full_pass_at"]
    assert fleet["full_pass_s"] is not None
    swept_line, full_pass_line = table.out.splitlines()[-2:]
    assert swept_line.startswith("the fleet last swept ")
    assert swept_line.endswith(": a full tick that judged 2 pair(s)")
    assert full_pass_line.startswith("its last full pass ran ")
    assert " ago: 2 pair(s) in " in full_pass_line
