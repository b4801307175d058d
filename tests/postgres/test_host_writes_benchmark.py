"""The host-writes benchmark prices what it says: each variant is its footprint less its part."""

from __future__ import annotations

from contextlib import AsyncExitStack

import asyncpg
import pytest
from benchmarks.host_writes import VARIANTS, host_database, host_write_rates

pytestmark = pytest.mark.postgres

#: Variant -> (claims logged, changes logged, our indexes on todos, our triggers on todos)
#: after two writes (each a create and a claim).
EXPECTED: dict[str, tuple[int, int, int, int]] = {
    "bare": (0, 0, 0, 0),
    "lean": (0, 0, 3, 0),
    "lean_without_claimed_index": (0, 0, 2, 0),
    "lean_without_long_indexes": (0, 0, 1, 0),
    "incremental": (2, 2, 3, 7),
    "incremental_without_claim_log": (0, 2, 3, 5),
    "incremental_without_change_log": (2, 0, 3, 5),
}


async def count(conn: asyncpg.Connection, sql: str) -> int:
    found: int = await conn.fetchval(sql)
    return found


def test_every_variant_is_priced() -> None:
    """Each variant of the benchmark has its expected parts here."""
    assert set(EXPECTED) == set(VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_a_variant_is_its_footprint_less_its_part(pg_server: str, name: str) -> None:
    """Logs, our indexes and our triggers on todos are the variant's, and both writes land."""
    async with AsyncExitStack() as stack:
        host = await host_database(pg_server, stack, *VARIANTS[name])
        await host.write("a")
        await host.explained("b")
        conn = host.conn
        migrated = await count(
            conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'stall_nudge'"
        )
        found = (
            await count(conn, "SELECT count(*) FROM stall_nudge.claims") if migrated else 0,
            await count(conn, "SELECT count(*) FROM stall_nudge.changes") if migrated else 0,
            await count(
                conn,
                "SELECT count(*) FROM pg_indexes"
                " WHERE tablename = 'todos' AND indexname LIKE 'stall_nudge_%'",
            ),
            await count(
                conn,
                "SELECT count(*) FROM pg_trigger"
                " WHERE tgrelid = 'todos'::regclass AND tgname LIKE 'stall_nudge_%'",
            ),
        )
        claimed = await count(conn, "SELECT count(*) FROM todos WHERE state = 'claimed'")
        own_index = await conn.fetchval("SELECT to_regclass('host_claim_next') IS NOT NULL")
        ids = await conn.fetchval("SELECT pg_typeof(id)::text FROM todos LIMIT 1")

    assert EXPECTED[name] == found
    assert (2, True, "uuid") == (claimed, own_index, ids)
    assert 1 == len(host.server_us)


async def test_rates_and_server_times_come_from_every_variant_asked(pg_server: str) -> None:
    """A short run returns a positive rate and server time for each variant asked for."""
    rates, server = await host_write_rates(pg_server, ["bare", "lean"], writes=3)

    assert {"bare", "lean"} == set(rates) == set(server)
    assert all(value > 0 for value in (*rates.values(), *server.values()))
