"""The logs after a sweeper outage: compacted, a range at a time, then judged (Postgres only).

Every claim and every arrival while no sweeper ran waits in the logs. A tick
that finds ``compact_at`` rows in one first compacts both, committing as it
goes, and judges once it got through: no single statement has to read the
whole backlog within the tick's timeout. Compacting keeps exactly what a
tick reads: each pair's latest claim (none of a pair with no ledger row),
and each pair's or endpoint's oldest change past the threshold. The
differential test runs the same random histories with a ledger that compacts
on nearly every tick (``test_postgres_differential.py``).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from adapters.postgres.sql import queries
from stall_core import ChargeOutcome, PacingPolicy
from stall_testing import PostgresHost
from tests.postgres.test_clock import SECRET, db_now

pytestmark = pytest.mark.postgres


@pytest.fixture(name="pg_pool")
def _incremental(pg_pool_incremental: asyncpg.Pool) -> asyncpg.Pool:
    """These checks are of the incremental footprint's logs: its database."""
    return pg_pool_incremental


POLICY = PacingPolicy()
SQL = queries("adapters.postgres", "ledger.sql")
HOURS_2 = timedelta(hours=2)
MS = timedelta(milliseconds=1)
#: Past every block of a small log.
WHOLE_LOG = ((0, 0), (1_000_000, 0))


async def board(pool: asyncpg.Pool) -> tuple[PostgresHost, datetime]:
    """An endpoint with a hook; the last full pass just ran, so ticks are usual ones."""
    host = PostgresHost(pool)
    await host.add_endpoint("ep")
    await host.add_hook("hook", endpoint_id="ep", url="http://127.0.0.1:9/", secret=SECRET)
    now = await db_now(pool)
    await pool.execute(
        "INSERT INTO stall_nudge.sweeps (swept_at, full_pass_at) VALUES ($1, $1)", now
    )
    return host, now


async def log_claims(pool: asyncpg.Pool, queue: str, *claimed_at: datetime) -> None:
    await pool.executemany(
        "INSERT INTO stall_nudge.claims VALUES ('ep', $1, $2)", [(queue, at) for at in claimed_at]
    )


async def test_a_tick_resets_a_busy_pair_and_clears_its_claims(pg_pool: asyncpg.Pool) -> None:
    """A hot queue's claims between two ticks are progress: its row and every claim go."""
    host, now = await board(pg_pool)
    await host.create_todo("fresh", endpoint_id="ep", queue="q", created_at=now)
    await pg_pool.execute("INSERT INTO queue_stall_nudges VALUES ('ep', 'q', 2, $1)", now)
    # The latest instant twice, then older ones; and a pair never nudged.
    await log_claims(pg_pool, "q", now - MS, now - MS, *(now - i * MS for i in range(2, 3000)))
    await log_claims(pg_pool, "never-nudged", *(now - i * MS for i in range(1, 100)))

    outcome = await PostgresLedger(pg_pool).charge_due(policy=POLICY)

    assert ((), ()) == (outcome.charged, outcome.drained)
    left = await pg_pool.fetch("SELECT queue, claimed_at FROM stall_nudge.claims")
    rows = await pg_pool.fetchval("SELECT count(*) FROM queue_stall_nudges")
    assert ([], 0) == ([tuple(r) for r in left], rows)


async def test_compacting_claims_keeps_each_pairs_latest_if_it_has_a_ledger_row(
    pg_pool: asyncpg.Pool,
) -> None:
    _, now = await board(pg_pool)
    await pg_pool.execute("INSERT INTO queue_stall_nudges VALUES ('ep', 'nudged', 5, $1)", now)
    await log_claims(pg_pool, "nudged", now - 3 * MS, now - MS, now - 2 * MS, now - MS)
    await log_claims(pg_pool, "never-nudged", now, now - MS)

    await pg_pool.execute(SQL["compact_claims"], *WHOLE_LOG)

    left = await pg_pool.fetch("SELECT queue, claimed_at FROM stall_nudge.claims")
    assert [("nudged", now - MS)] == [tuple(r) for r in left]


async def test_compacting_changes_keeps_the_oldest_past_the_threshold_of_each(
    pg_pool: asyncpg.Pool,
) -> None:
    _, now = await board(pg_pool)
    past = now - POLICY.threshold - MS  # past the threshold (strictly older)
    edge = now - POLICY.threshold  # exactly that old: not yet past it
    changes = [
        ("ep", "q", past - HOURS_2),
        ("ep", "q", past),
        ("ep", "q", None),  # '-infinity': a pair that lost a todo other than by a claim
        ("ep", "q", edge),
        ("ep", "q", now),
        ("ep", None, past),
        ("ep", None, past - HOURS_2),
        ("ep", "r", past),
        ("ep2", "q", past),
    ]
    await pg_pool.execute("DELETE FROM stall_nudge.changes")  # the hook's, looked at already
    await pg_pool.executemany(
        "INSERT INTO stall_nudge.changes VALUES ($1, $2, coalesce($3::timestamptz, '-infinity'))",
        changes,
    )

    await pg_pool.execute(SQL["compact_changes"], now, POLICY.threshold // MS * 1000, *WHOLE_LOG)

    left = await pg_pool.fetch(
        "SELECT endpoint_id, queue, nullif(look_after, '-infinity') FROM stall_nudge.changes"
        " ORDER BY endpoint_id, queue NULLS FIRST, look_after"
    )
    assert [
        ("ep", None, past - HOURS_2),
        ("ep", "q", None),
        ("ep", "q", edge),
        ("ep", "q", now),
        ("ep", "r", past),
        ("ep2", "q", past),
    ] == [tuple(r) for r in left]


async def test_a_backlog_is_compacted_over_ticks_then_judged(pg_pool: asyncpg.Pool) -> None:
    """One compaction statement a tick: each commits its part; the tick that gets through judges."""
    host, now = await board(pg_pool)
    pairs = [f"q{i:02}" for i in range(30)]
    for queue in pairs:  # capped an hour ago, work stalled, then claims: all reset
        await host.create_todo(
            f"t-{queue}", endpoint_id="ep", queue=queue, created_at=now - HOURS_2
        )
        await pg_pool.execute(
            "INSERT INTO queue_stall_nudges VALUES ('ep', $1, 5, $2)", queue, now - HOURS_2 / 2
        )
    await pg_pool.execute("DELETE FROM stall_nudge.changes")  # looked at already
    # Interleaved, as claims arrive: every block holds claims of every pair.
    await pg_pool.executemany(
        "INSERT INTO stall_nudge.claims VALUES ('ep', $1, $2)",
        [(queue, now - (i * 30 + k) * MS) for i in range(20) for k, queue in enumerate(pairs)],
    )
    blocks = [
        await pg_pool.fetchval(SQL["log_blocks"], log)
        for log in ("stall_nudge.claims", "stall_nudge.changes")
    ]
    ledger = PostgresLedger(pg_pool, compact_at=40, compact_for=1e-9)

    logged = [await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.claims")]
    outcomes: list[ChargeOutcome] = []
    while not (outcomes and outcomes[-1].charged) and len(outcomes) < 20:
        outcomes.append(await ledger.charge_due(policy=POLICY))
        logged.append(await pg_pool.fetchval("SELECT count(*) FROM stall_nudge.claims"))

    # One tick per block of either log (each claims block compacts some), the last one
    # judging too.
    assert (600, sum(blocks)) == (logged[0], len(outcomes)), (blocks, logged)
    assert all(a > b for a, b in itertools.pairwise(logged[: blocks[0] + 1])), logged
    assert [[(n.queue, n.number) for n in o.charged] for o in outcomes] == [
        *([] for _ in range(sum(blocks) - 1)),
        [(q, 1) for q in pairs[:4]],
    ]
    # The pairs the tick limit held back were reset: no row, no claim, held for nudge 1.
    held = await pg_pool.fetch("SELECT queue FROM stall_nudge.held ORDER BY queue")
    rows = await pg_pool.fetch("SELECT queue FROM queue_stall_nudges ORDER BY queue")
    assert (0, pairs[4:], pairs[:4]) == (
        logged[-1],
        [r["queue"] for r in held],
        [r["queue"] for r in rows],
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compact_at": 0}, r"^compact_at must be an integer >= 1, got 0$"),
        ({"compact_at": True}, r"^compact_at must be an integer >= 1, got True$"),
        ({"compact_for": 0}, r"^compact_for must be a positive number of seconds, got 0$"),
        ({"compact_for": 30.0}, r"^compact_for must be under timeout \(30.0\), got 30.0$"),
    ],
)
async def test_bad_compaction_options_are_refused_naming_them(
    pg_pool: asyncpg.Pool, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PostgresLedger(pg_pool, **options)  # type: ignore[arg-type]
