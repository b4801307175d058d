"""PostgresHooks reuses a lookup for its ttl, and sees an operator's change once it has passed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import asyncpg
import attrs
import pytest

from adapters.postgres import PostgresHooks
from stall_testing import PostgresHost
from tests import pg
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


@attrs.frozen
class Board:
    """The host (endpoint e1, hooks h1 and h2 on every queue) and the sweeping role's pool."""

    pool: asyncpg.Pool
    host: PostgresHost
    sweeper: asyncpg.Pool

    async def change(self, sql: str, *args: object) -> None:
        """An operator's change to notify_hooks, as the host's role makes it."""
        await self.pool.execute(sql, *args)


@pytest.fixture(name="board")
async def _board(site: pg.Site) -> AsyncIterator[Board]:
    async with site.host_pool() as pool, site.sweeper_pool() as sweeper:
        host = PostgresHost(pool)
        await host.add_endpoint("e1")
        await host.add_hook("h1", endpoint_id="e1", url="http://127.0.0.1:9/h1", secret=SECRET)
        await host.add_hook("h2", endpoint_id="e1", url="http://127.0.0.1:9/h2", secret=SECRET)
        yield Board(pool, host, sweeper)


async def test_an_operators_change_is_read_once_the_ttl_has_passed(board: Board) -> None:
    """Within the ttl the cached lookup stands; the first lookup after it reads a disabled
    hook and a rotated secret."""
    ticks = Ticks()
    hooks = PostgresHooks(board.sweeper, clock=ticks)
    before = await hooks.hooks_covering("e1", "q")
    await board.host.set_hook_enabled("h1", False, at=T0, reason="operator")
    await board.change("UPDATE notify_hooks SET secret = $1 WHERE id = 'h2'", ROTATED)

    ticks.now += 0.999
    within = await hooks.hooks_covering("e1", "q")
    ticks.now += 0.001
    after = await hooks.hooks_covering("e1", "q")

    assert [("h1", SECRET), ("h2", SECRET)] == [(h.id, h.secret) for h in before]
    assert [("h1", SECRET), ("h2", SECRET)] == [(h.id, h.secret) for h in within]
    assert [("h2", ROTATED)] == [(h.id, h.secret) for h in after]


async def test_each_pair_has_its_own_entry(board: Board) -> None:
    """A lookup cached for one queue says nothing about another queue of the same endpoint."""
    hooks = PostgresHooks(board.sweeper, clock=Ticks())
    await hooks.hooks_covering("e1", "q")
    await board.change("UPDATE notify_hooks SET queues = ARRAY['q']")

    assert ["h1", "h2"] == [h.id for h in await hooks.hooks_covering("e1", "q")]
    assert [] == list(await hooks.hooks_covering("e1", "other"))


async def test_a_disable_booked_here_is_seen_at_once(board: Board) -> None:
    """The failure this directory books that disables a hook empties the cache immediately."""
    hooks = PostgresHooks(board.sweeper, clock=Ticks())
    await hooks.hooks_covering("e1", "q")

    await hooks.record_failure("h1", at=T0, reason="HTTP 500", disable_after=1)

    assert ["h2"] == [h.id for h in await hooks.hooks_covering("e1", "q")]


async def test_ttl_zero_reads_the_table_every_time(board: Board) -> None:
    """With ttl 0 nothing is reused."""
    hooks = PostgresHooks(board.sweeper, ttl=0, clock=Ticks())
    await hooks.hooks_covering("e1", "q")
    await board.host.set_hook_enabled("h1", False, at=T0, reason="operator")

    assert ["h2"] == [h.id for h in await hooks.hooks_covering("e1", "q")]


@pytest.mark.parametrize("ttl", [-1, float("nan"), float("inf"), True, "1"])
def test_a_bad_ttl_is_refused(ttl: object) -> None:
    """A negative, infinite, NaN or non-number ttl is a ValueError naming the option."""
    with pytest.raises(ValueError, match=r"^ttl must be a finite number of seconds >= 0"):
        PostgresHooks(cast(asyncpg.Pool, None), ttl=cast(float, ttl))
