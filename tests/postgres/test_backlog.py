"""A busy pair and a backlog after an outage, on the host's own rows (Postgres only).

A usual tick (a delta) reads the claims and arrivals stamped since its
watermark. A pair whose consumer keeps up resets once and is not nudged
again, however many claims it makes. After a sweeper outage the change set
can be large: a bounded count finds that, and the tick is a full pass
instead, which judges every pair exactly; the ticks after it are deltas
again and charge, a tick limit at a time, what it held back.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import DELTA_BOUND
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import POLICY, stalled_queue, sweep
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

#: Claims made while no sweeper ran: well past the most a delta reads (DELTA_BOUND changes,
#: docs/architecture.md "A delta"), so the first tick back must be a full pass.
OUTAGE_CLAIMS = 3 * DELTA_BOUND
PAIRS = [f"q{i:02}" for i in range(30)]


async def test_a_busy_pair_resets_once_and_is_not_nudged_again(pg_pool: asyncpg.Pool) -> None:
    """A nudged queue whose consumer keeps up: no nudge while it does, then nudge 1 again."""
    driver = PostgresDriver(pg_pool, FakeClock(T0))
    [old] = await stalled_queue(driver)
    wake = RecordingWake()
    first = await sweep(driver, T0 + POLICY.threshold + timedelta(seconds=1), wake)
    assert [(1, old)] == [(n.number, n.todo.id) for n in first.charged]

    # Every 15 s a todo arrives and the consumer claims the one before it: across deltas
    # and the full passes the schedule calls for, for twice the first backoff step.
    previous, at, kinds = old, driver.clock.now, set()
    for i in range(2 * POLICY.backoff[0] // timedelta(seconds=15)):
        at += timedelta(seconds=15)
        await driver.create_todo(f"f{i}", endpoint_id="ep-1", queue="lane-l", created_at=at)
        await driver.claim(previous, owner="consumer", at=at)
        await driver.complete(previous)
        previous = f"f{i}"
        report = await sweep(driver, at, wake)
        kinds.add(report.kind)
        assert () == report.charged, i

    row = (await driver.ledger_rows())["ep-1", "lane-l"]
    # The first claim (15 s after nudge 1) reset it; none after it counts again.
    assert ({"delta", "full"}, 0, first.now + timedelta(seconds=15)) == (
        kinds,
        row.nudges,
        row.progressed_at,
    )
    # The consumer stops; its last todo stalls: the kept progress makes it a first nudge.
    stalled = await sweep(driver, at + POLICY.threshold + timedelta(seconds=1), wake)
    assert [(1, previous)] == [(n.number, n.todo.id) for n in stalled.charged]
    assert [1, 1] == [n.number for n in wake.sent]


async def test_a_backlog_after_an_outage_is_judged_by_one_full_pass(
    pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """Thousands of claims while no sweeper ran: one full pass judges, deltas charge the rest."""
    start = T0 + timedelta(hours=3)
    driver = PostgresDriver(pg_pool, FakeClock(start))
    await driver.add_endpoint("ep")
    await driver.add_hook("hook", endpoint_id="ep")
    for queue in PAIRS:  # stalled for hours, capped an hour ago: silent
        await driver.create_todo(f"t-{queue}", endpoint_id="ep", queue=queue, created_at=T0)
        await pg_pool.execute(
            "INSERT INTO stall_nudge.queue_stall_nudges"
            " (endpoint_id, queue, nudges, last_nudged_at,"
            " named_todo) VALUES ('ep', $1, $2, $3, $4)",
            queue,
            POLICY.cap,
            start - timedelta(hours=1),
            f"t-{queue}",
        )
    wake = RecordingWake()
    before = await sweep(driver, start, wake)
    assert ("full", ()) == (before.kind, before.charged)

    # The outage, shorter than a full-pass interval: todos arrive and are claimed at once,
    # spread over every pair (progress for each), none of them the named ones.
    await pg_pool.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at, claimed_at, claim_owner)"
        " SELECT 'c-' || i, 'ep', ($1::text[])[i % $2 + 1], 'claimed', at, at, 'consumer'"
        "   FROM generate_series(0, $3 - 1) i,"
        "        LATERAL (SELECT $4::timestamptz + i * $5::interval) t(at)",
        PAIRS,
        len(PAIRS),
        OUTAGE_CLAIMS,
        start,
        minutes(4) / OUTAGE_CLAIMS,
    )
    with caplog.at_level(logging.INFO):
        back = await sweep(driver, start + minutes(4), wake)

    limit = POLICY.tick_limit
    assert "full" == back.kind
    assert any("this tick is a full pass" in r.getMessage() for r in caplog.records)
    assert [(q, f"t-{q}", 1) for q in PAIRS[:limit]] == [
        (n.queue, n.todo.id, n.number) for n in back.charged
    ]
    # The pairs the tick limit held back were reset (count 0, progress kept) and are held.
    held = await pg_pool.fetch("SELECT queue FROM stall_nudge.held ORDER BY queue")
    rows = await driver.ledger_rows()
    assert PAIRS[limit:] == [r["queue"] for r in held]
    assert {**dict.fromkeys(PAIRS[:limit], 1), **dict.fromkeys(PAIRS[limit:], 0)} == {
        q: row.nudges for (_, q), row in rows.items()
    }

    # Later ticks are deltas again and charge the held pairs, a tick limit at a time.
    later = [
        await sweep(driver, start + minutes(4) + timedelta(seconds=15 * k), wake)
        for k in range(1, 3)
    ]
    assert [("delta", PAIRS[limit : 2 * limit]), ("delta", PAIRS[2 * limit : 3 * limit])] == [
        (r.kind, [n.queue for n in r.charged]) for r in later
    ]
