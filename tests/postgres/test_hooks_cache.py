"""PostgresHooks reuses a lookup for its ttl, and sees an operator's change once it has passed."""

from __future__ import annotations

from typing import cast

import asyncpg
import pytest

from adapters.postgres import PostgresHooks
from stall_testing import PostgresHost
from tests.support import T0

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
ROTATED = "whsec_" + "B" * 32


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(name="host")
async def _host(pg_pool: asyncpg.Pool) -> PostgresHost:
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1:9/h1", secret=SECRET)
    return host


async def test_a_disabled_hook_is_dropped_once_the_ttl_has_passed(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Within the ttl the cached lookup stands; the first lookup after it reads the disable."""
    ticks = Ticks()
    hooks = PostgresHooks(pg_pool, clock=ticks)
    before = await hooks.hooks_covering("e1", "q")
    await host.set_hook_enabled("h1", False, at=T0, reason="operator")

    ticks.now += 0.999
    within = await hooks.hooks_covering("e1", "q")
    ticks.now += 0.001
    after = await hooks.hooks_covering("e1", "q")

    assert (["h1"], ["h1"], []) == ([h.id for h in before], [h.id for h in within], list(after))


async def test_a_rotated_secret_is_used_once_the_ttl_has_passed(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """A secret changed in the table replaces the cached one at the first lookup past the ttl."""
    ticks = Ticks()
    hooks = PostgresHooks(pg_pool, ttl=0.25, clock=ticks)
    await hooks.hooks_covering("e1", "q")
    await pg_pool.execute("UPDATE notify_hooks SET secret = $1 WHERE id = 'h1'", ROTATED)

    ticks.now += 0.2
    [within] = await hooks.hooks_covering("e1", "q")
    ticks.now += 0.05
    [after] = await hooks.hooks_covering("e1", "q")

    assert (SECRET, ROTATED) == (within.secret, after.secret)


async def test_each_pair_has_its_own_entry(pg_pool: asyncpg.Pool, host: PostgresHost) -> None:
    """A lookup cached for one queue says nothing about another queue of the same endpoint."""
    hooks = PostgresHooks(pg_pool, clock=Ticks())
    await hooks.hooks_covering("e1", "q")
    await pg_pool.execute("UPDATE notify_hooks SET queues = ARRAY['q'] WHERE id = 'h1'")

    assert ["h1"] == [h.id for h in await hooks.hooks_covering("e1", "q")]
    assert [] == list(await hooks.hooks_covering("e1", "other"))


async def test_a_disable_booked_here_is_seen_at_once(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """The failure this directory books that disables a hook empties the cache immediately."""
    hooks = PostgresHooks(pg_pool, clock=Ticks())
    await hooks.hooks_covering("e1", "q")

    await hooks.record_failure("h1", at=T0, reason="HTTP 500", disable_after=1)

    assert [] == list(await hooks.hooks_covering("e1", "q"))


async def test_ttl_zero_reads_the_table_every_time(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """With ttl 0 nothing is reused."""
    hooks = PostgresHooks(pg_pool, ttl=0, clock=Ticks())
    await hooks.hooks_covering("e1", "q")
    await host.set_hook_enabled("h1", False, at=T0, reason="operator")

    assert [] == list(await hooks.hooks_covering("e1", "q"))


@pytest.mark.parametrize("ttl", [-1, float("nan"), float("inf"), True, "1"])
def test_a_bad_ttl_is_refused(ttl: object) -> None:
    """A negative, infinite, NaN or non-number ttl is a ValueError naming the option."""
    with pytest.raises(ValueError, match=r"^ttl must be a finite number of seconds >= 0"):
        PostgresHooks(cast(asyncpg.Pool, None), ttl=cast(float, ttl))
