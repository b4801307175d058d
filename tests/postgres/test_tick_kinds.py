"""Each source of the usual tick, alone, makes it judge (Postgres only).

A tick with nothing to judge skips the charging statement (a cheap test
first), so each source it reads must on its own be enough to make the tick
judge: an unabsorbed claim, a pair change past the threshold, an endpoint
change, a ledger row whose backoff ended, a pair held back by the tick
limit. Every case first runs a tick that looks at its setup, then makes the
one change, then ticks again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import ChargeOutcome, PacingPolicy
from stall_testing import PostgresHost
from tests.postgres.test_clock import SECRET, db_now

pytestmark = pytest.mark.postgres


@pytest.fixture(name="pg_pool")
def _incremental(pg_pool_incremental: asyncpg.Pool) -> asyncpg.Pool:
    """These checks are of the incremental footprint's logs: its database."""
    return pg_pool_incremental


POLICY = PacingPolicy()
HOURS_2 = timedelta(hours=2)


def charges(outcome: ChargeOutcome) -> list[tuple[str, str, str, int]]:
    return [(n.endpoint_id, n.queue, n.todo.id, n.number) for n in outcome.charged]


async def board(pool: asyncpg.Pool) -> tuple[PostgresHost, PostgresLedger, datetime]:
    """An endpoint with a hook; the last full pass just ran, so the next ticks are usual ones."""
    host = PostgresHost(pool)
    await host.add_endpoint("ep")
    await host.add_hook("hook", endpoint_id="ep", url="http://127.0.0.1:9/", secret=SECRET)
    now = await db_now(pool)
    await pool.execute(
        "INSERT INTO stall_nudge.sweeps (swept_at, full_pass_at) VALUES ($1, $1)", now
    )
    return host, PostgresLedger(pool), now


async def looked_at(ledger: PostgresLedger, policy: PacingPolicy = POLICY) -> ChargeOutcome:
    return await ledger.charge_due(policy=policy)


async def test_an_idle_tick_charges_and_changes_nothing(pg_pool: asyncpg.Pool) -> None:
    host, ledger, now = await board(pg_pool)
    await host.create_todo("t", endpoint_id="ep", queue="q", created_at=now - HOURS_2)
    await pg_pool.execute("INSERT INTO queue_stall_nudges VALUES ('ep', 'q', 5, $1)", now)
    await looked_at(ledger)
    before = await pg_pool.fetch("SELECT * FROM queue_stall_nudges")

    outcome = await looked_at(ledger)

    assert ([], ()) == (charges(outcome), outcome.drained)
    assert before == await pg_pool.fetch("SELECT * FROM queue_stall_nudges")


Case = Callable[[asyncpg.Pool, PostgresHost, datetime], Awaitable[None]]


async def a_claim(pool: asyncpg.Pool, host: PostgresHost, now: datetime) -> None:
    await host.claim("t0", owner="consumer")


async def a_new_todo(pool: asyncpg.Pool, host: PostgresHost, now: datetime) -> None:
    await host.create_todo("t9", endpoint_id="ep", queue="fresh", created_at=now - HOURS_2)


async def an_endpoint_resumed(pool: asyncpg.Pool, host: PostgresHost, now: datetime) -> None:
    await host.set_endpoint_state("ep2", "active")


async def a_backoff_ended(pool: asyncpg.Pool, host: PostgresHost, now: datetime) -> None:
    # An UPDATE of the ledger logs no change: the tick finds the row by its stamp.
    await pool.execute(
        "UPDATE queue_stall_nudges SET last_nudged_at = $1 WHERE queue = 'q'", now - HOURS_2
    )


async def setup_common(pool: asyncpg.Pool, host: PostgresHost, now: datetime) -> None:
    """Pair ep/q: two stalled todos, nudge 2 sent a moment ago (not due); ep2 paused."""
    for i in range(2):
        await host.create_todo(f"t{i}", endpoint_id="ep", queue="q", created_at=now - HOURS_2)
    await pool.execute("INSERT INTO queue_stall_nudges VALUES ('ep', 'q', 2, $1)", now)
    await host.add_endpoint("ep2", state="paused")
    await host.add_hook("hook2", endpoint_id="ep2", url="http://127.0.0.1:9/", secret=SECRET)
    await host.create_todo("p", endpoint_id="ep2", queue="q", created_at=now - HOURS_2)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (a_claim, [("ep", "q", "t1", 1)]),
        (a_new_todo, [("ep", "fresh", "t9", 1)]),
        (an_endpoint_resumed, [("ep2", "q", "p", 1)]),
        (a_backoff_ended, [("ep", "q", "t0", 3)]),
    ],
    ids=["claim", "pair-change", "endpoint-change", "backoff-ended"],
)
async def test_one_source_alone_makes_the_tick_judge(
    pg_pool: asyncpg.Pool, change: Case, expected: list[tuple[str, str, str, int]]
) -> None:
    host, ledger, now = await board(pg_pool)
    await setup_common(pg_pool, host, now)
    assert [] == charges(await looked_at(ledger))  # it looked: nothing due, nothing left

    await change(pg_pool, host, now)

    assert expected == charges(await looked_at(ledger))


async def test_a_pair_held_back_alone_makes_the_tick_judge(pg_pool: asyncpg.Pool) -> None:
    """Two pairs stalled at one instant, one charged a tick: the other waits held back only."""
    host, ledger, now = await board(pg_pool)
    one_at_a_time = PacingPolicy(tick_limit=1)
    for queue in ("a", "b"):
        await host.create_todo(
            f"t-{queue}", endpoint_id="ep", queue=queue, created_at=now - HOURS_2
        )

    assert [("ep", "a", "t-a", 1)] == charges(await looked_at(ledger, one_at_a_time))
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.changes")
    assert 1 == await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.held")

    assert [("ep", "b", "t-b", 1)] == charges(await looked_at(ledger, one_at_a_time))


async def test_claims_of_pairs_with_no_ledger_row_are_absorbed_without_judging(
    pg_pool: asyncpg.Pool,
) -> None:
    """A busy host's claims in pairs never nudged: the tick absorbs them and charges nothing."""
    host, ledger, now = await board(pg_pool)
    for i in range(2):
        await host.create_todo(f"t{i}", endpoint_id="ep", queue="busy", created_at=now)
    await looked_at(ledger)  # the new todos are not stalled yet: nothing to judge

    await host.claim("t0", owner="consumer")
    logged = await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.claims")
    outcome = await looked_at(ledger)

    assert (1, [], ()) == (logged, charges(outcome), outcome.drained)
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.claims")
    assert 0 == await pg_pool.fetchval("SELECT count(*) FROM queue_stall_nudges")
