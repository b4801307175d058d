"""Bookings: successes batched and flushed on settle and close, failures at once and never lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import datetime

import asyncpg
import pytest

from adapters.http import CREATED, HookDispatcher
from adapters.memory import MemoryBoard, MemoryHooks
from adapters.postgres import PostgresHooks
from stall_core import HookHealth, TodoRef
from stall_testing import PostgresHost, Receiver
from tests.support import T0

from .conftest import FAST, SECRET

TODO = TodoRef(id="t1", created_at=T0, title="Deploy lane-l")
#: Long enough that only settle() and close() flush within a test.
NEVER = 3600.0


class Directory(MemoryHooks):
    """The memory directory, noting each booking call, and failing them all while ``down``."""

    def __init__(self, board: MemoryBoard) -> None:
        super().__init__(board)
        self.down = False
        self.batches: list[list[str]] = []
        self.failures: list[str] = []
        self._booked = asyncio.Condition()

    async def until_failures(self, count: int) -> None:
        """Return once ``count`` failures are booked; a hang guard fails a broken test."""
        async with self._booked:
            await asyncio.wait_for(self._booked.wait_for(lambda: len(self.failures) >= count), 30)

    async def record_successes(self, hook_ids: Collection[str]) -> None:
        if self.down:
            raise ConnectionResetError("database went away")
        self.batches.append(list(hook_ids))
        await super().record_successes(hook_ids)

    async def record_failure(
        self, hook_id: str, *, at: datetime, reason: str, disable_after: int
    ) -> HookHealth | None:
        if self.down:
            raise TimeoutError
        health = await super().record_failure(
            hook_id, at=at, reason=reason, disable_after=disable_after
        )
        self.failures.append(hook_id)
        async with self._booked:
            self._booked.notify_all()
        return health


async def _failing(board: MemoryBoard, hook_id: str, failures: int) -> None:
    for _ in range(failures):
        board.record_hook_delivery(hook_id, ok=False)


async def _notify(dispatcher: HookDispatcher, count: int = 1) -> None:
    for _ in range(count):
        await dispatcher.notify(endpoint_id="e1", queue="lane-l", todo=TODO, reason=CREATED)


async def test_successes_are_booked_in_one_batch_at_settle(
    board: MemoryBoard, receiver: Receiver
) -> None:
    """Delivered messages leave the counts alone until settle books them, one call for all hooks."""
    for hook in ("h1", "h2"):
        board.add_hook(hook, endpoint_id="e1", url=receiver.url(hook, SECRET), secret=SECRET)
        await _failing(board, hook, 3)
    hooks = Directory(board)

    async with HookDispatcher(hooks=hooks, policy=FAST, booking_interval=NEVER) as dispatcher:
        await _notify(dispatcher, 5)
        await receiver.wait_for(5, "h1")
        await receiver.wait_for(5, "h2")
        before = [board.hooks[h].consecutive_failures for h in ("h1", "h2")]
        await dispatcher.settle()
        after = [board.hooks[h].consecutive_failures for h in ("h1", "h2")]

    assert ([3, 3], [0, 0]) == (before, after)
    assert [["h1", "h2"]] == [sorted(batch) for batch in hooks.batches]


async def test_successes_are_booked_at_close(board: MemoryBoard, receiver: Receiver) -> None:
    """close() books the successes still collected."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("h1", SECRET), secret=SECRET)
    await _failing(board, "h1", 4)
    hooks = Directory(board)

    async with HookDispatcher(hooks=hooks, policy=FAST, booking_interval=NEVER) as dispatcher:
        await _notify(dispatcher)
        await receiver.wait_for(1, "h1")

    assert (0, [["h1"]]) == (board.hooks["h1"].consecutive_failures, hooks.batches)


async def test_a_failed_batch_is_kept_and_booked_at_the_next_flush(
    board: MemoryBoard, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch the directory refuses is logged in one line, kept, and booked once it answers."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("h1", SECRET), secret=SECRET)
    await _failing(board, "h1", 2)
    hooks = Directory(board)
    caplog.set_level(logging.WARNING, logger="adapters.http")

    async with HookDispatcher(hooks=hooks, policy=FAST, booking_interval=NEVER) as dispatcher:
        hooks.down = True
        await _notify(dispatcher)
        await dispatcher.settle()
        kept = board.hooks["h1"].consecutive_failures
        hooks.down = False
        await dispatcher.settle()

    [warning] = [r for r in caplog.records if "could not book" in r.getMessage()]
    assert (2, 0) == (kept, board.hooks["h1"].consecutive_failures)
    assert "could not book 1 delivered messages (database went away); kept for the next flush" == (
        warning.getMessage()
    )
    assert (None, None) == (warning.exc_info, warning.exc_text)


async def test_unbooked_failures_still_count_toward_the_disable(
    board: MemoryBoard, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten failures whose bookings failed are booked in order later, and the tenth disables."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("h1", SECRET), secret=SECRET)
    receiver.route("h1", 410)
    hooks = Directory(board)
    caplog.set_level(logging.WARNING, logger="adapters.http")

    async with HookDispatcher(
        hooks=hooks, policy=FAST, workers=1, booking_interval=NEVER
    ) as dispatcher:
        hooks.down = True
        await _notify(dispatcher, 10)
        await dispatcher.settle()
        still = board.hooks["h1"].consecutive_failures, board.hooks["h1"].enabled
        hooks.down = False
        await dispatcher.settle()

    hook = board.hooks["h1"]
    lines = [r for r in caplog.records if "could not book a failed delivery" in r.getMessage()]
    assert ((0, True), (10, False)) == (still, (hook.consecutive_failures, hook.enabled))
    assert "HTTP 410" == hook.disabled_reason
    # One line a failed attempt: ten at once, one more at the first settle's flush.
    assert [None] * 11 == [r.exc_info for r in lines]
    assert "timed out (no answer)" in lines[0].getMessage()


async def test_ten_consecutive_failures_disable_with_successes_batched(
    board: MemoryBoard, receiver: Receiver
) -> None:
    """Failures are booked at once: ten in a row disable the hook before any flush."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("h1", SECRET), secret=SECRET)
    receiver.script("h1", 204, *[410] * 10)
    hooks = Directory(board)

    async with HookDispatcher(
        hooks=hooks, policy=FAST, workers=1, booking_interval=NEVER
    ) as dispatcher:
        await _notify(dispatcher, 11)
        await hooks.until_failures(10)
        # No flush yet: the interval's is an hour away and settle() has not run. The one
        # batch is the success booked ahead of the first failure, as seen.
        hook = board.hooks["h1"]
        before_flush = (hook.enabled, hook.consecutive_failures, [*hooks.batches])
        await dispatcher.settle()
        hook = board.hooks["h1"]

    assert (False, 10, [["h1"]]) == before_flush
    assert (False, 10) == (hook.enabled, hook.consecutive_failures)
    assert (10, [["h1"]]) == (len(hooks.failures), hooks.batches)


async def test_a_success_seen_before_a_failure_is_booked_before_it(
    board: MemoryBoard, receiver: Receiver
) -> None:
    """Nine failures, a success, a failure: the count is 1, not 10; the hook stays enabled."""
    board.add_hook("h1", endpoint_id="e1", url=receiver.url("h1", SECRET), secret=SECRET)
    receiver.script("h1", *[410] * 9, 204, 410)
    hooks = Directory(board)

    async with HookDispatcher(
        hooks=hooks, policy=FAST, workers=1, booking_interval=NEVER
    ) as dispatcher:
        await _notify(dispatcher, 11)
        await dispatcher.settle()

    hook = board.hooks["h1"]
    assert (True, 1) == (hook.enabled, hook.consecutive_failures)


@pytest.mark.postgres
async def test_postgres_bookings_batched_and_disabling(
    pg_pool: asyncpg.Pool, receiver: Receiver
) -> None:
    """On PostgreSQL: successes reset the counts at settle, ten failures in a row disable."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    await host.add_hook("ok", endpoint_id="e1", url=receiver.url("ok", SECRET), secret=SECRET)
    await host.add_hook("gone", endpoint_id="e1", url=receiver.url("gone", SECRET), secret=SECRET)
    await pg_pool.execute("UPDATE notify_hooks SET consecutive_failures = 5")
    receiver.route("gone", 410)
    hooks = PostgresHooks(pg_pool)

    async with HookDispatcher(
        hooks=hooks, policy=FAST, workers=1, booking_interval=NEVER
    ) as dispatcher:
        await _notify(dispatcher, 5)
        await dispatcher.settle()
        rows = await pg_pool.fetch(
            "SELECT id, enabled, consecutive_failures FROM notify_hooks ORDER BY id"
        )

    assert [("gone", False, 10), ("ok", True, 0)] == [tuple(r) for r in rows]
