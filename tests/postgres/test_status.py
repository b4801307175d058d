"""`status` on Postgres: the hook health of each pair, from the host's notify_hooks."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import PacingPolicy
from stall_testing import PostgresHost
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32


async def test_status_shows_failing_and_disabled_hooks_covering_the_pair(
    pg_pool: asyncpg.Pool,
) -> None:
    """A pair shows its covering hooks' worst failure count and how many are disabled."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    for hook, queues in (("failing", None), ("off", ["lane-l"]), ("elsewhere", ["lane-x"])):
        url = f"http://127.0.0.1:9/{hook}"
        await host.add_hook(hook, endpoint_id="ep-1", url=url, secret=SECRET, queues=queues)
    await pg_pool.execute("UPDATE notify_hooks SET consecutive_failures = 3 WHERE id = 'failing'")
    await pg_pool.execute("UPDATE notify_hooks SET consecutive_failures = 7 WHERE id = 'elsewhere'")
    await host.set_hook_enabled("off", False, at=T0, reason="10 failed deliveries")
    await host.create_todo("t1", endpoint_id="ep-1", queue="lane-l", created_at=T0)
    ledger = PostgresLedger(pg_pool, clock=FakeClock(T0 + minutes(10)))

    _, [status] = await ledger.status(policy=PacingPolicy())

    assert (3, 1) == (status.hook_failures, status.hooks_disabled)
