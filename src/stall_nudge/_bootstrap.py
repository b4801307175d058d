"""The one composition function: ``open_reaper`` and every command build their parts here.

As cosmicpython's ``bootstrap`` does, one function wires the adapters to
the core, and its callers differ only in what they pass: the database (a
DSN, or a pool the caller keeps), the clock (None: the database's, as in
production; the demo and tests inject theirs), and the adapters' bounds.
Nothing is started or checked here: ``open_reaper`` checks the database
and starts the dispatcher, a command uses only the parts it needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import asyncpg
import attrs

from adapters.http import HookDispatcher
from adapters.postgres import (
    HISTORY_RETENTION,
    LOOKBACK,
    BoundedPool,
    PostgresHooks,
    PostgresLedger,
)
from stall_core import FULL_PASS_INTERVAL, Clock, DeliveryOutcome, PacingPolicy, Sweeper

from ._connect import connect
from ._tally import Tally
from ._watch import BoundedDispatcher, WatchedHooks, WatchedLedger
from ._wire_clock import WireClock

__all__ = ["QUEUE_SIZE", "TIMEOUT_S", "Parts", "bootstrap"]

#: Seconds any one database call may take (the ledger's default).
TIMEOUT_S = 30.0
#: Deliveries the dispatcher holds at most (a bounded in-process queue: docs/architecture.md).
QUEUE_SIZE = 1000


@attrs.frozen(kw_only=True)
class Parts:
    """One database's adapters wired to the core: nothing started, nothing checked yet."""

    pool: asyncpg.Pool
    #: Whether ``pool`` was opened here (on a DSN); a pool passed in stays the caller's.
    owns_pool: bool
    #: ``pool`` with every call bounded by ``timeout``.
    bounded: BoundedPool
    #: Always the spec's numbers (docs/architecture.md); only simulations and tests build others.
    policy: PacingPolicy
    #: Seconds any one database call, or a hand-over to the dispatcher, may take.
    timeout: float
    refuse_private: bool
    #: The ledger itself: ``status`` and the fleet record read it.
    ledger: PostgresLedger
    dispatcher: HookDispatcher
    #: The dispatcher's hand-overs, bounded: the sweep's wake port and the host's notifies.
    wake: BoundedDispatcher
    #: The core's Sweeper: its ticks charge through the watched ledger and wake through ``wake``.
    sweeper: Sweeper
    tally: Tally
    wire_clock: WireClock


@asynccontextmanager
async def bootstrap(
    database: str | asyncpg.Pool,
    *,
    clock: Clock | None = None,
    # Each database call's bound, not this call's: PostgresLedger(timeout=...) names it so.
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109
    max_size: int = 4,
    lookback: timedelta = LOOKBACK,
    full_pass_interval: timedelta = FULL_PASS_INTERVAL,
    refuse_private: bool = False,
    queue_size: int = QUEUE_SIZE,
    history_retention: timedelta = HISTORY_RETENTION,
    on_delivery: Callable[[DeliveryOutcome], None] | None = None,
) -> AsyncIterator[Parts]:
    """The parts on ``database``; a pool opened on a DSN (``max_size`` connections) is closed after.

    ``clock`` replaces the database's clock for the ledger and the wire
    (the demo's accelerated time, tests).
    """
    async with _pool(database, timeout, max_size) as (pool, owns_pool):
        bounded = BoundedPool(pool, timeout)
        tally, wire_clock, policy = Tally(), WireClock(clock), PacingPolicy()
        dispatcher = HookDispatcher(
            hooks=WatchedHooks(PostgresHooks(bounded), tally),
            clock=wire_clock,
            refuse_private=refuse_private,
            queue_size=queue_size,
        )
        wake = BoundedDispatcher(dispatcher, timeout)
        ledger = PostgresLedger(
            pool,
            clock=clock,
            timeout=timeout,
            lookback=lookback,
            full_pass_interval=full_pass_interval,
            history_retention=history_retention,
        )
        yield Parts(
            pool=pool,
            owns_pool=owns_pool,
            bounded=bounded,
            policy=policy,
            timeout=timeout,
            refuse_private=refuse_private,
            ledger=ledger,
            dispatcher=dispatcher,
            wake=wake,
            sweeper=Sweeper(
                ledger=WatchedLedger(ledger, pool=bounded, clock=wire_clock, tally=tally),
                wake=wake,
                policy=policy,
                history=ledger,
                on_delivery=on_delivery,
            ),
            tally=tally,
            wire_clock=wire_clock,
        )


@asynccontextmanager
async def _pool(
    database: str | asyncpg.Pool,
    timeout: float,  # noqa: ASYNC109 - each statement's bound, passed on to connect
    max_size: int,
) -> AsyncIterator[tuple[asyncpg.Pool, bool]]:
    """The pool to use, and whether it is ours: one opened on a DSN; the caller's stays open."""
    if isinstance(database, str):
        async with connect(database, timeout=timeout, max_size=max_size) as pool:
            yield pool, True
    else:
        yield database, False
