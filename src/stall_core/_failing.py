"""When a run of failing ticks is logged: once as it starts, then at most once a period, then once
as it ends.

A database down for an hour at a 15 s interval fails 240 ticks; one line
each buries everything else in the log. The rule is pure: the caller gives
each tick's outcome and the instant (the event loop's monotonic time, in
seconds) and logs what it is told to.
"""

from __future__ import annotations

import logging

import attrs

from ._durations import format_seconds
from ._ports import LedgerError
from ._text import printable_text

__all__ = [
    "FAILING_LOG_EVERY_S",
    "FailingTicks",
    "Recovered",
    "StillFailing",
    "log_failed",
    "log_recovered",
]

#: The sweeper's logger: these are its lines.
log = logging.getLogger("stall_core.sweeper")

#: The least time between two lines about one run of failing ticks, in seconds.
FAILING_LOG_EVERY_S = 60.0


@attrs.frozen(kw_only=True)
class StillFailing:
    """Log a line: the run goes on. ``first`` for the tick that started it."""

    first: bool
    #: Failed ticks since the last line (this one included).
    since_last: int
    #: Failed ticks in the run so far, and seconds since its first.
    total: int
    lasted_s: float


@attrs.frozen(kw_only=True)
class Recovered:
    """Log a line: a tick succeeded after ``total`` failed ones over ``lasted_s`` seconds."""

    total: int
    lasted_s: float


@attrs.define
class FailingTicks:
    """One loop's run of failing ticks, and which of its ticks get a line."""

    every_s: float = FAILING_LOG_EVERY_S
    _started_at: float | None = attrs.field(default=None, init=False)
    _logged_at: float = attrs.field(default=0.0, init=False)
    _total: int = attrs.field(default=0, init=False)
    _unlogged: int = attrs.field(default=0, init=False)

    def failed(self, at: float) -> StillFailing | None:
        """A tick failed at ``at``: the line to log, or None to stay quiet."""
        self._total += 1
        self._unlogged += 1
        if self._started_at is None:
            self._started_at = at
        elif at - self._logged_at < self.every_s:
            return None
        line = StillFailing(
            first=self._total == 1,
            since_last=self._unlogged,
            total=self._total,
            lasted_s=at - self._started_at,
        )
        self._logged_at, self._unlogged = at, 0
        return line

    def succeeded(self, at: float) -> Recovered | None:
        """A tick succeeded at ``at``: the recovery line when it ends a run, else None."""
        if self._started_at is None:
            return None
        line = Recovered(total=self._total, lasted_s=at - self._started_at)
        self._started_at, self._total, self._unlogged = None, 0, 0
        return line


def log_failed(line: StillFailing | None, tick: int, exc: Exception) -> None:
    """The line ``FailingTicks.failed`` asked for, at error; a traceback only with the first,
    and only for what is not a ledger failure (a bug)."""
    if line is None:
        return
    reason = printable_text(str(exc))
    fields = {"tick": tick, "event": "tick_failed", "failures": line.total}
    if line.first:
        log.error(
            "tick %d: sweep failed, the loop continues: %s",
            tick,
            reason,
            exc_info=not isinstance(exc, LedgerError),
            extra=fields,
        )
        return
    log.error(
        "tick %d: sweep still failing: %d failed ticks since the last line, %d in %s: %s",
        tick,
        line.since_last,
        line.total,
        format_seconds(line.lasted_s),
        reason,
        extra={**fields, "event": "tick_still_failing"},
    )


def log_recovered(line: Recovered | None, tick: int) -> None:
    """The line ``FailingTicks.succeeded`` asked for, at info."""
    if line is None:
        return
    log.info(
        "tick %d: sweep recovered after %d failed ticks over %s",
        tick,
        line.total,
        format_seconds(line.lasted_s),
        extra={"tick": tick, "event": "tick_recovered", "failures": line.total},
    )
