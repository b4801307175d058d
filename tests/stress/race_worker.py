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
controls (``races.py --fault``): each must make its count non-zero. The SQL
faults edit both charging statements, and the broken ledger runs the usual
tick or the full pass as the real one would, so both are under test.

- ``no-lock``: a build with neither the tick lock nor the ON CONFLICT re-check
  (duplicates);
- ``double-count``: a tick never absorbs the claims it sees, so a claim stays
  in the log and counts again at the next charge (double_resets);
- ``ignore-claims``: the charge never reads the claim log: no claim is ever
  progress, while charges still absorb the claims (stranded, lost);
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
from datetime import UTC, datetime
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
        raise RuntimeError(f"fault no longer applies to ledger.sql: {pattern!r} matched {made}")
    return edited


def _ignore_claims(sql: str) -> str:
    """The charge never reads the claim log: no progress, and a stamp of ``now`` alone."""
    sql = _edit(
        sql,
        r"\n\s*OR EXISTS \(SELECT 1 FROM stall_nudge_claims progress_c\n.*?queue\)\)\)( AS fresh)",
        r")\1",
    )
    return _edit(
        sql,
        r"\(SELECT max\(claim_c\.claimed_at\) FROM stall_nudge_claims claim_c\n.*?queue\)\)",
        "NULL",
    )


#: Whether a tick is a full pass -> the statement it runs.
STATEMENTS = {True: "charge_due", False: "charge_changed"}

#: fault name -> how it edits both charging statements (they share these rules)
FAULT_SQL: dict[str, Callable[[str], str]] = {
    # No tick lock, and no compare-and-set on the row as locked (neither on its columns
    # nor on its ctid, which a concurrent update also changes).
    "no-lock": lambda sql: _edit(
        _edit(
            sql,
            r"\n\s*AND d\.row_nudges = n\.nudges AND d\.last_nudged_at = n\.last_nudged_at",
            "",
        ),
        r"n\.ctid = ANY \(ARRAY\(SELECT k\.row_ctid FROM due k WHERE k\.row_ctid IS NOT NULL\)\)"
        r"\n\s*AND ",
        "",
    ),
    # The tick never absorbs the claims it sees, so a claim counts again at the next charge.
    "double-count": lambda sql: _edit(
        sql, r"absorbed AS \(\n.*?\n\)\n", "absorbed AS (SELECT 1)\n"
    ),
    "ignore-claims": _ignore_claims,
}
FAULTS = ("none", *FAULT_SQL, "no-refund", "hide-charge")


class FaultyLedger:
    """A deliberately broken PostgresLedger: the positive controls of the judge.

    It picks the usual tick or the full pass as PostgresLedger does, so a
    fault in either statement is one the judge must catch.
    """

    def __init__(self, pool: asyncpg.Pool, fault: str) -> None:
        self._pool = pool
        self._fault = fault
        self._inner = PostgresLedger(pool, timeout=20.0)
        edit = FAULT_SQL.get(fault, lambda sql: sql)
        self._sql = {full: edit(_SQL[name]) for full, name in STATEMENTS.items()}

    async def charge_due(self, *, policy: PacingPolicy) -> ChargeOutcome:
        async with self._pool.acquire() as conn:
            if self._fault == "no-lock":
                lock = await conn.fetchrow(
                    "SELECT clock_timestamp() AS now,"
                    " (SELECT s.full_pass_at FROM stall_nudge_sweeps s) AS full_pass_at"
                )
                return charge_outcome(await self._charge(conn, lock, policy), lock["now"])
            async with conn.transaction():
                lock = await conn.fetchrow(_SQL["tick_lock"], TICK_LOCK_KEY, "20000")
                if not lock["got"]:
                    return ChargeOutcome(now=lock["now"], skipped=True)
                rows = await self._charge(conn, lock, policy)
        outcome = charge_outcome(rows, lock["now"])
        if self._fault == "hide-charge":
            return ChargeOutcome(now=outcome.now, drained=outcome.drained)
        return outcome

    async def _charge(
        self, conn: asyncpg.Connection, lock: asyncpg.Record, policy: PacingPolicy
    ) -> list[asyncpg.Record]:
        statement = self._sql[full_pass_due(lock["full_pass_at"], lock["now"])]
        rows: list[asyncpg.Record] = await conn.fetch(
            statement, *charge_due_parameters(lock["now"], policy)
        )
        return rows

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

    async def charge_due(self, *, policy: PacingPolicy) -> ChargeOutcome:
        return await self._inner.charge_due(policy=policy)

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
            PostgresLedger(pool, timeout=20.0) if fault == "none" else FaultyLedger(pool, fault),
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
