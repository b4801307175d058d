"""The `stall-nudge` command as an operator runs it: processes, real PostgreSQL, a loopback hook.

Three journeys, each a process because the process is what they test: install,
sweep, read and uninstall on a DBA's database; the sidecar loop with its ops
port, stopped by SIGTERM; the demo. What each command prints and exits with,
case by case, is tested in process in the other files here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from adapters.postgres import SCHEMA_VERSION
from stall_testing import PostgresHost, Receiver
from tests import pg
from tests.cli.conftest import HANG_S, SECRET, cli_process, fill_board, stalled
from tests.ops.conftest import ago, get, until_status

pytestmark = pytest.mark.postgres

URL = re.compile(r"http://127\.0\.0\.1:\d+")


async def test_an_operator_installs_sweeps_reads_the_status_and_uninstalls(
    bare_site: pg.Site, receiver: Receiver
) -> None:
    """Each step as its own role on a DBA's database: migrate granting the sweeper, one sweep,
    status, uninstall; each exits as documented, and the last leaves nothing of ours."""
    cast = bare_site.cast
    migrator, sweeper = bare_site.as_role(cast.migrator), bare_site.as_role(cast.sweeper)

    unmigrated = await cli_process("migrate", "--check", "--dsn", migrator)
    migrated = await cli_process("migrate", "--grant", cast.sweeper, "--dsn", migrator)
    current = await cli_process("migrate", "--check", "--dsn", migrator)
    async with bare_site.host_pool() as pool:
        await fill_board(pool, receiver)
    swept = await cli_process("sweep", "--once", "--json", "--dsn", sweeper)
    as_json = await cli_process("status", "--json", "--check", "--dsn", sweeper)
    table = await cli_process("status", "--dsn", sweeper)
    removed = await cli_process("migrate", "--uninstall", "--dsn", migrator)
    left = await pg.ours(bare_site.dsn)

    assert (3, "problem: not migrated: run stall-nudge migrate\n") == (
        unmigrated.status,
        unmigrated.out,
    )
    assert 0 == migrated.status, migrated.err
    assert "applied 0001_baseline\n" in migrated.out
    assert "created index stall_nudge_pending on todos\n" in migrated.out
    assert migrated.out.endswith(f"\nschema version {SCHEMA_VERSION}\n")
    assert (0, f"schema version {SCHEMA_VERSION}: as this build makes it\n") == (
        current.status,
        current.out,
    )
    assert 0 == swept.status, swept.err
    assert [("l-0", "lane-l")] == stalled(receiver)
    report = json.loads(swept.out)
    assert (1, [1]) == (report["dispatch"]["delivered"], [n["nudge"] for n in report["charged"]])
    assert 0 == as_json.status, as_json.err
    assert {"lane-l": "backing-off", "fresh": "fresh"} == {
        row["queue"]: row["verdict"] for row in json.loads(as_json.out)["pairs"]
    }
    assert "VERDICT" in table.out.splitlines()[0]
    assert SECRET not in table.out + as_json.out
    assert 0 == removed.status, removed.err
    assert "removed: our indexes on the host's tables\n" in removed.out
    assert removed.out.endswith("uninstalled\n")
    assert set() == left


def logged_ticks(log: str) -> set[int]:
    """The tick numbers the log's records carry."""
    return {int(n) for n in re.findall(r"\[tick=(\d+)", log)}


async def failed_records(stdout: asyncio.StreamReader, count: int) -> list[dict[str, Any]]:
    """The loop's records up to its ``count``-th failed tick: the failed ones."""
    failed: list[dict[str, Any]] = []
    while len(failed) < count:
        line = await stdout.readline()
        assert line, "the loop ended before its failed ticks"
        record = json.loads(line)
        if record["outcome"] == "failed":
            failed.append(record)
    return failed


async def test_the_sidecar_serves_its_port_reports_every_tick_and_stops_on_sigterm(
    pg_dsn: str, pg_pool: asyncpg.Pool, board: PostgresHost, receiver: Receiver
) -> None:
    """`sweep --json --metrics`: ready once it swept, one wake, a record a tick, failed ticks
    too and the loop goes on; idle ticks stay out of the default log; SIGTERM ends it with 0."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "stall_nudge.cli", "sweep", "--interval", "100ms", "--json"),
        *("--metrics", "127.0.0.1:0", "--dsn", pg_dsn),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    head: list[str] = []
    try:
        async with asyncio.timeout(HANG_S):  # only a hang reaches it
            found = None
            while found is None:
                head.append((await proc.stderr.readline()).decode())
                assert head[-1], "the sidecar exited before naming its port:\n" + "".join(head)
                found = URL.search(head[-1])
            url = found.group()
            ready = await until_status(url + "/readyz", 200)
            swept = [json.loads(await proc.stdout.readline()) for _ in range(3)]
            await receiver.wait_for(1, "hook")
            metrics, page = await get(url + "/metrics"), await get(url + "/")
            await pg_pool.execute("DROP TABLE stall_nudge.queue_stall_nudges CASCADE")
            failed = await failed_records(proc.stdout, 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), HANG_S)
    log = "".join(head) + rest.decode()

    assert 0 == proc.returncode, log
    assert ready[2].startswith("tick ")
    assert [(1, "full", [("lane-l", 1)]), (2, "delta", []), (3, "delta", [])] == [
        (r["tick"], r["kind"], [(c["queue"], c["nudge"]) for c in r["charged"]]) for r in swept
    ]
    assert [("l-0", "lane-l")] == stalled(receiver)
    assert "switchboard_queue_stall_ticks_total" in metrics[2]
    assert ((200, "text/html"), True) == (page[:2], "lane-l" in page[2])
    first = failed[0]["tick"]
    assert [first, first + 1] == [r["tick"] for r in failed]
    assert all("queue_stall_nudges" in r["error"] for r in failed), failed
    # At the default level the busy tick and its nudge are logged with their fields; idle
    # ticks are not.
    assert "[tick=1 endpoint=ep-1 queue=lane-l nudge=1 todo=l-0]" in log
    assert (
        "tick 1: full pass judged 2 pair(s): charged 1, cleared 0, queued 1, refused 0 [tick=1]"
    ) in log
    assert set() == {2, 3} & logged_ticks(log)


async def test_the_demo_plays_the_reported_case(pg_server: str) -> None:
    """The reported case and the lost wake, end to end: the demo drains and falls silent."""
    result = await cli_process("demo", "--dsn", pg_server)

    assert 0 == result.status, result.out + result.err
    assert "creation wake DROPPED" in result.out
    assert result.out.splitlines()[-1].startswith("verdict: OK: 4 of 4 todos claimed")


async def closed_early(*args: str) -> tuple[int, str]:
    """Run `stall-nudge ARGS` with a stdout pipe whose reader is gone before the first byte
    (what `| head -1` does once it has its line): exit status and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "stall_nudge.cli",
            *args,
            stdout=write,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(write)
    _, err = await asyncio.wait_for(proc.communicate(), HANG_S)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_closed_stdout_ends_each_command_quietly_with_its_usual_exit_status(
    pg_dsn: str, board: PostgresHost
) -> None:
    """`sql`, `status --check` (a pair needs a person: 3) and the `sweep --json` loop, each
    writing into a pipe nobody reads: no traceback, the status they exit with when read, and the
    loop stops by itself."""
    await board.add_endpoint("ep-2")
    await board.create_todo("n-0", endpoint_id="ep-2", queue="lane-n", created_at=ago(30))

    sql = await closed_early("sql")
    status = await closed_early("status", "--check", "--dsn", pg_dsn)
    loop = await closed_early("sweep", "--json", "--interval", "100ms", "--dsn", pg_dsn)

    assert (0, "") == sql
    assert (3, "") == status
    assert 0 == loop[0], loop[1]
    assert "stdout was closed: stopping" in loop[1]
    assert "Traceback" not in loop[1]
    assert "BrokenPipe" not in loop[1]


async def test_json_logs_are_one_object_a_line_with_stable_keys(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """`--log-format json` (after the command, too): every stderr line parses on its own, with
    ts, level, logger, event and message first, and a nudge's fields as JSON values."""
    swept = await cli_process(
        "sweep", "--once", "--log-level", "info", "--log-format", "json", "--dsn", pg_dsn
    )
    records = [json.loads(line) for line in swept.err.splitlines()]

    assert 0 == swept.status, swept.err
    assert records
    assert all(["ts", "level", "logger", "event", "message"] == list(r)[:5] for r in records)
    assert all(datetime.fromisoformat(r["ts"]).utcoffset() == timedelta(0) for r in records)
    [nudged] = [r for r in records if "nudge" in r]
    assert ("info", "stall_core.sweeper", 1, "ep-1", "lane-l", 1, "l-0") == (
        nudged["level"],
        nudged["logger"],
        nudged["tick"],
        nudged["endpoint"],
        nudged["queue"],
        nudged["nudge"],
        nudged["todo"],
    )
    assert [] == [line for line in swept.err.splitlines() if not line.startswith("{")]
