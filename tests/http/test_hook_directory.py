"""The hook-directory contract, written once and run on the memory board and on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

import asyncpg
import pytest

from adapters.memory import MemoryBoard, MemoryHooks
from adapters.postgres import PostgresHooks
from stall_core import HookDirectory, HookHealth
from stall_testing import PostgresHost
from tests.support import T0, FakeClock

from .conftest import SECRET

DISABLE_AFTER = 10


class HookDriver(Protocol):
    """What a scenario needs from a backend: the directory, and the host's hook verbs."""

    directory: HookDirectory

    async def add_hook(
        self, hook_id: str, *, endpoint_id: str, queues: Iterable[str] | None = None
    ) -> None: ...

    async def disable(self, hook_id: str, *, at: datetime, reason: str) -> None: ...

    async def row(self, hook_id: str) -> tuple[bool, int, datetime | None, str | None]: ...


class MemoryHookDriver:
    def __init__(self) -> None:
        self.board = MemoryBoard(clock=FakeClock(T0))
        for endpoint in ("e1", "e2"):
            self.board.add_endpoint(endpoint)
        self.directory: HookDirectory = MemoryHooks(self.board)

    async def add_hook(
        self, hook_id: str, *, endpoint_id: str, queues: Iterable[str] | None = None
    ) -> None:
        self.board.add_hook(
            hook_id,
            endpoint_id=endpoint_id,
            url="https://hooks.example/",
            secret=SECRET,
            queues=queues,
        )

    async def disable(self, hook_id: str, *, at: datetime, reason: str) -> None:
        self.board.set_hook_enabled(hook_id, False, at=at, reason=reason)

    async def row(self, hook_id: str) -> tuple[bool, int, datetime | None, str | None]:
        hook = self.board.hooks[hook_id]
        return (hook.enabled, hook.consecutive_failures, hook.disabled_at, hook.disabled_reason)


class PostgresHookDriver:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.host = PostgresHost(pool)
        self.directory: HookDirectory = PostgresHooks(pool)

    async def add_hook(
        self, hook_id: str, *, endpoint_id: str, queues: Iterable[str] | None = None
    ) -> None:
        await self.host.add_hook(
            hook_id,
            endpoint_id=endpoint_id,
            url="https://hooks.example/",
            secret=SECRET,
            queues=queues,
        )

    async def disable(self, hook_id: str, *, at: datetime, reason: str) -> None:
        await self.host.set_hook_enabled(hook_id, False, at=at, reason=reason)

    async def row(self, hook_id: str) -> tuple[bool, int, datetime | None, str | None]:
        row = await self.pool.fetchrow(
            "SELECT enabled, consecutive_failures, disabled_at, disabled_reason"
            " FROM notify_hooks WHERE id = $1",
            hook_id,
        )
        return (
            row["enabled"],
            row["consecutive_failures"],
            row["disabled_at"],
            row["disabled_reason"],
        )


class HookDirectoryContract:
    """Scenarios every HookDirectory must pass; a backend subclass supplies ``driver``."""

    async def test_covering_hooks(self, driver: HookDriver) -> None:
        """NULL covers every queue, a list its own queues; disabled and foreign hooks never."""
        await driver.add_hook("h-all", endpoint_id="e1")
        await driver.add_hook("h-lane", endpoint_id="e1", queues=["lane-l", "lane-m"])
        await driver.add_hook("h-other", endpoint_id="e1", queues=["other"])
        await driver.add_hook("h-off", endpoint_id="e1")
        await driver.disable("h-off", at=T0, reason="operator")
        await driver.add_hook("h-e2", endpoint_id="e2")

        lane = await driver.directory.hooks_covering("e1", "lane-l")
        other = await driver.directory.hooks_covering("e1", "other")
        none = await driver.directory.hooks_covering("e1", "nowhere")

        assert ["h-all", "h-lane"] == [h.id for h in lane]
        assert ["h-all", "h-other"] == [h.id for h in other]
        assert ["h-all"] == [h.id for h in none]
        assert ("e1", "https://hooks.example/", SECRET) == (
            lane[0].endpoint_id,
            lane[0].url,
            lane[0].secret,
        )

    async def test_tenth_failure_disables(self, driver: HookDriver) -> None:
        """Nine failures count up; the tenth disables the hook at the given time and reason."""
        await driver.add_hook("h1", endpoint_id="e1")

        healths = [
            await driver.directory.record_failure(
                "h1",
                at=T0 + timedelta(minutes=i),
                reason=f"HTTP 50{i % 10}",
                disable_after=DISABLE_AFTER,
            )
            for i in range(1, 11)
        ]

        assert HookHealth(consecutive_failures=9, enabled=True) == healths[8]
        assert HookHealth(consecutive_failures=10, enabled=False) == healths[9]
        assert (False, 10, T0 + timedelta(minutes=10), "HTTP 500") == await driver.row("h1")
        assert [] == list(await driver.directory.hooks_covering("e1", "lane-l"))

    async def test_success_resets_the_count(self, driver: HookDriver) -> None:
        """A success after failures puts the count back to zero."""
        await driver.add_hook("h1", endpoint_id="e1")
        for _ in range(9):
            await driver.directory.record_failure(
                "h1", at=T0, reason="HTTP 500", disable_after=DISABLE_AFTER
            )

        await driver.directory.record_success("h1")
        after = await driver.directory.record_failure(
            "h1", at=T0, reason="HTTP 500", disable_after=DISABLE_AFTER
        )

        assert HookHealth(consecutive_failures=1, enabled=True) == after

    async def test_a_batch_of_successes_resets_each_count(self, driver: HookDriver) -> None:
        """One batch puts every listed hook's count back to zero and leaves the others alone."""
        for hook in ("h1", "h2", "h3"):
            await driver.add_hook(hook, endpoint_id="e1")
            for _ in range(3):
                await driver.directory.record_failure(
                    hook, at=T0, reason="HTTP 500", disable_after=DISABLE_AFTER
                )

        await driver.directory.record_successes(["h1", "h3", "gone"])
        await driver.directory.record_successes([])

        counts = [(await driver.row(hook))[1] for hook in ("h1", "h2", "h3")]
        assert [0, 3, 0] == counts

    async def test_disabled_hook_keeps_its_first_reason(self, driver: HookDriver) -> None:
        """Failures booked after the disable count, but keep the original time and reason."""
        await driver.add_hook("h1", endpoint_id="e1")
        await driver.disable("h1", at=T0, reason="operator")

        await driver.directory.record_failure(
            "h1", at=T0 + timedelta(hours=1), reason="HTTP 500", disable_after=1
        )
        await driver.directory.record_success("h1")
        await driver.directory.record_failure(
            "h1", at=T0 + timedelta(hours=2), reason="HTTP 502", disable_after=1
        )

        assert (False, 1, T0, "operator") == await driver.row("h1")

    async def test_unknown_hook(self, driver: HookDriver) -> None:
        """Booking for a hook deleted meanwhile changes nothing and reports None."""
        await driver.directory.record_success("gone")

        assert None is await driver.directory.record_failure(
            "gone", at=T0, reason="HTTP 500", disable_after=DISABLE_AFTER
        )


class TestMemoryHooks(HookDirectoryContract):
    @pytest.fixture(name="driver")
    def _driver(self) -> HookDriver:
        return MemoryHookDriver()


@pytest.mark.postgres
class TestPostgresHooks(HookDirectoryContract):
    @pytest.fixture(name="driver")
    async def _driver(self, pg_pool: asyncpg.Pool) -> HookDriver:
        driver = PostgresHookDriver(pg_pool)
        for endpoint in ("e1", "e2"):
            await driver.host.add_endpoint(endpoint)
        return driver

    async def test_concurrent_failures_disable_once(self, driver: HookDriver) -> None:
        """Twenty concurrent failures count twenty and disable the hook once, at the tenth."""
        await driver.add_hook("h1", endpoint_id="e1")

        healths = await asyncio.gather(
            *(
                driver.directory.record_failure(
                    "h1",
                    at=T0 + timedelta(seconds=i),
                    reason=f"failure {i}",
                    disable_after=DISABLE_AFTER,
                )
                for i in range(20)
            )
        )

        enabled, failures, disabled_at, reason = await driver.row("h1")
        assert (False, 20) == (enabled, failures)
        assert 1 == sum(
            1 for h in healths if h is not None and h.consecutive_failures == DISABLE_AFTER
        )
        assert list(range(1, 21)) == sorted(
            h.consecutive_failures for h in healths if h is not None
        )
        assert reason is not None
        assert T0 + timedelta(seconds=int(reason.split()[-1])) == disabled_at
