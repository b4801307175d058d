"""The wire clock: ``sent_at`` and ``webhook-timestamp`` on the ledger's time, not this host's.

The ledger decides on the database's clock (D12), so a wake must carry that
clock too: a sidecar whose own clock is ten minutes ahead would otherwise
send timestamps a consumer refuses. The wire clock is this host's clock
plus the offset last measured against the ledger's ``now``. With an
injected clock (the demo, tests) the ledger reads the same clock, so the
offset is zero.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from adapters.postgres import DATABASE_ERRORS, BoundedPool, describe, ledger_statements
from stall_core import Clock, format_seconds

__all__ = ["WireClock", "read_clock"]

log = logging.getLogger("stall_nudge.reaper")


def _wall_clock() -> datetime:
    return datetime.now(UTC)


class WireClock:
    """This host's clock moved onto the ledger's; until the ledger first answers, this host's."""

    def __init__(self, host: Clock | None = None) -> None:
        #: This host's clock: the wall clock, or the one injected into the ledger too.
        self.host: Clock = host if host is not None else _wall_clock
        self.offset: timedelta | None = None

    def __call__(self) -> datetime:
        return self.host() + (self.offset or timedelta(0))

    def measured(self, ledger_now: datetime, asked_at: datetime) -> None:
        """Take the ledger's ``now``, read just after this host's ``asked_at``."""
        first = self.offset is None
        self.offset = ledger_now - asked_at
        if first:
            self._say()

    def _say(self) -> None:
        assert self.offset is not None
        # Info, not a warning: the wire is right whatever this host's clock says (the
        # offset gauge is there to alert on).
        ahead = round(-self.offset.total_seconds())
        where = (
            "in step with it"
            if not ahead
            else f"{format_seconds(abs(ahead))} {'ahead' if ahead > 0 else 'behind'}"
        )
        log.info("wire clock: the database's (this host is %s)", where)


async def read_clock(pool: BoundedPool, clock: WireClock) -> None:
    """Measure the wire clock at start; without an answer, say which clock the wire gets."""
    asked_at = clock.host()
    try:
        row = await pool.fetchrow(ledger_statements()["now"])
    except DATABASE_ERRORS as exc:
        log.warning(
            "wire clock: this host's until a tick reads the database's (reading it failed: %s)",
            describe(exc),
        )
        return
    clock.measured(row[0], asked_at)
