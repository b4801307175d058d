"""Booking each delivery's outcome in the hook directory: failures at once, successes batched.

The outcome of a delivery's last attempt is booked once in the hook
directory, which disables the hook after ``disable_after`` failures in a
row. Successes are collected and booked in one batch at most ``interval``
seconds later, and on ``flush_now`` and ``close``: a crash loses at most
that interval's successes, which only reset a count. Failures are booked
at once, since they drive the disable; a failure whose booking fails is
kept and booked again at the next flush, so it still counts. A success
observed before a failure of the same hook is booked before it: the order
of outcomes per hook is the order booked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

import attrs

from stall_core import Clock, HookDirectory, HookTarget, aware, printable, printable_text

__all__ = ["Bookings"]

log = logging.getLogger("adapters.http")


@attrs.frozen(kw_only=True)
class _Failure:
    """A failed delivery to book; ``reset_first``: a success seen before it is not booked yet."""

    hook: HookTarget
    at: datetime
    reason: str
    reset_first: bool


def _fault(exc: BaseException) -> str:
    """One line naming why a booking failed; never a traceback."""
    if isinstance(exc, TimeoutError):
        return f"timed out ({str(exc).strip() or 'no answer'})"
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]


class Bookings:
    """The outcomes not yet booked, and the flushes that book them, in the order seen."""

    def __init__(
        self, hooks: HookDirectory, *, clock: Clock, disable_after: int, interval: float
    ) -> None:
        self._hooks = hooks
        self._clock = clock
        self._disable_after = disable_after
        #: Hooks a booking here disabled, not yet reported by a delivery's outcome
        #: (``hook-disabled``): taken once, so a hook the host enables again starts clean.
        self._disabled: set[str] = set()
        self._interval = interval
        self._open = False
        # Unbooked outcomes: hooks with a success after their last failure (an ordered
        # set), failures in the order seen. One lock keeps bookings in that order.
        self._successes: dict[str, None] = {}
        self._in_batch: frozenset[str] = frozenset()
        self._failures: list[_Failure] = []
        self._booking = asyncio.Lock()
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._failing = False  # the last booking attempt failed

    def open(self) -> None:
        """Start flushing on a timer (the dispatcher has started)."""
        self._open = True

    def delivered(self, hook_id: str) -> None:
        """Keep a success of ``hook_id`` for the next batch."""
        self._successes[hook_id] = None
        self._schedule_flush()

    def take_disabled(self, hook_id: str) -> bool:
        """Whether a booking disabled ``hook_id`` since this was last asked; asking clears it."""
        if hook_id in self._disabled:
            self._disabled.discard(hook_id)
            return True
        return False

    async def failed(self, hook: HookTarget, reason: str) -> None:
        """Book a failed delivery now, after any of the hook's successes seen before it."""
        reset_first = hook.id in self._in_batch or hook.id in self._successes
        self._successes.pop(hook.id, None)
        at = aware("clock()", self._clock())
        self._failures.append(_Failure(hook=hook, at=at, reason=reason, reset_first=reset_first))
        async with self._booking:
            await self._book_failures()

    async def _book_failures(self) -> bool:
        """Book the kept failures in order; False (and kept, one line logged) if one fails."""
        while self._failures:
            failure = self._failures[0]
            try:
                if failure.reset_first:
                    await self._hooks.record_successes([failure.hook.id])
                    self._failures[0] = attrs.evolve(failure, reset_first=False)
                health = await self._hooks.record_failure(
                    failure.hook.id,
                    at=failure.at,
                    reason=failure.reason,
                    disable_after=self._disable_after,
                )
            except Exception as exc:
                self._failing = True
                log.warning(
                    "hook %s: could not book a failed delivery (%s); %d kept for the next flush",
                    printable(failure.hook.id),
                    printable_text(_fault(exc)),
                    len(self._failures),
                )
                self._schedule_flush()
                return False
            del self._failures[0]
            self._failing = False
            if (
                health is not None
                and not health.enabled
                and health.consecutive_failures == self._disable_after
            ):
                self._disabled.add(failure.hook.id)
                log.warning(
                    "hook %s disabled after %d consecutive failed deliveries (last: %s)",
                    printable(failure.hook.id),
                    health.consecutive_failures,
                    printable_text(failure.reason),
                )
        return True

    async def _flush(self) -> None:
        """Book what is kept: failures first (each was seen after any kept success of its hook)."""
        async with self._booking:
            if not await self._book_failures() or not self._successes:
                return
            batch = list(self._successes)
            self._successes.clear()
            self._in_batch = frozenset(batch)
            try:
                await self._hooks.record_successes(batch)
                self._failing = False
            except Exception as exc:
                self._failing = True
                # A hook that failed meanwhile has this success booked before its failure.
                failed = {failure.hook.id for failure in self._failures}
                kept = [hook_id for hook_id in batch if hook_id not in failed]
                self._successes = dict.fromkeys([*kept, *self._successes])
                log.warning(
                    "could not book %d delivered messages (%s); kept for the next flush",
                    len(kept),
                    printable_text(_fault(exc)),
                )
            finally:
                self._in_batch = frozenset()
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Flush ``booking_interval`` from now, unless one is due or running already."""
        if self._flush_timer is not None or self._flusher is not None:
            return
        if not self._open or not (self._successes or self._failures):
            return
        self._flush_timer = asyncio.get_running_loop().call_later(self._interval, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_timer = None
        self._flusher = asyncio.create_task(self._flush(), name="notify-hook-bookings")
        self._flusher.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flusher = None
        if not task.cancelled() and task.exception() is None:
            self._schedule_flush()

    async def flush_now(self) -> None:
        """Flush at once, after any flush already running."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        await self._flush()

    async def close(self, ends: float) -> None:
        """Book what is kept before the loop time ``ends``; what is left then is lost, said once."""
        loop = asyncio.get_running_loop()
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        # A directory whose last booking failed is not waited on again by a stop.
        if not self._failing and loop.time() < ends:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(ends):
                    if self._flusher is not None:
                        await asyncio.shield(self._flusher)
                    await self._flush()
        if self._flusher is not None:  # past the deadline: cut off like the deliveries
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._successes or self._failures:
            log.warning(
                "closing with %d success and %d failure bookings not made: lost",
                len(self._successes),
                len(self._failures),
            )
            self._successes.clear()
            self._failures.clear()
        self._open = False
