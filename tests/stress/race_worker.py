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
  The answer lists what the tick decided (``skipped``, ``now``, the charges
  and deletions, in the ledger's own words) and every refund the settle
  made, with its result and database-clock reads before it began and after
  it committed (a refund races other instances' ticks).

End of input (or ``{"cmd": "exit"}``) closes the pool and exits 0.

``--fault`` swaps in a deliberately broken ledger, the judge's positive
controls (``races.py --fault``): each must make its count non-zero on either
footprint. The SQL faults edit every tick statement (they share the judging
part), and the broken ledger runs the lean tick, or the incremental full pass
or usual tick, as the real one would, so each is under test.

- ``no-lock``: a build with neither the fleet's tick lock nor the compare-and-set
  on the row as locked (duplicates);
- ``double-count``: a charge never consumes the progress it counts: a reset keeps
  the row's stamp and no logged claim is deleted, so one claim resets the pair
  again at the next sweep (double_resets);
- ``ignore-claims``: the charge reads no progress, neither the claim log nor the
  todos' ``claimed_at`` (lost);
- ``no-refund``: a nudge that reached nobody is never refunded (stranded);
- ``hide-charge``: charges commit but are never returned, so never woken (lost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from adapters.postgres import (
    TICK_LOCK_KEY,
    PostgresLedger,
    charge_due_parameters,
    charge_outcome,
    ledger_statements,
)
from stall_core import (
    ChargeOutcome,
    LedgerPort,
    Nudge,
    PacingPolicy,
    Progress,
    Sweeper,
    WakeReceipt,
    full_pass_due,
)
from stall_testing import RecordingWake

_SQL = ledger_statements()

#: The sweepers' connections carry this name (pg_stat_activity, logs).
SWEEPER_APP = "stall-races-sweeper"


def _edit(sql: str, pattern: str, replacement: str, *, count: int = 1) -> str:
    """``sql`` with ``pattern`` replaced exactly ``count`` times (else the fault is stale)."""
    edited, made = re.subn(pattern, replacement, sql, flags=re.DOTALL)
    if made != count:
        raise RuntimeError(f"fault no longer applies to tick.sql: {pattern!r} matched {made}")
    return edited


def _no_lock(sql: str) -> str:
    """No compare-and-set on the row as locked (neither on its columns nor on its ctid)."""
    sql = _edit(
        sql, r"\n\s*AND d\.row_nudges = n\.nudges AND d\.last_nudged_at = n\.last_nudged_at", ""
    )
    return _edit(
        sql,
        r"n\.ctid = ANY \(ARRAY\(SELECT k\.row_ctid FROM due k WHERE k\.row_ctid IS NOT NULL\)\)"
        r"\n\s*AND ",
        "",
    )


def _double_count(sql: str) -> str:
    """A charge never consumes the progress it counts: a reset keeps the row's stamp (so the
    same claimed_at is after it again) and no logged claim is ever deleted."""
    sql = _edit(
        sql,
        r"SET nudges = d\.spent \+ 1, last_nudged_at = d\.stamp",
        "SET nudges = d.spent + 1,"
        " last_nudged_at = CASE WHEN d.progress_at IS NULL THEN d.stamp ELSE n.last_nudged_at END",
    )
    return _edit(sql, r"absorbed AS \(\n.*?\n\)(?=,?\n)", "absorbed AS (SELECT 1)")


def _ignore_claims(sql: str) -> str:
    """The charge reads no progress, logged or by timestamp: the stamp is ``now`` alone."""
    return _edit(
        sql,
        r"SELECT GREATEST\(\(SELECT max\(logged_c\.claimed_at\).*?END\) AS progress_at",
        "SELECT NULL::timestamptz AS progress_at",
    )


#: The tick statements a ledger runs: lean, and the incremental full pass and usual tick.
TICK_STATEMENTS = ("tick_lean", "tick_full", "tick_changed")
#: fault name -> how it edits every tick statement (they share the judging part)
FAULT_SQL: dict[str, Callable[[str], str]] = {
    "no-lock": _no_lock,
    "double-count": _double_count,
    "ignore-claims": _ignore_claims,
}
FAULTS = ("none", *FAULT_SQL, "no-refund", "hide-charge")
#: How often the incremental footprint's ledgers run a full pass here: often, so both
#: the full pass and the usual tick are under test.
FULL_PASS_INTERVAL = timedelta(seconds=1)


class FaultyLedger:
    """A deliberately broken PostgresLedger: the positive controls of the judge.

    It picks its statement as PostgresLedger does (the lean tick, or the
    incremental full pass or usual tick), so a fault in any of them is one the
    judge must catch. ``no-lock`` takes a lock key of its own, so no other
    instance ever waits for it or skips.
    """

    def __init__(self, pool: asyncpg.Pool, fault: str) -> None:
        self._pool = pool
        self._fault = fault
        self._inner = PostgresLedger(pool, timeout=20.0)
        edit = FAULT_SQL.get(fault, lambda sql: sql)
        self._sql = {name: edit(_SQL[name]) for name in TICK_STATEMENTS}
        self._lock_key = os.getpid() if fault == "no-lock" else TICK_LOCK_KEY
        self._footprint: str | None = None

    @property
    def progress(self) -> Progress:
        return Progress.COMMIT_ORDER if self._footprint == "incremental" else Progress.TIMESTAMPS

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        async with self._pool.acquire() as conn, conn.transaction():
            lock = await conn.fetchrow(_SQL["tick_lock"], self._lock_key, "20000")
            now: datetime = lock["now"]
            self._footprint = lock["footprint"]
            if not lock["got"]:
                return ChargeOutcome(now=now, skipped=True)
            full = full_pass_due(lock["full_pass_at"], now, FULL_PASS_INTERVAL)
            if lock["footprint"] == "lean":
                statement = "tick_lean"
            else:
                statement = "tick_full" if full else "tick_changed"
            rows = await conn.fetch(self._sql[statement], *charge_due_parameters(now, policy))
            full_at = now if statement != "tick_changed" else None
            await conn.execute(_SQL["record_sweep"], now, None, full_at, None)
        outcome = charge_outcome(rows, now)
        if self._fault == "hide-charge":
            return ChargeOutcome(now=outcome.now, drained=outcome.drained)
        return outcome

    async def refund(self, nudge: Nudge) -> bool:
        if self._fault == "no-refund":
            return False
        return await self._inner.refund(nudge)


#: A refund, its result, and database clock reads before it began and after it committed.
RefundRecord = tuple[Nudge, bool | str, datetime, datetime]


class RefundRecorder:
    """The ledger as the sweep's LedgerPort, recording every refund, its result and its timing.

    A refund writes the ledger row without the tick lock, so it races other
    instances' ticks: the coordinator needs its database-clock bounds to
    judge which sweeps may have seen it (and which it may have overtaken).
    """

    def __init__(self, inner: LedgerPort, pool: asyncpg.Pool) -> None:
        self._inner = inner
        self._pool = pool
        self.refunds: list[RefundRecord] = []

    @property
    def progress(self) -> Progress:
        return self._inner.progress

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        return await self._inner.charge_due(policy=policy, every=every)

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
    sweeper: Sweeper, ledger: RefundRecorder, wake: RoutedWake, command: dict[str, Any]
) -> dict[str, Any]:
    wake.modes = dict(command.get("wake", {}))
    ledger.refunds.clear()
    try:
        report = await sweeper.tick()
        await sweeper.settle()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        wake.forget()
    return {
        "skipped": report.skipped,
        "now": report.now.isoformat(),
        "duration_s": report.duration_s,
        "charged": [_nudge(n) for n in report.charged],
        "drained": [list(key) for key in report.drained],
        "refunds": [
            [*_nudge(n), result, lb.isoformat(), ub.isoformat()]
            for n, result, lb, ub in ledger.refunds
        ],
    }


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
        ledger = RefundRecorder(
            PostgresLedger(pool, timeout=20.0, full_pass_interval=FULL_PASS_INTERVAL)
            if fault == "none"
            else FaultyLedger(pool, fault),
            pool,
        )
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
