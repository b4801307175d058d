"""One soak sweeper process: its own asyncpg pool, HookDispatcher and ``Sweeper.run`` loop.

It journals one JSON object a line, flushed as written: ``tick`` for every
``charge_due`` (failed, skipped or ok, with the database instant it decided
at, its kind and its charges), written before any charge is woken, so no
delivery reaches the receiver without its charge on record; ``refund``
before each refund and ``refunded`` after, with the compare-and-set's result
(null when the call failed), so a worker killed mid-refund leaves a refund
of unknown outcome, not none; ``booking`` and ``booked`` around each
outcome booked in the history (``stall_nudge.history``), likewise; ``stats``,
the wakes the dispatcher dropped, once a second. Each nudge's
``meta.sent_at`` is its charge's stamp (the dispatcher's clock, inside
``wake``), so the receiver attributes every message to exactly one charge:
(endpoint, queue, sent_at).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import logging
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import asyncpg

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.postgres import DATABASE_ERRORS, PostgresHooks, PostgresLedger
from stall_core import (
    ChargeOutcome,
    DeliveryOutcome,
    Nudge,
    PacingPolicy,
    Sweeper,
    WakeReceipt,
)
from tests.stress.shared import nudge_record

#: The sweepers' connections carry this name: the fault injector and the todos audit use it.
SWEEPER_APP = "stall-nudge-sweeper"
#: Seconds instead of minutes; the production default ``PacingPolicy()`` is untouched.
SOAK_POLICY = PacingPolicy(
    threshold=timedelta(seconds=2),
    backoff=tuple(timedelta(seconds=s) for s in (1, 2, 4, 8)),
    cap=5,
    tick_limit=4,
)
#: Short attempts so hanging receivers cost a fraction of a second, not 10 s.
SOAK_DELIVERY = DeliveryPolicy(
    retry_delays=(timedelta(milliseconds=200), timedelta(milliseconds=500)),
    timeout=timedelta(milliseconds=500),
    retry_after_cap=timedelta(seconds=1),
    disable_after=10,
    max_response_bytes=16 * 1024,
)
TICK_INTERVAL = 0.25
FULL_PASS_S = 5.0
#: The claims window's lookback (how far before the last judging tick a tick reads claims,
#: and a delta the host's timestamps), on the soak's compressed scale (the library's minute
#: would make nearly every busy tick a full pass): still well past the longest claim
#: transaction here (``soak.HOLD_S`` each side of the claim).
LOOKBACK = timedelta(seconds=5)

_charged_at: contextvars.ContextVar[datetime | None] = contextvars.ContextVar(
    "charged_at", default=None
)


def dispatch_clock() -> datetime:
    """The wall clock, except inside ``StampingWake.wake``: there, the nudge's charge instant."""
    return _charged_at.get() or datetime.now(UTC)


class Journal:
    def __init__(self, stream: IO[str], worker: int) -> None:
        self._stream, self._worker = stream, worker

    def write(self, event: str, **fields: object) -> None:
        record = {"e": event, "w": self._worker, "pid": os.getpid(), **fields}
        self._stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._stream.flush()


def _failed(exc: Exception) -> dict[str, Any]:
    return {"kind": type(exc).__name__, "err": str(exc)[:200]}


class JournalingLedger:
    """A LedgerPort that journals every charge and refund before the sweeper acts on it."""

    def __init__(self, inner: PostgresLedger, journal: Journal) -> None:
        self._inner, self._journal = inner, journal

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        try:
            outcome = await self._inner.charge_due(policy=policy, every=every)
        except Exception as exc:
            self._journal.write("tick", ok=False, **_failed(exc))
            raise
        self._journal.write(
            "tick",
            at=outcome.now.isoformat(),
            ok=True,
            skipped=outcome.skipped,
            tick_kind=outcome.kind,
            charged=[nudge_record(n) for n in outcome.charged],
            drained=[list(key) for key in outcome.cleared],
        )
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        record = nudge_record(nudge)
        self._journal.write("refund", nudge=record)
        try:
            refunded = await self._inner.refund(nudge)
        except Exception as exc:
            self._journal.write("refunded", nudge=record, ok=None, **_failed(exc))
            raise
        self._journal.write("refunded", nudge=record, ok=refunded)
        return refunded


class JournalingHistory:
    """The history port: journals each outcome booked, ``booked`` null when the call failed.

    ``booking`` goes first, so a worker killed mid-call leaves an outcome of
    unknown booking, not none.
    """

    def __init__(self, inner: PostgresLedger, journal: Journal) -> None:
        self._inner, self._journal = inner, journal

    async def record_outcome(self, outcome: DeliveryOutcome) -> None:
        record = {"nudge": nudge_record(outcome.nudge), "outcome": outcome.outcome}
        self._journal.write("booking", **record)
        try:
            await self._inner.record_outcome(outcome)
        except Exception as exc:
            self._journal.write("booked", **record, ok=None, **_failed(exc))
            raise
        self._journal.write("booked", **record, ok=True)


class StampingWake:
    """The dispatcher as the sweep's WakePort, with ``sent_at`` = the nudge's stamp."""

    def __init__(self, dispatcher: HookDispatcher) -> None:
        self._dispatcher = dispatcher

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        token = _charged_at.set(nudge.charged_at)
        try:
            return await self._dispatcher.wake(nudge)
        finally:
            _charged_at.reset(token)


async def _stats(dispatcher: HookDispatcher, journal: Journal, stop: asyncio.Event) -> None:
    while not stop.is_set():
        journal.write("stats", dropped=dispatcher.stats.dropped)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def main_async(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    # Opened once at start-up, before the loop runs: blocking here stalls nothing.
    with open(args.journal, "a", encoding="utf-8") as stream:  # noqa: ASYNC230
        journal = Journal(stream, args.worker)
        journal.write("start")
        pool = None
        while pool is None and not stop.is_set():  # a (re)started worker waits out an outage
            try:
                pool = await asyncpg.create_pool(
                    args.dsn,
                    min_size=1,
                    max_size=4,
                    timeout=5,
                    command_timeout=10,
                    server_settings={"application_name": SWEEPER_APP},
                )
            except DATABASE_ERRORS:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
        if pool is None:
            return 0
        try:
            async with HookDispatcher(
                hooks=PostgresHooks(pool),
                policy=SOAK_DELIVERY,
                clock=dispatch_clock,
                queue_size=args.queue_size,
                workers=8,
            ) as dispatcher:
                ledger = PostgresLedger(
                    pool, full_pass_interval=timedelta(seconds=args.full_pass_s), lookback=LOOKBACK
                )
                sweeper = Sweeper(
                    ledger=JournalingLedger(ledger, journal),
                    wake=StampingWake(dispatcher),
                    policy=SOAK_POLICY,
                    history=JournalingHistory(ledger, journal),
                )
                stats = asyncio.create_task(_stats(dispatcher, journal, stop))
                await sweeper.run(interval=TICK_INTERVAL, stop=stop)
                await dispatcher.close(deadline=2.0)
                # Every receipt is resolved now (abandoned ones as False): refund those.
                await sweeper.settle()
                stop.set()
                await stats
        finally:
            await pool.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--queue-size", type=int, default=1000)
    parser.add_argument("--full-pass-s", type=float, default=FULL_PASS_S)
    args = parser.parse_args()
    # Expected failures (a dropped connection, a missing table) are logged by the library;
    # the soak keeps them in the worker's stderr file.
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s w{args.worker} %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
