"""What the change log records for a ledger row deleted by hand (Postgres only).

The usual tick walks pair changes oldest first and stops once it has found
what it may charge, so each change must be stamped no later than the oldest
work it can give its pair: for a deleted row, the pair's oldest pending todo
past the gate.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy
from stall_testing import PostgresHost
from tests.postgres.test_clock import SECRET, db_now

pytestmark = pytest.mark.postgres


@pytest.fixture(name="pg_pool")
def _incremental(pg_pool_incremental: asyncpg.Pool) -> asyncpg.Pool:
    """These checks are of the incremental footprint's logs: its database."""
    return pg_pool_incremental


async def test_a_row_deleted_by_hand_is_looked_at_from_its_oldest_work(
    pg_pool: asyncpg.Pool,
) -> None:
    """Stamped with the oldest pending todo past the gate; a pair with none logs nothing."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
    now = await db_now(pg_pool)
    held, work = now - timedelta(hours=3), now - timedelta(hours=2)
    await host.add_delivery("open", endpoint_id="ep-1", verified=False, received_at=held)
    await host.create_todo(
        "gated", endpoint_id="ep-1", queue="q", created_at=held, delivery_id="open"
    )
    await host.create_todo("work", endpoint_id="ep-1", queue="q", created_at=work)
    await host.create_todo("done", endpoint_id="ep-1", queue="empty", created_at=work)
    await host.claim("done", owner="consumer", at=work)
    await host.create_todo(
        "ungated", endpoint_id="ep-1", queue="ungated", created_at=held, delivery_id="open"
    )
    # The pairs capped an hour ago; then an operator wipes the ledger.
    await pg_pool.executemany(
        "INSERT INTO queue_stall_nudges VALUES ('ep-1', $1, 5, $2)",
        [(queue, now - timedelta(hours=1)) for queue in ("q", "empty", "ungated")],
    )
    await pg_pool.execute("DELETE FROM stall_nudge.changes; DELETE FROM stall_nudge.claims")
    await pg_pool.execute(
        "INSERT INTO stall_nudge.sweeps (swept_at, full_pass_at) VALUES ($1, $1)", now
    )

    await pg_pool.execute("DELETE FROM queue_stall_nudges")

    logged = await pg_pool.fetch("SELECT endpoint_id, queue, look_after FROM stall_nudge.changes")
    assert [("ep-1", "q", work)] == [tuple(r) for r in logged]
    # The next usual tick finds the pair and charges a first nudge for its oldest work.
    ledger = PostgresLedger(pg_pool)
    outcome = await ledger.charge_due(policy=PacingPolicy())
    assert [("ep-1", "q", "work", 1)] == [
        (n.endpoint_id, n.queue, n.todo.id, n.number) for n in outcome.charged
    ]
    # The gate lets the held-back todo through: its endpoint is logged, and the pair
    # that had no work is judged at the next tick.
    await pg_pool.execute("UPDATE deliveries SET verified = true WHERE id = 'open'")
    outcome = await ledger.charge_due(policy=PacingPolicy())
    assert [("ep-1", "ungated", "ungated", 1)] == [
        (n.endpoint_id, n.queue, n.todo.id, n.number) for n in outcome.charged
    ]
