"""The imperative shell of a tick: decide and charge (ledger), apply (wake), refund.

The only asyncio in the core. It reads no clock: the ledger is the time
authority (the database's clock in production, an injected clock in tests,
the demo and the simulator), so a sidecar's own clock never enters a
decision. The event loop's monotonic timer measures tick duration only.

A charged nudge is handed to the wake port, whose receipt later tells
whether any receiver answered. One that reached nobody is refunded in the
ledger (compare-and-set), so it does not count toward the cap. Each
nudge's outcome (``DeliveryOutcome``: delivered, refused, gave up, hook
disabled) is booked in the history port and handed to ``on_delivery``.

Logging: each woken nudge is a record at info; each tick's summary is a
record at info when the tick charged, cleared or refused something, else
at debug (an idle sidecar is quiet). A run of failed ticks in ``run`` is
logged here (``FailingTicks``): one line as it starts (a traceback only
for what is not a ledger failure, a bug), one a minute with a count, one
"recovered"; ``on_error`` receives each to record or count, not to log
again. Records carry their facts as fields (``extra=``): ``tick``, and for
a nudge ``endpoint``, ``queue``, ``nudge`` and ``todo``. Names a sender chose
are escaped and cut (``printable``) in messages and fields alike, and an
error's text is cut too, so one nudge's records stay short whatever the
names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import attrs

from ._decide import next_sweep_in
from ._failing import FailingTicks, log_failed, log_recovered
from ._operate import DeliveryOutcome
from ._policy import PacingPolicy
from ._ports import (
    ExplainedReceipt,
    HistoryPort,
    LedgerError,
    LedgerPort,
    WakeError,
    WakePort,
    WakeReceipt,
)
from ._text import printable, printable_text
from ._values import ChargeOutcome, Nudge, PairKey, positive_seconds

__all__ = ["Clock", "Sweeper", "TickFailure", "TickReport"]

log = logging.getLogger("stall_core.sweeper")

#: Returns the current instant, timezone-aware (the memory ledger's and the tests' time).
Clock = Callable[[], datetime]


@attrs.frozen(kw_only=True)
class TickReport:
    """What one tick did."""

    tick: int
    #: The instant the ledger decided at, on its own clock.
    now: datetime
    charged: tuple[Nudge, ...]
    #: Ledger rows deleted because their pair has no work left (``Clear``).
    cleared: tuple[PairKey, ...]
    #: Nudges the wake port took; whether a receiver answered is known later (receipts).
    queued: int
    #: Nudges the wake port refused outright; their charges were refunded.
    refused: int
    duration_s: float
    #: Another instance held the tick, or the fleet had swept within the interval:
    #: this one decided nothing.
    skipped: bool = False
    #: When the fleet last swept, on the ledger's clock (None: the ledger keeps no record).
    swept_at: datetime | None = None
    #: What the tick judged: "full" (every pair) or "delta" (what changed); None when skipped.
    kind: str | None = None
    #: How many pairs it judged.
    judged: int = 0


@attrs.frozen(kw_only=True)
class TickFailure:
    """A tick that failed: nothing was charged, so nothing was woken."""

    tick: int
    #: One line saying why (the ledger's error text; never a secret).
    error: str
    duration_s: float


def _wait_after(result: TickReport | TickFailure, every: timedelta) -> float:
    """Seconds until the next tick: from the fleet's record, or a whole interval without one."""
    if isinstance(result, TickFailure):
        return every.total_seconds()
    return next_sweep_in(result.swept_at, result.now, every, skipped=result.skipped).total_seconds()


def _fields(tick: int, nudge: Nudge) -> dict[str, Any]:
    """The structured fields of a log record about one nudge, names escaped and cut."""
    return {
        "tick": tick,
        "endpoint": printable(nudge.endpoint_id),
        "queue": printable(nudge.queue),
        "nudge": nudge.number,
        "todo": printable(nudge.todo.id),
    }


class Sweeper:
    """One tick's work against the ports (charge, wake, refund); ``run`` repeats it.

    Any number of sweepers may run against one ledger: the ledger's tick
    lock and atomic charge make sure each wake is handed to exactly one of
    them. ``settle()`` waits for outstanding receipts and their refunds.
    """

    def __init__(
        self,
        *,
        ledger: LedgerPort,
        wake: WakePort,
        policy: PacingPolicy | None = None,
        history: HistoryPort | None = None,
        on_delivery: Callable[[DeliveryOutcome], None] | None = None,
    ) -> None:
        self._ledger = ledger
        self._wake = wake
        self._history = history
        self._on_delivery = on_delivery
        self._policy = policy if policy is not None else PacingPolicy()
        self._ticks = 0
        self._receipts: set[asyncio.Task[None]] = set()
        #: Nudges a receiver answered (their charge stands, as it should).
        self.delivered = 0
        self.refunded = 0
        #: Nudges that reached nobody and whose refund failed: they count toward the cap.
        self.unrefunded = 0

    @property
    def policy(self) -> PacingPolicy:
        return self._policy

    @property
    def ticks(self) -> int:
        """Ticks started since start, the one in progress included: the last tick's number."""
        return self._ticks

    async def tick(self, *, every: timedelta | None = None) -> TickReport:
        """Charge what is due, then hand each committed nudge to the wake port.

        With ``every`` (a looping instance's interval) the tick skips when the
        fleet swept less than that long ago. A ledger failure propagates
        (nothing was charged, nothing is woken); a wake refusal is logged,
        counted and refunded at once.
        """
        self._ticks += 1
        started = asyncio.get_running_loop().time()
        outcome = await self._ledger.charge_due(policy=self._policy, every=every)
        return await self._deliver(outcome, started)

    async def deliver(self, outcome: ChargeOutcome) -> TickReport:
        """Hand a tick the ledger committed elsewhere (an operator's nudge now) to the wake port.

        The same delivery as ``tick``'s: each charge woken, refused ones
        refunded, receipts followed, outcomes booked and reported.
        """
        self._ticks += 1
        return await self._deliver(outcome, asyncio.get_running_loop().time())

    async def _deliver(self, outcome: ChargeOutcome, started: float) -> TickReport:
        loop = asyncio.get_running_loop()
        queued = refused = 0
        for nudge in outcome.charged:
            try:
                receipt = await self._wake.wake(nudge)
            except Exception as exc:
                refused += 1
                log.warning(
                    "tick %d: wake for %s/%s (nudge %d, todo %s) failed: %s",
                    self._ticks,
                    printable(nudge.endpoint_id),
                    printable(nudge.queue),
                    nudge.number,
                    printable(nudge.todo.id),
                    printable_text(str(exc)),
                    # A refusal is an expected outcome; anything else deserves its traceback.
                    exc_info=not isinstance(exc, WakeError),
                    extra=_fields(self._ticks, nudge),
                )
                detail = printable_text(str(exc)) or type(exc).__name__
                refunded = await self._refund(nudge)
                await self._booked(nudge, "refused", detail, refunded)
            else:
                queued += 1
                log.info(
                    "tick %d: nudge %d for %s/%s (todo %s) handed to the wake port",
                    self._ticks,
                    nudge.number,
                    printable(nudge.endpoint_id),
                    printable(nudge.queue),
                    printable(nudge.todo.id),
                    extra=_fields(self._ticks, nudge),
                )
                task = asyncio.create_task(self._follow(nudge, receipt))
                self._receipts.add(task)
                task.add_done_callback(self._receipts.discard)
        busy = bool(outcome.charged or outcome.cleared or refused)
        log.log(
            logging.INFO if busy else logging.DEBUG,
            "tick %d: %s",
            self._ticks,
            "skipped (another instance holds the tick, or the fleet swept within the interval)"
            if outcome.skipped
            else f"{outcome.kind} pass judged {outcome.judged} pair(s): "
            f"charged {len(outcome.charged)}, cleared {len(outcome.cleared)}, "
            f"queued {queued}, refused {refused}",
            extra={"tick": self._ticks},
        )
        return TickReport(
            tick=self._ticks,
            now=outcome.now,
            charged=outcome.charged,
            cleared=outcome.cleared,
            queued=queued,
            refused=refused,
            duration_s=loop.time() - started,
            skipped=outcome.skipped,
            swept_at=outcome.swept_at,
            kind=outcome.kind,
            judged=outcome.judged,
        )

    async def settle(self) -> None:
        """Wait until every wake handed over so far has its outcome, and every refund is done.

        Close the wake transport first (or settle it): a receipt resolves only
        when the transport has finished with its nudge. Cancelling the wait
        (a bound around it) leaves the refunds running: ``abandon`` stops them.
        """
        while self._receipts:
            await asyncio.wait(list(self._receipts))

    async def abandon(self) -> int:
        """Stop following the receipts handed over so far, without refunding them.

        For a prompt shutdown (a cancelled embedder, a stop out of time): a
        nudge whose outcome or refund was not done yet keeps its charge,
        which costs its pair one backoff step, never work. Returns how many.
        """
        tasks = list(self._receipts)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def _follow(self, nudge: Nudge, receipt: WakeReceipt) -> None:
        """Refund the nudge unless its receipt says a receiver answered.

        A receipt that breaks its contract (raises, or is cancelled while this
        task is not) counts as "reached nobody": refunding costs at most one
        extra wake, keeping the charge could strand the pair at the cap.
        """
        try:
            reached = await receipt
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            reached = False
        except Exception:
            log.exception(
                "the receipt of %s/%s nudge %d failed",
                printable(nudge.endpoint_id),
                printable(nudge.queue),
                nudge.number,
            )
            reached = False
        if reached:
            self.delivered += 1
            await self._booked(nudge, "delivered", None, False)
            return
        detail, disabled = "no receiver answered", False
        if isinstance(receipt, ExplainedReceipt):
            detail = receipt.detail or detail
            disabled = receipt.hook_disabled
        refunded = await self._refund(nudge)
        await self._booked(nudge, "hook-disabled" if disabled else "gave-up", detail, refunded)

    async def _booked(self, nudge: Nudge, outcome: str, detail: str | None, refunded: bool) -> None:
        """Book a nudge's outcome in the history and hand it to ``on_delivery``; neither may fail.

        A failure of either is logged and the sweep goes on: the history
        entry then stays without its outcome, which ``history`` shows.
        """
        delivery = DeliveryOutcome(nudge=nudge, outcome=outcome, detail=detail, refunded=refunded)
        if self._history is not None:
            try:
                await self._history.record_outcome(delivery)
            except Exception as exc:
                log.warning(
                    "booking the outcome of %s/%s nudge %d failed: %s",
                    printable(nudge.endpoint_id),
                    printable(nudge.queue),
                    nudge.number,
                    printable_text(str(exc)),
                    exc_info=not isinstance(exc, LedgerError),
                    extra=_fields(self._ticks, nudge),
                )
        if self._on_delivery is not None:
            try:
                self._on_delivery(delivery)
            except Exception:
                log.exception(
                    "on_delivery failed for %s/%s nudge %d; the sweep goes on",
                    printable(nudge.endpoint_id),
                    printable(nudge.queue),
                    nudge.number,
                    extra=_fields(self._ticks, nudge),
                )

    async def _refund(self, nudge: Nudge) -> bool:
        """Refund a nudge that reached nobody; a failed refund only costs one pacing step."""
        try:
            refunded = await self._ledger.refund(nudge)
        except Exception as exc:
            log.error(
                "refund of %s/%s nudge %d failed; it counts toward the cap: %s",
                printable(nudge.endpoint_id),
                printable(nudge.queue),
                nudge.number,
                printable_text(str(exc)),
                exc_info=not isinstance(exc, LedgerError),
                extra=_fields(self._ticks, nudge),
            )
            self.unrefunded += 1
            return False
        if refunded:
            self.refunded += 1
            log.info(
                "%s/%s nudge %d reached no receiver: refunded, tried again on its schedule",
                printable(nudge.endpoint_id),
                printable(nudge.queue),
                nudge.number,
                extra=_fields(self._ticks, nudge),
            )
        return refunded

    async def run(
        self,
        *,
        interval: float | timedelta,
        stop: asyncio.Event,
        on_report: Callable[[TickReport], None] | None = None,
        on_error: Callable[[TickFailure], None] | None = None,
    ) -> int:
        """Tick every ``interval`` until ``stop`` is set; return the ticks run.

        Each tick goes to ``on_report``, or, when it failed, to ``on_error``
        as a ``TickFailure``. A failing tick is logged here, throttled
        (``FailingTicks``; ``on_error`` need not log it again) and the loop goes on: the queue
        is still claimable by pull, and the next tick tries again.
        """
        seconds = positive_seconds(
            "interval", interval.total_seconds() if isinstance(interval, timedelta) else interval
        )
        every = timedelta(seconds=seconds)
        loop = asyncio.get_running_loop()
        failing = FailingTicks()  # a run of failures: a line as it starts, a minute, ends
        ran = 0
        while not stop.is_set():
            started = loop.time()
            result: TickReport | TickFailure
            try:
                result = await self.tick(every=every)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log_failed(failing.failed(loop.time()), self._ticks, exc)
                result = TickFailure(
                    tick=self._ticks,
                    error=str(exc).strip() or type(exc).__name__,
                    duration_s=loop.time() - started,
                )
            else:
                log_recovered(failing.succeeded(loop.time()), self._ticks)
            self._hand_over(result, on_report, on_error)
            ran += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=_wait_after(result, every))
        return ran

    def _hand_over(
        self,
        result: TickReport | TickFailure,
        on_report: Callable[[TickReport], None] | None,
        on_error: Callable[[TickFailure], None] | None,
    ) -> None:
        try:
            if isinstance(result, TickReport):
                if on_report is not None:
                    on_report(result)
            elif on_error is not None:
                on_error(result)
        except Exception:
            # A broken report sink (a closed pipe, say) must not stop the sweep.
            log.exception(
                "tick %d: reporting failed; the loop continues",
                result.tick,
                extra={"tick": result.tick},
            )
