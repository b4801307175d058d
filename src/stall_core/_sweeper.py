"""The imperative shell of one sweep: gather (clock), decide and charge (ledger), apply (wake).

The only asyncio in the core. It reads ``now`` from an injected clock so
tests, the demo and the simulator can move time; the event loop's own
monotonic timer measures tick duration only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

import attrs

from ._policy import PacingPolicy
from ._ports import LedgerError, LedgerPort, WakeError, WakePort
from ._values import Nudge, PairKey, aware

__all__ = ["Clock", "Sweeper", "TickReport"]

log = logging.getLogger("stall_core.sweeper")

#: Returns the current instant, timezone-aware.
Clock = Callable[[], datetime]


@attrs.frozen(kw_only=True)
class TickReport:
    """What one tick did."""

    tick: int
    now: datetime
    charged: tuple[Nudge, ...]
    deleted: tuple[PairKey, ...]
    #: Nudges the wake port took (a queueing transport delivers them later).
    delivered: int
    #: Nudges the wake port refused; their charges stand.
    failed: int
    duration_s: float


class Sweeper:
    """Runs the stall sweep on the host's reaper tick.

    Any number of sweepers may run against one ledger: the ledger's atomic
    charge makes sure each wake is handed to exactly one of them.
    """

    def __init__(
        self,
        *,
        ledger: LedgerPort,
        wake: WakePort,
        clock: Clock,
        policy: PacingPolicy | None = None,
    ) -> None:
        self._ledger = ledger
        self._wake = wake
        self._clock = clock
        self._policy = policy if policy is not None else PacingPolicy()
        self._ticks = 0

    @property
    def policy(self) -> PacingPolicy:
        return self._policy

    async def tick(self) -> TickReport:
        """Charge what is due, then hand each committed nudge to the wake port.

        A ledger failure propagates (nothing was charged, nothing is woken);
        a wake failure is logged and counted, and the charge stands.
        """
        self._ticks += 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        now = aware("clock()", self._clock())
        outcome = await self._ledger.charge_due(now=now, policy=self._policy)
        delivered = failed = 0
        for nudge in outcome.charged:
            try:
                await self._wake.wake(nudge)
            except Exception as exc:
                failed += 1
                log.warning(
                    "tick %d: wake for %s/%s (nudge %d, todo %s) failed: %s",
                    self._ticks,
                    nudge.endpoint_id,
                    nudge.queue,
                    nudge.number,
                    nudge.todo.id,
                    exc,
                    # A refusal is an expected outcome; anything else deserves its traceback.
                    exc_info=not isinstance(exc, WakeError),
                )
            else:
                delivered += 1
        return TickReport(
            tick=self._ticks,
            now=now,
            charged=outcome.charged,
            deleted=outcome.deleted,
            delivered=delivered,
            failed=failed,
            duration_s=loop.time() - started,
        )

    async def run(
        self,
        *,
        interval: float,
        stop: asyncio.Event,
        on_report: Callable[[TickReport], None] | None = None,
    ) -> int:
        """Tick every ``interval`` seconds until ``stop`` is set; return the ticks run.

        A failing tick is logged with its number and the loop goes on: the
        queue is still drained by pull, and the next tick tries again.
        """
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        ran = 0
        while not stop.is_set():
            try:
                report = await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error(
                    "tick %d: sweep failed, the loop continues: %s",
                    self._ticks,
                    exc,
                    exc_info=not isinstance(exc, LedgerError),
                )
            else:
                if on_report is not None:
                    try:
                        on_report(report)
                    except Exception:
                        # A broken report sink (a closed pipe, say) must not stop the sweep.
                        log.exception("tick %d: reporting failed; the loop continues", report.tick)
            ran += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
        return ran
