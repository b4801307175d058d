"""The host-writes benchmark prices what it says: each variant drops exactly its part."""

from __future__ import annotations

from contextlib import AsyncExitStack

import asyncpg
import pytest
from benchmarks.host_writes import VARIANTS, host_database, host_write_rates

pytestmark = pytest.mark.postgres

#: Variant -> (changes logged, claims logged, pending indexes, our triggers on todos)
#: after two writes (each a create and a claim); None: the table does not exist.
EXPECTED: dict[str, tuple[int | None, int | None, int, int]] = {
    "bare": (None, None, 0, 0),
    "migrated": (2, 2, 2, 6),
    "without_insert_log": (0, 2, 2, 5),
    "without_claim_log": (2, 0, 2, 4),
    "without_pending_indexes": (2, 2, 0, 6),
    "without_triggers": (0, 0, 2, 0),
    "bare_queue_index": (None, None, 0, 0),
    "migrated_queue_index": (2, 2, 2, 6),
}


async def rows(conn: asyncpg.Connection, table: str) -> int | None:
    """How many rows ``table`` holds; None if it does not exist."""
    if await conn.fetchval("SELECT to_regclass($1)", table) is None:
        return None
    count: int = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return count


def test_every_variant_is_priced() -> None:
    assert set(EXPECTED) == set(VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_a_variant_drops_exactly_its_part(pg_server: str, name: str) -> None:
    async with AsyncExitStack() as stack:
        conn, write = await host_database(pg_server, stack, *VARIANTS[name])
        await write("a")
        await write("b")
        found = (
            await rows(conn, "stall_nudge_changes"),
            await rows(conn, "stall_nudge_claims"),
            await conn.fetchval(
                "SELECT count(*) FROM pg_indexes"
                " WHERE tablename = 'todos' AND indexname LIKE 'stall_nudge_todos_pending_%'"
            ),
            await conn.fetchval(
                "SELECT count(*) FROM pg_trigger"
                " WHERE tgrelid = 'todos'::regclass AND tgname LIKE 'stall_nudge_%'"
            ),
        )
        assert await conn.fetchval("SELECT count(*) FROM todos WHERE state = 'claimed'") == 2
        own_index = await conn.fetchval("SELECT to_regclass('host_claim_next') IS NOT NULL")

    assert found == EXPECTED[name]
    assert own_index == name.endswith("_queue_index")


async def test_rates_come_from_every_variant_asked(pg_server: str) -> None:
    rates = await host_write_rates(pg_server, ["bare", "migrated"], writes=3)

    assert set(rates) == {"bare", "migrated"}
    assert all(rate > 0 for rate in rates.values())
