"""The host-writes benchmark prices what it says: each variant is our indexes less its part."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
from benchmarks.host_writes import OURS, VARIANTS, host_database, host_write_rates

from adapters.postgres import HOST_TABLES

pytestmark = pytest.mark.postgres

#: Variant -> our indexes on the host's tables after migrating it (none on the bare host).
#: The host keeps its own claim index beside ours (OURS: every index migrate builds).
EXPECTED: dict[str, frozenset[str]] = {
    "bare": frozenset(),
    "ours": frozenset(OURS),
    **{f"without {name}": frozenset(OURS) - {name} for name in OURS},
}


def test_every_variant_is_priced() -> None:
    """The benchmark has the bare host, ours, and ours without each index we build, and no other."""
    assert set(EXPECTED) == set(VARIANTS)


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_a_variant_is_our_indexes_less_its_part(pg_server: str, name: str) -> None:
    """Our indexes on the host's tables are the variant's, no trigger of ours; both lives land."""
    async with AsyncExitStack() as stack:
        host = await host_database(pg_server, stack, *VARIANTS[name])
        await host.write("a")
        await host.explained("b")
        conn = host.conn
        indexes = await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'"
            " AND tablename = ANY($1::text[]) AND indexname LIKE 'stall\\_nudge\\_%'",
            list(HOST_TABLES),
        )
        triggers = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND NOT t.tgisinternal AND c.relname = ANY($1::text[])",
            list(HOST_TABLES),
        )
        lives = await conn.fetchval(
            "SELECT count(*) FROM todos WHERE state = 'done' AND claimed_at IS NOT NULL"
        )
        own_index = await conn.fetchval("SELECT to_regclass('host_claim_next') IS NOT NULL")
        ids = await conn.fetchval("SELECT pg_typeof(id)::text FROM todos LIMIT 1")

    assert EXPECTED[name] == {row["indexname"] for row in indexes}
    assert (0, 2, True, "uuid") == (triggers, lives, own_index, ids)
    assert 1 == len(host.server_us)


async def test_rates_and_server_times_come_from_every_variant_asked(pg_server: str) -> None:
    """A short run returns a positive rate and server time for each variant asked for."""
    asked = ["bare", "ours", f"without {min(OURS)}"]
    rates, server = await host_write_rates(pg_server, asked, writes=3)

    assert set(asked) == set(rates) == set(server)
    assert all(value > 0 for value in (*rates.values(), *server.values()))
