"""One soak sweeper process: its own asyncpg pool, HookDispatcher and Sweeper.

Started by ``tests/stress/soak.py`` as ``python -m tests.stress.soak_worker``. It
runs the library's own ``Sweeper.run`` loop with the soak's compressed
policy and journals, one JSON object a line (flushed as written):

- ``tick``: every ``charge_due`` the sweeper made: failed, skipped (another
  instance held the tick) or ok, with the instant the ledger decided at (the
  database's clock), what it judged (``tick_kind``: a full pass or a delta) and
  the charges it got back, each with its number and
  stamp (``charged_at``), written BEFORE any of them is woken, so a delivery
  can never reach the receiver without its charge on record (a tick that
  failed after its commit charged what only the soak's ledger history shows);
- ``refund`` before each refund the sweeper asks for (the nudge's pair,
  number and stamp), then ``refunded`` with the compare-and-set's result
  (``ok`` true or false, or null with ``err`` when the call failed), so a
  worker killed mid-refund leaves a refund of unknown outcome, not none;
- ``stats``: the dispatcher's counters, once a second.

Every nudge's ``meta.sent_at`` is stamped with its charge's stamp (the
dispatcher's clock is injectable; a context variable set around ``wake``
returns ``nudge.charged_at``), so the receiver can attribute each message to
exactly one charge: (endpoint, queue, sent_at).
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
from typing import IO

import asyncpg

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.postgres import DATABASE_ERRORS, PostgresHooks, PostgresLedger
from stall_core import ChargeOutcome, Nudge, PacingPolicy, Sweeper, WakeReceipt

#: The sweepers' connections carry this name: the fault injector and the todos audit use it.
SWEEPER_APP = "stall-nudge-sweeper"

#: Seconds instead of minutes; the production default ``PacingPolicy()`` is untouched.
SOAK_POLICY = PacingPolicy(
    threshold=timedelta(seconds=2),
    backoff=(
        timedelta(seconds=1),
        timedelta(seconds=2),
        timedelta(seconds=4),
        timedelta(seconds=8),
    ),
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
#: The full pass, every few seconds by default here (``--full-pass-s``): the soak runs both
#: it and the delta between.
FULL_PASS_S = 5.0
#: How far back a delta reads the host's timestamps, on the soak's compressed scale (the
#: library's minute would make nearly every busy tick count more changes than a full pass
#: judges pairs, so a full pass): still well past the longest claim transaction here
#: (``soak.HOLD_S`` each side of the claim).
LOOKBACK = timedelta(seconds=5)

_charged_at: contextvars.ContextVar[datetime | None] = contextvars.ContextVar(
    "charged_at", default=None
)


def dispatch_clock() -> datetime:
    """The wall clock, except inside ``StampingWake.wake``: there, the nudge's charge instant."""
    stamped = _charged_at.get()
    return stamped if stamped is not None else datetime.now(UTC)


class Journal:
    """Line-buffered JSON lines; each write reaches the OS before the next statement runs."""

    def __init__(self, stream: IO[str], worker: int) -> None:
        self._stream = stream
        self._worker = worker

    def write(self, event: str, **fields: object) -> None:
        record = {"e": event, "w": self._worker, "pid": os.getpid(), **fields}
        self._stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._stream.flush()


def nudge_record(nudge: Nudge) -> dict[str, object]:
    """A nudge as a journal line holds it: everything ``stall_core.Nudge`` needs but the title."""
    return {
        "endpoint_id": nudge.endpoint_id,
        "queue": nudge.queue,
        "number": nudge.number,
        "charged_at": nudge.charged_at.isoformat(),
        "todo_id": nudge.todo.id,
        "todo_created_at": nudge.todo.created_at.isoformat(),
    }


class JournalingLedger:
    """A LedgerPort that journals every charge and refund before the sweeper acts on it."""

    def __init__(self, inner: PostgresLedger, journal: Journal) -> None:
        self._inner = inner
        self._journal = journal

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        try:
            outcome = await self._inner.charge_due(policy=policy, every=every)
        except Exception as exc:
            self._journal.write(
                "tick",
                wall=datetime.now(UTC).isoformat(),  # no database instant: it failed
                ok=False,
                kind=type(exc).__name__,
                err=str(exc)[:200],
            )
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
            self._journal.write(
                "refunded", nudge=record, ok=None, kind=type(exc).__name__, err=str(exc)[:200]
            )
            raise
        self._journal.write("refunded", nudge=record, ok=refunded)
        return refunded


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
        s = dispatcher.stats
        journal.write(
            "stats",
            accepted=s.accepted,
            dropped=s.dropped,
            refused=s.refused,
            delivered=s.delivered,
            failed=s.failed,
            retries=s.retries,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def _connect(dsn: str, stop: asyncio.Event) -> asyncpg.Pool | None:
    """The worker's pool; a (re)started worker waits out a database that is down."""
    while not stop.is_set():
        try:
            return await asyncpg.create_pool(
                dsn,
                min_size=1,
                max_size=4,
                timeout=5,
                command_timeout=10,
                server_settings={"application_name": SWEEPER_APP},
            )
        except DATABASE_ERRORS:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.5)
    return None


async def main_async(
    dsn: str, worker: int, journal_path: str, queue_size: int, full_pass_s: float
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Opened once at start-up, before the loop runs: blocking here stalls nothing.
    with open(journal_path, "a", encoding="utf-8", buffering=1) as stream:  # noqa: ASYNC230
        journal = Journal(stream, worker)
        journal.write(
            "start",
            wall=datetime.now(UTC).isoformat(),
            queue_size=queue_size,
            full_pass_s=full_pass_s,
        )
        pool = await _connect(dsn, stop)
        if pool is None:
            return 0
        try:
            async with HookDispatcher(
                hooks=PostgresHooks(pool),
                policy=SOAK_DELIVERY,
                clock=dispatch_clock,
                queue_size=queue_size,
                workers=8,
            ) as dispatcher:
                sweeper = Sweeper(
                    ledger=JournalingLedger(
                        PostgresLedger(
                            pool,
                            full_pass_interval=timedelta(seconds=full_pass_s),
                            lookback=LOOKBACK,
                        ),
                        journal,
                    ),
                    wake=StampingWake(dispatcher),
                    policy=SOAK_POLICY,
                )
                stats = asyncio.create_task(_stats(dispatcher, journal, stop))
                ran = await sweeper.run(interval=TICK_INTERVAL, stop=stop)
                await dispatcher.close(deadline=2.0)
                # Every receipt is resolved now (abandoned ones as False): refund those.
                await sweeper.settle()
                stop.set()
                await stats
                journal.write(
                    "stop", wall=datetime.now(UTC).isoformat(), ticks=ran, refunded=sweeper.refunded
                )
        finally:
            await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--queue-size", type=int, default=1000)
    parser.add_argument("--full-pass-s", type=float, default=FULL_PASS_S)
    args = parser.parse_args(argv)
    # Expected failures (a dropped connection, a missing table) are logged by the
    # library at WARNING/ERROR; the soak keeps them in the worker's stderr file.
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s w" + str(args.worker) + " %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(
        main_async(
            args.dsn,
            args.worker,
            args.journal,
            args.queue_size,
            args.full_pass_s,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
