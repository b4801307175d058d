"""What the reaper counts of its ticks, and whether that makes it ready: plain Python.

The one writer is the reaper, on its event loop; the readers (a Prometheus
collector, perhaps on a scrape thread, and ``Reaper.health``) copy what
they read. Counters the sweeper and the dispatcher already keep are read
from them, not counted here again. ``prometheus_client`` is an extra, so
nothing here imports it: ``stall_nudge.metrics`` translates.
"""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta

import attrs

from stall_core import TickFailure, TickReport, format_seconds, printable

from . import _text

__all__ = ["QUEUE_LABEL_MAX", "READY_INTERVALS", "TICK_BUCKETS", "Health", "Tally", "queue_label"]

#: Upper bounds (seconds) of the tick duration histogram: an idle tick takes
#: milliseconds, a call's default bound is 30 s.
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The longest ``queue`` label value, in characters: ``stall_core.printable``'s
#: width for a name, so the label reads as the name does in ``status``. A longer
#: value keeps its head and ends in ``...``, so one series stands for every name
#: alike up to the cut, and an escaped name (up to ten characters for each one
#: it escapes) costs no more than a plain one.
QUEUE_LABEL_MAX = 64
#: A tick that succeeded within this many intervals keeps the instance ready.
READY_INTERVALS = 3


def queue_label(queue: str) -> str:
    """The ``queue`` label value of a queue name: escaped and cut as ``status`` writes it (D22)."""
    return printable(queue, width=QUEUE_LABEL_MAX)


@attrs.frozen(kw_only=True)
class Health:
    """Whether the sweep loop runs (``/healthz``) and is ready (``/readyz``), and why."""

    running: bool
    ready: bool
    #: One line: the last tick and how long ago, or why the instance is not ready.
    reason: str
    #: The database's time of the last tick that succeeded (swept, or skipped).
    last_success_at: datetime | None


class Tally:
    """Tick outcomes, durations and nudges by queue since start, and the last result."""

    def __init__(self) -> None:
        self.ticks = {"ok": 0, "skipped": 0, "failed": 0}
        #: Per TICK_BUCKETS bound, ticks that took at most it and more than the one before;
        #: the last slot counts the ticks above every bound.
        self.durations = [0] * (len(TICK_BUCKETS) + 1)
        self.duration_sum = 0.0
        #: Nudges this instance charged, by ``queue_label``.
        self.nudges: dict[str, int] = {}
        #: The ledger's rows as last counted (None: not counted yet).
        self.ledger_rows: int | None = None
        #: Hooks a failed delivery of this instance disabled.
        self.disables = 0
        self.last: TickReport | TickFailure | None = None
        self.last_success: TickReport | None = None
        #: The monotonic time the last success was recorded at.
        self.last_success_mono: float | None = None

    def record(self, result: TickReport | TickFailure, *, mono: float) -> None:
        """Count one tick that ended at monotonic time ``mono``."""
        self.durations[bisect.bisect_left(TICK_BUCKETS, result.duration_s)] += 1
        self.duration_sum += result.duration_s
        self.last = result
        if isinstance(result, TickFailure):
            self.ticks["failed"] += 1
            return
        self.ticks["skipped" if result.skipped else "ok"] += 1
        for nudge in result.charged:
            label = queue_label(nudge.queue)
            self.nudges[label] = self.nudges.get(label, 0) + 1
        self.last_success, self.last_success_mono = result, mono

    def health(self, *, running: bool, interval: float | None, mono: float) -> Health:
        """Ready when the last tick succeeded within ``READY_INTERVALS`` intervals of ``mono``."""
        last, success = self.last, self.last_success
        at = None if success is None else success.now
        if last is None:
            reason = "no tick has run yet"
        elif isinstance(last, TickFailure):
            reason = f"tick {last.tick} failed: {last.error}"
        elif interval is None:
            reason = "the sweep loop is not running, and no interval was given to judge by"
        else:
            assert success is not None
            assert self.last_success_mono is not None
            age = mono - self.last_success_mono
            ago = _text.age(timedelta(seconds=age)) + " ago"
            what = "skipped: another instance holds the tick" if success.skipped else "swept"
            if age <= READY_INTERVALS * interval:
                return Health(
                    running=running,
                    ready=True,
                    reason=f"tick {success.tick} {what}, {ago}",
                    last_success_at=at,
                )
            reason = (
                f"no successful tick within {READY_INTERVALS} intervals "
                f"({format_seconds(READY_INTERVALS * interval)}): "
                f"tick {success.tick} {what}, {ago}"
            )
        return Health(running=running, ready=False, reason=reason, last_success_at=at)
