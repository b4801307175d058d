"""Every tick reports its kind and the pairs it judged, on the command line (issue 26, item 2).

`sweep --once` (its JSON record, its line, its debug log) and `status` (the
fleet's line and JSON: the last tick's kind, the last full pass), run in
process against real PostgreSQL; the loop's records, in test_cli.py.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy
from stall_testing import PostgresHost, Receiver
from tests.cli.conftest import cli
from tests.support import JUDGED_IN

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()


async def test_sweep_once_reports_a_full_pass_and_the_pairs_it_judged(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """A one-shot sweep is a new instance: a full pass, in its JSON record, its line and its log;
    at debug an idle tick's summary is logged too."""
    as_json = await cli("sweep", "--once", "--json", "--log-level", "debug", "--dsn", pg_dsn)
    as_text = await cli("sweep", "--once", "--log-level", "debug", "--dsn", pg_dsn)

    assert (0, 0) == (as_json.status, as_text.status), as_json.err + as_text.err
    record = json.loads(as_json.out)
    assert ("ok", "full", 2) == (record["outcome"], record["kind"], record["judged"])
    assert [("lane-l", 1)] == [(c["queue"], c["nudge"]) for c in record["charged"]]
    assert re.search(r"tick: full pass judged 2" + JUDGED_IN, as_json.err), as_json.err
    # The second one-shot finds lane-l backing off: judged, not charged, an idle tick.
    assert re.search(r" tick 1: full pass judged 2 pair\(s\), charged 0,", as_text.out)
    assert (
        "tick 1: full pass judged 2 pair(s): charged 0, cleared 0, queued 0, refused 0 [tick=1]"
    ) in as_text.err


async def test_status_reports_the_last_tick_kind_and_the_last_full_pass(
    pg_dsn: str, pg_pool: asyncpg.Pool, board: PostgresHost
) -> None:
    """status says what the fleet's last tick judged, and when its last full pass ran."""
    never_json = await cli("status", "--json", "--dsn", pg_dsn)
    never_text = await cli("status", "--dsn", pg_dsn)
    ledger = PostgresLedger(pg_pool)
    full = await ledger.charge_due(policy=POLICY)
    delta = await ledger.charge_due(policy=POLICY)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)
    as_text = await cli("status", "--dsn", pg_dsn)

    assert (0, 0, 0, 0) == (never_json.status, never_text.status, as_json.status, as_text.status)
    assert ("full", 2, "delta", 0) == (full.kind, full.judged, delta.kind, delta.judged)

    fleet = json.loads(never_json.out)["fleet"]
    assert (None, None, None) == (fleet["swept_at"], fleet["last_tick_kind"], fleet["full_pass_at"])
    assert "the fleet last swept never" in never_text.out.splitlines()
    assert "its last full pass" not in never_text.out

    fleet = json.loads(as_json.out)["fleet"]
    assert ("delta", 0, 2) == (
        fleet["last_tick_kind"],
        fleet["last_tick_judged"],
        fleet["full_pass_pairs"],
    )
    assert (delta.now, full.now) == (
        datetime.fromisoformat(fleet["swept_at"]),
        datetime.fromisoformat(fleet["full_pass_at"]),
    )
    assert timedelta(0) <= timedelta(seconds=fleet["full_pass_s"])
    lines = as_text.out.splitlines()
    assert any(
        re.fullmatch(r"the fleet last swept \S+ ago: a delta tick that judged 0 pair\(s\)", line)
        for line in lines
    ), lines
    assert any(
        re.fullmatch(r"its last full pass ran \S+ ago: 2 pair\(s\) in \S+", line) for line in lines
    ), lines


async def test_sweep_takes_a_lookback_and_refuses_a_bad_one_by_name(
    pg_dsn: str, board: PostgresHost, receiver: Receiver
) -> None:
    """--lookback 0s is a lookback; a negative or unreadable one is a usage error naming it."""
    none = await cli("sweep", "--once", "--json", "--lookback", "0s", "--dsn", pg_dsn)
    negative = await cli("sweep", "--once", "--lookback=-1s", "--dsn", pg_dsn)
    unreadable = await cli("sweep", "--once", "--lookback", "soon", "--dsn", pg_dsn)

    assert (0, "full") == (none.status, json.loads(none.out)["kind"]), none.err
    for bad in (negative, unreadable):
        assert 2 == bad.status
        assert bad.err.startswith("stall-nudge: error: --lookback: "), bad.err
        assert "Traceback" not in bad.err
