"""The operator surface scripts rely on: exit statuses, one JSON convention, safe text, logs."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from adapters.postgres import migrate
from stall_testing import PostgresHost, Receiver
from tests import pg
from tests.cli.conftest import SECRET, cli

pytestmark = pytest.mark.postgres

#: Raw control characters a sender could put in a queue name, endpoint id or todo id.
HOSTILE = "lane\x1b[2J\x07\r\x9bfake\u202e"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")


def old(minutes: int) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes)


@pytest.fixture(name="host")
def _host(pg_pool: asyncpg.Pool) -> PostgresHost:
    return PostgresHost(pg_pool)


async def add_capped_pair(host: PostgresHost, pool: asyncpg.Pool, receiver: Receiver) -> None:
    """ep-c/lane: five nudges since progress, work 3 hours old."""
    await host.add_endpoint("ep-c")
    await host.add_hook(
        "hook-c", endpoint_id="ep-c", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.create_todo("c-0", endpoint_id="ep-c", queue="lane", created_at=old(180))
    await pool.execute(
        "INSERT INTO stall_nudge.queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at) "
        "VALUES ('ep-c', 'lane', 5, now() - interval '1 minute')"
    )


async def set_failures(pool: asyncpg.Pool, hook_id: str, failures: int) -> None:
    """The hook's consecutive failed deliveries, as the dispatcher books them."""
    await pool.execute(
        "UPDATE notify_hooks SET consecutive_failures = $2 WHERE id = $1", hook_id, failures
    )


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("due", 0),
        ("fresh-without-receiver", 0),
        ("capped", 3),
        ("stale-without-receiver", 3),
        ("stale-on-paused-endpoint", 3),
        ("stale-with-failing-receiver", 3),
        ("fresh-with-failing-receiver", 0),
        ("stale-with-a-disabled-hook-beside-a-working-one", 0),
    ],
)
async def test_status_check_exits_3_only_when_a_pair_needs_a_person(
    pg_dsn: str,
    pg_pool: asyncpg.Pool,
    host: PostgresHost,
    receiver: Receiver,
    setup: str,
    expected: int,
) -> None:
    """status --check: 0 when the sweep has it in hand, 3 when capped or nothing can wake it."""
    if setup == "capped":
        await add_capped_pair(host, pg_pool, receiver)
    else:
        state = "paused" if setup == "stale-on-paused-endpoint" else "active"
        url = receiver.url("hook", SECRET)
        await host.add_endpoint("ep-1", state=state)
        if "without-receiver" not in setup:
            await host.add_hook("hook-1", endpoint_id="ep-1", url=url, secret=SECRET)
        if "failing" in setup:
            await set_failures(pg_pool, "hook-1", 3)
        if "disabled" in setup:
            await host.add_hook("hook-off", endpoint_id="ep-1", url=url, secret=SECRET)
            await host.set_hook_enabled("hook-off", False, at=old(5), reason="by hand")
        age = 0 if setup.startswith("fresh") else 30
        await host.create_todo("t-0", endpoint_id="ep-1", queue="lane", created_at=old(age))

    text = await cli("status", "--check", "--dsn", pg_dsn)
    as_json = await cli("status", "--check", "--json", "--dsn", pg_dsn)

    assert (expected, expected) == (text.status, as_json.status), text.err
    pairs = json.loads(as_json.out)["pairs"]
    assert [expected == 3] == [p["needs_person"] for p in pairs]
    _, row, *legend, fleet = text.out.splitlines()
    assert ("!" if expected == 3 else " ") == row[0]
    assert "the fleet last swept never" == fleet
    assert (["! needs a person: 1 of 1 pair"] if expected == 3 else []) == legend


async def test_status_shows_hook_health_before_auto_disable(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """A failing receiver and a disabled hook show per pair, in the table and in JSON."""
    url = receiver.url("hook", SECRET)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url=url, secret=SECRET)
    await host.add_hook("hook-off", endpoint_id="ep-1", url=url, secret=SECRET)
    await host.set_hook_enabled("hook-off", False, at=old(5), reason="10 failed deliveries")
    await set_failures(pg_pool, "hook-1", 3)
    await host.create_todo("t-0", endpoint_id="ep-1", queue="lane", created_at=old(30))
    await host.add_endpoint("ep-2")
    await host.add_hook("hook-2", endpoint_id="ep-2", url=url, secret=SECRET)
    await host.create_todo("t-1", endpoint_id="ep-2", queue="lane", created_at=old(30))

    table = await cli("status", "--dsn", pg_dsn)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)

    header, *rows, legend, _fleet = table.out.splitlines()
    hooks = header.index("HOOKS")
    shown = {row[2:].split()[0]: (row[0], row[hooks:].split("  ")[0]) for row in rows}
    assert {"ep-1": ("!", "3 failures, 1 disabled"), "ep-2": (" ", "-")} == shown
    assert "! needs a person: 1 of 2 pairs" == legend
    assert {"ep-1": (3, 1, True), "ep-2": (0, 0, False)} == {
        p["endpoint_id"]: (p["hook_failures"], p["hooks_disabled"], p["needs_person"])
        for p in json.loads(as_json.out)["pairs"]
    }


async def test_status_cuts_long_cells_and_json_keeps_them_whole(
    pg_dsn: str, host: PostgresHost, receiver: Receiver
) -> None:
    """A 1 MiB queue name is cut in its own cell, with a marker; other rows stay narrow."""
    huge = "q" * 2**20
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    for i, queue in enumerate((huge, "lane-a", "lane-b", "lane-c")):
        await host.create_todo(f"t-{i}", endpoint_id="ep-1", queue=queue, created_at=old(30))

    table = await cli("status", "--dsn", pg_dsn)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)

    assert 0 == table.status, table.err
    # a header, four pairs, "needs a person" (the huge name is not swept), the fleet
    assert 7 == len(table.out.splitlines())
    assert max(len(line) for line in table.out.splitlines()) < 300
    assert "q" * 37 + "..." in table.out
    assert huge in {p["queue"] for p in json.loads(as_json.out)["pairs"]}


async def test_an_empty_board_is_valid_json_and_passes_the_check(pg_dsn: str) -> None:
    """With nothing pending, status --json prints an object with an empty pair list; exit 0."""
    result = await cli("status", "--json", "--check", "--dsn", pg_dsn)

    assert 0 == result.status
    document = json.loads(result.out)
    assert [] == document["pairs"]
    assert document["at"].endswith("+00:00")


async def test_status_json_names_units_and_gives_utc_times(
    pg_dsn: str, pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """Durations are seconds under *_s keys; instants are ISO 8601 in UTC."""
    await add_capped_pair(host, pg_pool, receiver)

    pair = json.loads((await cli("status", "--json", "--dsn", pg_dsn)).out)["pairs"][0]

    assert 180 * 60 <= pair["oldest_age_s"]
    assert (5, "capped") == (pair["effective_nudges"], pair["verdict"])
    assert pair["last_nudged_at"].endswith("+00:00")
    assert "oldest_age" not in pair


async def test_control_characters_are_escaped_in_every_output(
    pg_dsn: str, host: PostgresHost, receiver: Receiver
) -> None:
    """A sender's ESC, BEL, CR, CSI and bidi override never reach the terminal raw."""
    await host.add_endpoint(HOSTILE)
    await host.add_hook(
        "hook-h", endpoint_id=HOSTILE, url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.create_todo(
        HOSTILE, endpoint_id=HOSTILE, queue=HOSTILE, created_at=old(30), title=HOSTILE
    )

    table = await cli("status", "--dsn", pg_dsn)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)
    swept = await cli("sweep", "--once", "--dsn", pg_dsn, "--log-level", "debug")
    swept_json = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    for result in (table, as_json, swept, swept_json):
        assert 0 == result.status, result.err
        assert [] == RAW.findall(result.out + result.err)
    assert "lane\\x1b[2J\\x07\\x0d\\x9bfake\\u202e" in table.out
    assert "\\x1b" in swept.out
    assert "\\x1b" in swept.err
    assert [HOSTILE] == [p["queue"] for p in json.loads(as_json.out)["pairs"]]


@pytest.fixture(name="role")
async def _role(pg_server: str, pg_dsn: str) -> AsyncIterator[str]:
    """A login role of its own, granted nothing; dropped, with what it was granted, afterwards."""
    async with pg.login_role(pg_server, pg_dsn, "stall_sweeper") as (role, _):
        yield role


@pytest.fixture(name="read_only_dsn")
async def _read_only_dsn(pg_dsn: str, role: str) -> str:
    """A DSN for a sweeping role with every grant the sweep needs, whose transactions are all
    read-only (as on a standby): it passes the start-up check, and every tick fails."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        report = await migrate(conn, grant=role)
        await conn.execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
    finally:
        await conn.close()
    assert () == report.for_dba
    return pg.with_user(pg_dsn, role)


async def test_a_role_without_its_grants_is_refused_at_start_in_one_line(
    pg_dsn: str, role: str
) -> None:
    """sweep --once as a role granted nothing: exit 1 before any tick, one line naming the fix."""
    result = await cli("sweep", "--once", "--json", "--dsn", pg.with_user(pg_dsn, role))

    assert (1, "") == (result.status, result.out)
    [line] = result.err.splitlines()
    assert line.startswith("stall-nudge: error: this role lacks "), line
    assert line.endswith("with stall-nudge migrate --grant ROLE"), line


async def test_a_failed_tick_is_a_json_record_and_exit_1(read_only_dsn: str) -> None:
    """sweep --once --json: a tick the database refuses prints a failed record and exits 1."""
    result = await cli("sweep", "--once", "--json", "--dsn", read_only_dsn)

    assert 1 == result.status, result.err
    tick = json.loads(result.out)
    assert ("failed", 1, [], None) == (tick["outcome"], tick["tick"], tick["charged"], tick["at"])
    assert "read-only transaction" in tick["error"]
    assert 1 == len(result.err.splitlines()), result.err
    assert "Traceback" not in result.err


async def test_the_loop_prints_a_record_for_each_failed_tick(read_only_dsn: str) -> None:
    """The sidecar with --json prints failed ticks on stdout as records, and goes on."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "stall_nudge.cli", "sweep", "--interval", "50ms", "--json"),
        *("--dsn", read_only_dsn),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines = [await asyncio.wait_for(proc.stdout.readline(), 30) for _ in range(2)]
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)

    assert 0 == proc.returncode, err.decode()
    assert [(1, "failed"), (2, "failed")] == [
        (r["tick"], r["outcome"]) for r in map(json.loads, lines)
    ]


async def sidecar_log(dsn: str, *options: str, ticks: int) -> tuple[list[dict[str, Any]], str]:
    """Run the sidecar until its JSON records show ``ticks`` ticks ran; stop it.

    Returns those records (stdout) and the whole log (stderr): the records
    prove which ticks ran, whatever the log shows of them.
    """
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "stall_nudge.cli", *options, "sweep", "--interval", "20ms"),
        *("--json", "--dsn", dsn),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    # A hang guard only: each line is one 20 ms tick.
    records = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)) for _ in range(ticks)]
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert 0 == proc.returncode, err.decode()
    return records, err.decode()


def logged_ticks(log: str) -> list[int]:
    """The tick numbers the log's records carry, in order, each once."""
    return list(dict.fromkeys(int(n) for n in re.findall(r"\[tick=(\d+)", log)))


async def test_idle_ticks_are_quiet_by_default_and_records_carry_fields(
    pg_dsn: str, host: PostgresHost, receiver: Receiver
) -> None:
    """At the default level a busy tick and its nudge are logged with fields; idle ticks are not."""
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.create_todo("l-0", endpoint_id="ep-1", queue="lane-l", created_at=old(30))

    records, log = await sidecar_log(pg_dsn, ticks=3)

    # Ticks 2 and 3 ran, and ran idle: nothing charged, nothing failed.
    assert [(1, 1), (2, 0), (3, 0)] == [(r["tick"], len(r["charged"])) for r in records]
    assert {"ok"} == {r["outcome"] for r in records}
    assert "[tick=1 endpoint=ep-1 queue=lane-l nudge=1 todo=l-0]" in log
    assert (
        "tick 1: full pass judged 1 pair(s): charged 1, cleared 0, queued 1, refused 0 [tick=1]"
    ) in log
    assert [1] == logged_ticks(log)


async def test_log_level_debug_shows_idle_ticks(pg_dsn: str) -> None:
    """--log-level debug brings each idle tick's summary back, with its kind and pairs judged."""
    records, log = await sidecar_log(pg_dsn, "--log-level", "debug", ticks=2)

    # The first tick of an instance is a full pass; the next, a delta.
    assert [(1, "full"), (2, "delta")] == [(r["tick"], r["kind"]) for r in records]
    assert "tick 1: full pass judged 0 pair(s): charged 0, cleared 0, queued 0, refused 0" in log
    assert "tick 2: delta pass judged 0 pair(s): charged 0, cleared 0, queued 0, refused 0" in log
    assert [1, 2] == logged_ticks(log)[:2]  # a third may have run before the stop
