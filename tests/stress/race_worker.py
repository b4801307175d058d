"""One race sweeper process: its own asyncpg pool, a PostgresLedger on the database clock.

``races.py`` starts it under libfaketime (its wall clock shifted on purpose:
no decision may read it) and writes it one JSON command a line; it answers
each with one JSON line. ``hello`` answers its wall clock, so the
coordinator sees the shift took effect. ``tick`` runs one ``Sweeper.tick()``
and ``settle()``, waking the pairs its ``wake`` map names ``lost`` (accepted,
reaching nobody) or ``refuse`` (refused outright) and reaching the rest; it
answers what the tick decided, a database-clock read once the tick committed
(``done``) and each refund with clock reads around it (a refund races other
instances' ticks). End of input closes the pool and exits 0.

``--fault`` breaks a correct ``PostgresLedger`` from Python (no statement of
the library is edited): each is a positive control and must make its count
non-zero. ``double-hand`` hands every charge over twice (duplicates);
``forget-reads`` empties the claims the fleet's record says its last tick
read, after each tick, so the next counts them again (double_resets);
``skip-refund`` never refunds (stranded); ``hide-charge`` commits charges it
never returns (lost).
``outside-lock`` is the negative control: worker 0 sweeps under a lock key
of its own, as an older build without the tick lock would during a deploy,
every tick a full pass; only each write's compare-and-set keeps a wake from
being charged twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import attrs

from adapters.postgres import TICK_LOCK_KEY, PostgresLedger
from stall_core import ChargeOutcome, LedgerPort, Nudge, PacingPolicy, Sweeper, WakeReceipt
from stall_testing import RecordingWake
from tests.stress.shared import nudge_record

BROKEN = ("double-hand", "forget-reads", "skip-refund", "hide-charge")
OUTSIDE = "outside-lock"
FAULTS = ("none", *BROKEN, OUTSIDE)
#: The fleet runs a full pass this often, so the races run both full passes and deltas.
FULL_PASS_INTERVAL = timedelta(milliseconds=400)
CLOCK = "SELECT clock_timestamp()"

#: ``forget-reads``: the fleet's record with no claims read, as if its last tick read none.
FORGET_READS = "UPDATE stall_nudge.ticks SET claims_read_ids = '{}', claims_read_at = '{}'"


class Recorder:
    """The sweep's LedgerPort: a ledger (broken by ``fault``, if named) whose calls are recorded.

    ``done``: a database-clock read once the last tick committed. ``refunds``:
    each refund, its result (or error) and database-clock reads before it
    began and after it committed.
    """

    def __init__(self, inner: LedgerPort, pool: asyncpg.Pool, fault: str) -> None:
        self._inner, self._pool, self._fault = inner, pool, fault
        self.done: datetime | None = None
        self.refunds: list[dict[str, Any]] = []

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        outcome = await self._inner.charge_due(policy=policy, every=every)
        if self._fault == "forget-reads" and not outcome.skipped:
            await self._pool.execute(FORGET_READS)
        self.done = await self._pool.fetchval(CLOCK)
        if self._fault == "double-hand":
            return attrs.evolve(
                outcome, charged=tuple(n for n in outcome.charged for _ in range(2))
            )
        if self._fault == "hide-charge":
            return attrs.evolve(outcome, charged=())
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        lb: datetime = await self._pool.fetchval(CLOCK)
        result: bool | str = False
        try:
            if self._fault != "skip-refund":
                result = await self._inner.refund(nudge)
        except Exception as exc:
            result = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            ub: datetime = await self._pool.fetchval(CLOCK)
            self.refunds.append(
                {
                    "nudge": nudge_record(nudge),
                    "result": result,
                    "lb": lb.isoformat(),
                    "ub": ub.isoformat(),
                }
            )
        return result is True


class RoutedWake:
    """A WakePort whose reach the coordinator sets per pair for each tick."""

    def __init__(self) -> None:
        self.modes: dict[str, str] = {}

    async def wake(self, nudge: Nudge) -> WakeReceipt:
        mode = self.modes.get(f"{nudge.endpoint_id}/{nudge.queue}", "reach")
        return await RecordingWake(reach=mode != "lost", refuse=mode == "refuse").wake(nudge)


async def _tick(
    sweeper: Sweeper, ledger: Recorder, wake: RoutedWake, wakes: dict[str, str]
) -> dict[str, Any]:
    wake.modes, ledger.refunds, ledger.done = wakes, [], None
    try:
        report = await sweeper.tick()
        await sweeper.settle()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    assert ledger.done is not None  # set by every tick that did not raise
    return {
        "skipped": report.skipped,
        "now": report.now.isoformat(),
        "done": ledger.done.isoformat(),
        "kind": report.kind,
        "duration_s": report.duration_s,
        "charged": [nudge_record(n) for n in report.charged],
        "drained": [list(key) for key in report.cleared],
        "refunds": ledger.refunds,
    }


async def main_async(dsn: str, worker: int, fault: str) -> int:
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=2,
        timeout=10,
        server_settings={"application_name": "stall-races-sweeper"},
    )
    try:
        outside = fault == OUTSIDE and worker == 0
        inner = PostgresLedger(
            pool,
            timeout=20.0,
            # The outsider's every tick is a full pass (a microsecond's interval).
            full_pass_interval=timedelta(microseconds=1) if outside else FULL_PASS_INTERVAL,
            lock_key=TICK_LOCK_KEY + 1 if outside else TICK_LOCK_KEY,
        )
        ledger = Recorder(inner, pool, fault)
        wake = RoutedWake()
        sweeper = Sweeper(ledger=ledger, wake=wake, policy=PacingPolicy())
        while line := await reader.readline():
            command = json.loads(line)
            if command["cmd"] == "hello":
                answer: dict[str, Any] = {"wall": datetime.now(UTC).isoformat()}
            else:
                answer = await _tick(sweeper, ledger, wake, command.get("wake", {}))
            sys.stdout.write(json.dumps({**answer, "w": worker, "outside": outside}) + "\n")
            sys.stdout.flush()
    finally:
        await pool.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    args = parser.parse_args()
    # Refused and unreached wakes are expected here; keep only real errors.
    logging.basicConfig(
        level=logging.ERROR,
        format=f"%(asctime)s w{args.worker} %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(main_async(args.dsn, args.worker, args.fault))


if __name__ == "__main__":
    sys.exit(main())
