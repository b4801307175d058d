"""Changes no timestamp shows are judged by the next full pass: late, never wrong (Postgres only).

A delta finds its pairs from the host's timestamps and our own tables. A
ledger row an operator deletes by hand, or a delivery the host verifies
later, moves no timestamp: the pair waits for the full pass, which judges
every pair afresh on the host's rows, at most one full-pass interval later.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg
import pytest

from stall_core import FULL_PASS_INTERVAL, TickReport
from stall_testing import PostgresDriver, RecordingWake
from stall_testing.contract import POLICY, sweep
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

START = T0 + timedelta(hours=3)


async def board(pool: asyncpg.Pool) -> PostgresDriver:
    """ep-1 with a hook; ``gated`` (T0) waits on an unverified delivery in q and in ungated."""
    driver = PostgresDriver(pool, FakeClock(START))
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-1", endpoint_id="ep-1")
    await driver.add_delivery("open", endpoint_id="ep-1", verified=False, received_at=T0)
    for queue in ("q", "ungated"):
        await driver.create_todo(
            f"gated-{queue}", endpoint_id="ep-1", queue=queue, created_at=T0, delivery_id="open"
        )
    return driver


async def until_charged(
    driver: PostgresDriver, since: datetime, wake: RecordingWake
) -> tuple[timedelta, TickReport]:
    """Sweep every minute from ``since`` until a tick charges: how long after, and that tick."""
    at = since
    while not (report := await sweep(driver, at, wake)).charged:
        assert at < since + FULL_PASS_INTERVAL, "no tick charged within a full-pass interval"
        at += minutes(1)
    return at - since, report


async def test_a_ledger_row_deleted_by_hand_is_judged_afresh_by_the_next_full_pass(
    pg_pool: asyncpg.Pool,
) -> None:
    """The pair's next nudge is a first one, naming its oldest gate-passing todo."""
    driver = await board(pg_pool)
    await driver.create_todo("work", endpoint_id="ep-1", queue="q", created_at=T0 + minutes(1))
    # Capped an hour ago: silent, its work claimable.
    await pg_pool.execute(
        "INSERT INTO stall_nudge.queue_stall_nudges VALUES ('ep-1', 'q', $1, $2, 'work')",
        POLICY.cap,
        START - timedelta(hours=1),
    )
    wake = RecordingWake()
    assert () == (await sweep(driver, START, wake)).charged

    await pg_pool.execute(
        "DELETE FROM stall_nudge.queue_stall_nudges"
    )  # an operator wipes the ledger
    took, report = await until_charged(driver, START + minutes(1), wake)

    assert [("q", "work", 1)] == [(n.queue, n.todo.id, n.number) for n in report.charged]
    # The deltas miss it; the full pass an interval after the first tick (START) charges it.
    assert (FULL_PASS_INTERVAL - minutes(1), "full") == (took, report.kind)
    assert 1 == (await driver.ledger_rows())["ep-1", "q"].nudges


async def test_a_delivery_verified_later_is_nudged_by_the_next_full_pass(
    pg_pool: asyncpg.Pool,
) -> None:
    """A pair whose only work waited on the gate: once the host verifies it, nudge 1."""
    driver = await board(pg_pool)
    wake = RecordingWake()
    assert () == (await sweep(driver, START, wake)).charged

    await driver.set_delivery_verified("open", True)
    took, report = await until_charged(driver, START + minutes(1), wake)

    assert [("q", "gated-q", 1), ("ungated", "gated-ungated", 1)] == sorted(
        (n.queue, n.todo.id, n.number) for n in report.charged
    )
    # The deltas miss it; the full pass an interval after the first tick (START) charges it.
    assert (FULL_PASS_INTERVAL - minutes(1), "full") == (took, report.kind)
