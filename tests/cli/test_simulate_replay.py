"""``stall-nudge simulate --replay`` and the fault flags, at a small size, as the docs run them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from stall_testing import FakeClock, PostgresHost
from tests import pg
from tests.contract.test_sim_real_path import SPAN, run_board

from .conftest import cli

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "replay-week.jsonl")


async def test_the_shipped_example_replays_and_reproduces_its_nudges() -> None:
    """The docs' command: the example replays, and default sends every recorded nudge again."""
    result = await cli("simulate", "--replay", EXAMPLE)

    assert 0 == result.status, result.err
    assert "replay of " in result.out
    line = next(x for x in result.out.splitlines() if "recorded nudges" in x)
    recorded = line.split(" of ")[1].split()[0]
    assert f"default reproduced {recorded} of {recorded} recorded nudges" in line
    assert "0 replayed nudges have no record" in line


async def test_a_replay_with_faults_reports_refunds_and_disabled_hooks() -> None:
    """Every fault flag on a replay: the table grows the fault rows, JSON carries them."""
    result = await cli(
        "simulate",
        "--replay",
        EXAMPLE,
        "--receiver-outage",
        "ep-1:1h-1d:hang",
        "--sweeper-outage",
        "2d-2d6h",
        "--lost-creation-wakes",
        "0.2",
        "--compare",
        "default,fixed-5m",
        "--json",
    )

    assert 0 == result.status, result.err
    report = json.loads(result.out)
    default = report["results"][0]
    assert 1 == default["hooks_disabled"]
    assert default["refunds"] > 0
    assert default["creation_wakes_dropped"] > 0
    assert "ep-1" == report["faults"]["receiver_outages"][0]["endpoint_id"]
    assert report["replay"]["claims_after_nudge"] > 0


async def test_fault_flags_apply_to_a_synthetic_board() -> None:
    """A receiver outage on a synthetic board: refunded and hooks disabled rows in the table."""
    result = await cli(
        "simulate",
        "--pairs",
        "4",
        "--rate",
        "0",
        "--backlog",
        "1",
        "--consumer",
        "dead",
        "--days",
        "0.1",
        "--receiver-outage",
        "e0:0s-1h",
    )

    assert 0 == result.status, result.err
    assert "faults: e0 receiver fails" in result.out
    refunded = next(x for x in result.out.splitlines() if x.strip().startswith("refunded"))
    assert refunded.split()[1] != "0"


async def test_a_csv_history_replays(tmp_path: Path) -> None:
    """A CSV of todos alone replays; without nudge records it says what it cannot know."""
    path = tmp_path / "todos.csv"
    path.write_text(
        "id,endpoint_id,queue,created_at,claimed_at,state\n"
        "a,e,q,2026-01-01T00:00:00Z,2026-01-01T00:00:02Z,done\n"
        "b,e,q,2026-01-01T00:01:00Z,,pending\n"
        "c,e,q,2026-01-01T00:20:00Z,2026-01-01T02:00:00Z,done\n",
        encoding="utf-8",
    )

    result = await cli("simulate", "--replay", str(path), "--compare", "default,edge-only")

    assert 0 == result.status, result.err
    assert "no nudge records" in result.out
    assert "recorded nudges" not in result.out


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--replay", "/nonexistent/h.jsonl"], "--replay: cannot read '/nonexistent/h.jsonl'"),
        (["--replay", "BAD"], "BAD line 2: field 'created_at': expected an ISO 8601 instant"),
        (["--receiver-outage", "e0"], "--receiver-outage: expected ENDPOINT:FROM-UNTIL"),
        (["--receiver-outage", "e0:1h-2h:slow"], "expected fail or hang"),
        (["--sweeper-outage", "3h-1h"], "--sweeper-outage: a fault window must end after"),
        (["--lost-creation-wakes", "2"], "--lost-creation-wakes: expected a share"),
        (["--replay", EXAMPLE, "--nudges", "BAD"], "BAD line 1: expected a nudge record"),
    ],
)
async def test_bad_replay_and_fault_input_is_one_usage_line(
    tmp_path: Path, args: list[str], error: str
) -> None:
    """A missing file, a bad record, a bad fault: exit 2 and one line naming it."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"record": "window", "start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}\n'
        '{"id": "a", "endpoint_id": "e", "queue": "q", "created_at": "soon"}\n',
        encoding="utf-8",
    )
    args = [str(bad) if a == "BAD" else a for a in args]

    result = await cli("simulate", *args)

    assert 2 == result.status
    assert 1 == len(result.err.strip().splitlines()), result.err
    assert error.replace("BAD", str(bad)) in result.err


@pytest.mark.postgres
async def test_a_database_replay_reads_as_the_sweeping_role(site: pg.Site) -> None:
    """``--replay --dsn``: the host's last week, read with the sweeping role's SELECT grants."""
    async with site.host_pool() as pool:
        host = PostgresHost(pool)
        await host.add_endpoint("e1")
        await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1:9/h", secret="s")
        async with pool.acquire() as conn:
            now = await conn.fetchval("SELECT now()")
        await host.create_todo("t1", endpoint_id="e1", queue="q", created_at=now.replace(hour=0))

    result = await cli(
        "simulate", "--replay", "--dsn", site.as_role(site.cast.sweeper), "--since", "2d"
    )

    assert 0 == result.status, result.err
    assert "replay of the database" in result.out
    assert "1 todos on 1 pairs" in result.out


@pytest.mark.postgres
async def test_a_database_replay_reproduces_the_nudges_the_real_sweep_sent(site: pg.Site) -> None:
    """The docs' command on a board the real sweep ran until a minute ago: every charge the
    history kept is sent again by the spec's policy."""
    async with site.connect() as conn:
        now: datetime = await conn.fetchval("SELECT now()")
    async with site.driver(FakeClock(now - SPAN - timedelta(minutes=1))) as driver:
        sent = await run_board(driver, start=now - SPAN - timedelta(minutes=1))

    result = await cli(
        "simulate", "--replay", "--dsn", site.as_role(site.cast.sweeper), "--since", "3h"
    )

    assert 0 == result.status, result.err
    assert sent
    assert f"default reproduced {len(sent)} of {len(sent)} recorded nudges" in result.out
