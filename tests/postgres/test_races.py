"""Two instances, one wake: two switchboard processes race for every charge.

Each race runs 200 trials between two instances on two independent asyncpg
pools, each a fresh ledger whose first tick is a full pass. A ledger takes
the fleet's tick lock before it charges; the second sweeper here runs its
full pass under a lock key of its own (as a sweeper outside the fleet's
lock), so only the statement's compare-and-set and ON CONFLICT re-check
stand between it and a second wake. A third connection holds the contested
ledger key (an uncommitted insert of the row, or a row lock) until
pg_stat_activity shows BOTH sweep statements blocked on it, so every trial
forces the hard interleaving: both statements took their snapshot and
decided "due" before either committed. Sweepers left to the timing, beside
the lock and under it, are the races' (tests/stress) and the contract's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import pytest

from adapters.postgres import TICK_LOCK_KEY, PostgresLedger
from stall_core import LedgerPort, LedgerRow, PacingPolicy, Sweeper, TickReport
from stall_testing import RecordingWake
from stall_testing.contract import stalled_queue
from tests import pg
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

TRIALS = 200
NOW = T0 + minutes(30)
#: Nudge 1 was six minutes ago: nudge 2 (after the 5-minute backoff) is due at NOW.
LAST = NOW - minutes(6)
KEY = ("ep-1", "lane-l")
#: The stalled queue's one todo: every nudge names it.
WORK = "todo-ep-1-lane-l-0"

#: Commits need not wait for the disk here: visibility and locking are unchanged.
FAST = {"synchronous_commit": "off"}

RESET_ROW = """
    INSERT INTO stall_nudge.queue_stall_nudges
           (endpoint_id, queue, nudges, last_nudged_at, named_todo)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (endpoint_id, queue) DO UPDATE
       SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at,
           named_todo = EXCLUDED.named_todo, progressed_at = NULL
"""


async def reset_no_row(conn: asyncpg.Connection) -> None:
    await conn.execute("DELETE FROM stall_nudge.queue_stall_nudges")


async def reset_due_row(conn: asyncpg.Connection) -> None:
    await conn.execute(RESET_ROW, *KEY, 1, LAST, WORK)


async def reset_progressed_row(conn: asyncpg.Connection) -> None:
    # Count 4 waits 6 h for nudge 5; only the claim after nudge 4 (the test's "taken"
    # todo, claimed half a minute before NOW) makes the pair due again, at 1. No tick has
    # read that claim yet: the fleet record (and the claims it read) goes too.
    await conn.execute(RESET_ROW, *KEY, 4, LAST, WORK)
    await conn.execute("DELETE FROM stall_nudge.ticks")


#: race name -> (reset before each trial, the number the one wake must carry)
RACES: dict[str, tuple[Callable[[asyncpg.Connection], Awaitable[None]], int]] = {
    "first-nudge insert": (reset_no_row, 1),
    "due-row update": (reset_due_row, 2),
    "progress reset": (reset_progressed_row, 1),
}


#: The unlocked sweeper's lock key: a lock no other instance takes.
UNLOCKED = TICK_LOCK_KEY + 1


@asynccontextmanager
async def holding_key(conn: asyncpg.Connection, *, row_exists: bool) -> AsyncIterator[None]:
    """Hold the pair's ledger key in an open transaction; release it (roll back) on exit."""
    tx = conn.transaction()
    await tx.start()
    try:
        if row_exists:
            await conn.execute(
                "SELECT 1 FROM stall_nudge.queue_stall_nudges"
                " WHERE endpoint_id = $1 AND queue = $2 FOR UPDATE",
                *KEY,
            )
        else:
            # An uncommitted row with the same key: both inserts must wait for its fate.
            await conn.execute(
                "INSERT INTO stall_nudge.queue_stall_nudges VALUES ($1, $2, 1, $3)",
                *KEY,
                NOW - minutes(1),
            )
        yield
    finally:
        await tx.rollback()


async def until_both_blocked(admin: asyncpg.Connection, pids: list[int]) -> None:
    """Return once both sweep backends wait on a lock (the gate); give up after 10 s."""
    blocked = 0
    async with asyncio.timeout(10):
        while 2 != blocked:
            blocked = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pid = ANY($1::int[]) AND wait_event_type = 'Lock'",
                pids,
            )
            await asyncio.sleep(0.001)  # leave the two cores to the statements waited on


@pytest.fixture(name="instances")
async def _instances(site: pg.Site) -> AsyncIterator[list[asyncpg.Pool]]:
    """Two independent one-connection pools of the sweeping role: two switchboard processes."""
    dsn = site.as_role(site.cast.sweeper)
    pools = [
        await asyncpg.create_pool(dsn, min_size=1, max_size=1, server_settings=FAST)
        for _ in range(2)
    ]
    yield pools
    for pool in pools:
        await pool.close()


@pytest.fixture(name="admin")
async def _admin(site: pg.Site) -> AsyncIterator[asyncpg.Connection]:
    """A superuser's connection outside both instances, to reset state and watch locks."""
    conn = await asyncpg.connect(site.dsn, server_settings=FAST)
    yield conn
    await conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("race", list(RACES))
async def test_two_instances_one_wake(
    race: str,
    instances: list[asyncpg.Pool],
    admin: asyncpg.Connection,
    site: pg.Site,
) -> None:
    """Two instances, one wake: every forced interleaving of each race charges exactly once."""
    reset, number = RACES[race]
    clock = FakeClock(NOW)
    host = await site.host_pool()
    driver = pg.SiteDriver(host, instances[0], clock)
    await stalled_queue(driver)
    if race == "progress reset":
        # A claim after the last nudge (and before NOW): progress since nudge 4.
        await driver.create_todo("taken", endpoint_id="ep-1", queue="lane-l", created_at=T0)
        await driver.claim("taken", owner="consumer", at=NOW - minutes(0.5))
    pids = [await pool.fetchval("SELECT pg_backend_pid()") for pool in instances]
    gate = await asyncpg.connect(site.dsn, server_settings=FAST)
    policy = PacingPolicy()

    try:
        for trial in range(TRIALS):
            await reset(admin)
            wakes = [RecordingWake(), RecordingWake()]
            ledgers: list[LedgerPort] = [
                PostgresLedger(instances[0], clock=clock),
                PostgresLedger(instances[1], clock=clock, lock_key=UNLOCKED),
            ]
            sweepers = [
                Sweeper(ledger=ledger, wake=wake, policy=policy)
                for ledger, wake in zip(ledgers, wakes, strict=True)
            ]
            async with holding_key(gate, row_exists=race != "first-nudge insert"):
                ticks = [asyncio.ensure_future(s.tick()) for s in sweepers]
                await until_both_blocked(admin, pids)
            reports: list[TickReport] = list(await asyncio.gather(*ticks))

            sent = [(i, n.number) for i, wake in enumerate(wakes) for n in wake.sent]
            assert 1 == len(sent), f"trial {trial}: wakes {sent}"
            assert number == sent[0][1], f"trial {trial}: wakes {sent}"
            assert 1 == sum(len(r.charged) for r in reports), f"trial {trial}"
            rows = await driver.ledger_rows()
            assert {
                KEY: LedgerRow(
                    endpoint_id=KEY[0],
                    queue=KEY[1],
                    nudges=number,
                    last_nudged_at=NOW,
                    named_todo=WORK,
                )
            } == rows, f"trial {trial}"
    finally:
        await gate.close()
        await host.close()
