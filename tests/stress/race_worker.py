"""One race sweeper process: its own asyncpg pool, a PostgresLedger on the database clock.

Started by ``tests/stress/races.py`` under libfaketime (its wall clock is
shifted on purpose: no decision may read it) as
``python -m tests.stress.race_worker --dsn DSN --worker N``. It reads one
JSON command a line on stdin and answers each with one JSON line on stdout:

- ``{"cmd": "hello"}``: answers its pid and its own wall clock, so the
  coordinator can see the shift took effect;
- ``{"cmd": "tick", "wake": {"<endpoint>/<queue>": "lost" | "refuse"}}``:
  one ``Sweeper.tick()`` then ``settle()``. Pairs not named are reached; a
  ``lost`` pair's wake is accepted and reaches nobody, a ``refuse`` pair's
  is refused outright (``RecordingWake(reach=False)`` and ``refuse=True``).
  The answer lists what the tick decided (``skipped``, ``now``, ``kind``, the
  charges and deletions, in the ledger's own words), a database-clock read
  taken once the tick had committed (``done``), and every refund the settle
  made, with its result and database-clock reads before it began and after
  it committed (a refund races other instances' ticks).

End of input (or ``{"cmd": "exit"}``) closes the pool and exits 0.

``--fault`` runs a deliberately broken ledger: a correct ``PostgresLedger``
wrapped in Python that breaks what it returns or writes (no statement of the
library is edited). Each is a positive control of the judge (``races.py
--fault``) and must make its count non-zero:

- ``double-hand``: every charged nudge is handed to the sweeper twice, so it
  is woken twice (duplicates);
- ``rewind``: after each charge the row's ``last_nudged_at`` is moved back to
  just before the pair's latest claim, which that charge consumed, so the
  claim counts as progress again (double_resets);
- ``skip-refund``: a nudge that reached nobody is never refunded (stranded);
- ``hide-charge``: charges commit but are never returned, so never woken (lost).

``outside-lock`` is the negative control: worker 0 sweeps beside the fleet
under a lock key of its own (``PostgresLedger(lock_key=...)``, as an older
build without the tick lock would during a deploy), every one of its ticks a
full pass; only the compare-and-set of each write keeps a wake from being
charged twice, and the judge must find nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import attrs

from adapters.postgres import TICK_LOCK_KEY, PostgresLedger
from stall_core import (
    ChargeOutcome,
    LedgerPort,
    Nudge,
    PacingPolicy,
    Sweeper,
    WakeReceipt,
)
from stall_testing import RecordingWake

#: The sweepers' connections carry this name (pg_stat_activity, logs).
SWEEPER_APP = "stall-races-sweeper"
#: The broken ledgers (positive controls) and the instance beside the fleet's lock.
BROKEN = ("double-hand", "rewind", "skip-refund", "hide-charge")
OUTSIDE = "outside-lock"
FAULTS = ("none", *BROKEN, OUTSIDE)
#: The worker that sweeps beside the fleet in ``outside-lock``, and its lock key.
OUTSIDER = 0
OUTSIDE_LOCK_KEY = TICK_LOCK_KEY + 1
#: How often the fleet's ledgers run a full pass: often, so the races run both full
#: passes and deltas. The outsider's every tick is one (a microsecond's interval).
FULL_PASS_INTERVAL = timedelta(milliseconds=400)
OUTSIDER_FULL_PASS_INTERVAL = timedelta(microseconds=1)

#: ``rewind``: the row a charge wrote, its stamp moved to just before the pair's latest
#: claim when that claim is at or before the stamp (consumed by the charge). Test SQL of
#: this harness, on the ledger's own table; no statement of the library is changed.
REWIND = """
UPDATE stall_nudge.queue_stall_nudges r
   SET last_nudged_at = c.latest - interval '1 millisecond'
  FROM (SELECT max(t.claimed_at) AS latest FROM todos t
         WHERE t.endpoint_id = $1 AND t.queue = $2) c
 WHERE r.endpoint_id = $1 AND r.queue = $2 AND r.nudges = $3 AND r.last_nudged_at = $4
   AND c.latest IS NOT NULL AND c.latest <= r.last_nudged_at
"""


class BrokenLedger:
    """A correct PostgresLedger, its results or writes broken from Python: a positive control."""

    def __init__(self, inner: PostgresLedger, pool: asyncpg.Pool, fault: str) -> None:
        if fault not in BROKEN:
            raise ValueError(f"unknown fault {fault!r}")
        self._inner = inner
        self._pool = pool
        self._fault = fault

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        outcome = await self._inner.charge_due(policy=policy, every=every)
        if self._fault == "double-hand":
            return attrs.evolve(
                outcome, charged=tuple(n for n in outcome.charged for _ in range(2))
            )
        if self._fault == "hide-charge":
            return attrs.evolve(outcome, charged=())
        if self._fault == "rewind":
            for n in outcome.charged:
                await self._pool.execute(REWIND, n.endpoint_id, n.queue, n.number, n.charged_at)
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        if self._fault == "skip-refund":
            return False
        return await self._inner.refund(nudge)


#: A refund, its result, and database clock reads before it began and after it committed.
RefundRecord = tuple[Nudge, bool | str, datetime, datetime]


class Recorder:
    """The ledger as the sweep's LedgerPort, recording what the coordinator's judge needs.

    After each tick, a database-clock read taken once it committed (``done``):
    the tick's snapshot and writes lie between its ``now`` and that. Every
    refund, with its result and database-clock reads before it began and
    after it committed: a refund races other instances' ticks.
    """

    def __init__(self, inner: LedgerPort, pool: asyncpg.Pool) -> None:
        self._inner = inner
        self._pool = pool
        self.done: datetime | None = None
        self.refunds: list[RefundRecord] = []

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        outcome = await self._inner.charge_due(policy=policy, every=every)
        self.done = await self._pool.fetchval("SELECT clock_timestamp()")
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        lb: datetime = await self._pool.fetchval("SELECT clock_timestamp()")
        try:
            refunded = await self._inner.refund(nudge)
        except Exception as exc:
            ub: datetime = await self._pool.fetchval("SELECT clock_timestamp()")
            self.refunds.append((nudge, f"{type(exc).__name__}: {exc}", lb, ub))
            raise
        ub = await self._pool.fetchval("SELECT clock_timestamp()")
        self.refunds.append((nudge, refunded, lb, ub))
        return refunded


class RoutedWake:
    """A WakePort whose reach the coordinator sets per pair for each tick."""

    def __init__(self) -> None:
        self.modes: dict[str, str] = {}
        self._by_mode = {
            "reach": RecordingWake(),
            "lost": RecordingWake(reach=False),
            "refuse": RecordingWake(refuse=True),
        }

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        wake = self._by_mode[self.modes.get(f"{nudge.endpoint_id}/{nudge.queue}", "reach")]
        return await wake.wake(nudge)

    def forget(self) -> None:
        """Drop what the recording wakes kept: the answer already carried it."""
        for wake in self._by_mode.values():
            wake.sent.clear()
            wake.lost.clear()
            wake.refused.clear()


def _nudge(n: Nudge) -> list[Any]:
    return [n.endpoint_id, n.queue, n.number, n.todo.id, n.charged_at.isoformat()]


async def _tick(
    sweeper: Sweeper, ledger: Recorder, wake: RoutedWake, command: dict[str, Any]
) -> dict[str, Any]:
    wake.modes = dict(command.get("wake", {}))
    ledger.refunds.clear()
    ledger.done = None
    try:
        report = await sweeper.tick()
        await sweeper.settle()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        wake.forget()
    assert ledger.done is not None  # set by every tick that did not raise
    return {
        "skipped": report.skipped,
        "now": report.now.isoformat(),
        "done": ledger.done.isoformat(),
        "kind": report.kind,
        "duration_s": report.duration_s,
        "charged": [_nudge(n) for n in report.charged],
        "drained": [list(key) for key in report.cleared],
        "refunds": [
            [*_nudge(n), result, lb.isoformat(), ub.isoformat()]
            for n, result, lb, ub in ledger.refunds
        ],
    }


def build_ledger(pool: asyncpg.Pool, worker: int, fault: str) -> tuple[LedgerPort, bool]:
    """The ledger this worker sweeps with, and whether it sweeps beside the fleet's lock."""
    outside = fault == OUTSIDE and worker == OUTSIDER
    ledger = PostgresLedger(
        pool,
        timeout=20.0,
        full_pass_interval=OUTSIDER_FULL_PASS_INTERVAL if outside else FULL_PASS_INTERVAL,
        lock_key=OUTSIDE_LOCK_KEY if outside else TICK_LOCK_KEY,
    )
    if fault in BROKEN:
        return BrokenLedger(ledger, pool, fault), outside
    return ledger, outside


async def main_async(dsn: str, worker: int, fault: str) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=2,
        timeout=10,
        server_settings={"application_name": SWEEPER_APP},
    )
    try:
        inner, outside = build_ledger(pool, worker, fault)
        ledger = Recorder(inner, pool)
        wake = RoutedWake()
        sweeper = Sweeper(ledger=ledger, wake=wake, policy=PacingPolicy())
        while line := await reader.readline():
            command = json.loads(line)
            if command["cmd"] == "exit":
                break
            if command["cmd"] == "hello":
                answer: dict[str, Any] = {"pid": os.getpid(), "wall": datetime.now(UTC).isoformat()}
            else:
                answer = await _tick(sweeper, ledger, wake, command)
            answer["w"] = worker
            answer["outside"] = outside
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    args = parser.parse_args(argv)
    # Refused and unreached wakes are expected here; keep only real errors.
    logging.basicConfig(
        level=logging.ERROR,
        format="%(asctime)s w" + str(args.worker) + " %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(main_async(args.dsn, args.worker, args.fault))


if __name__ == "__main__":
    sys.exit(main())
