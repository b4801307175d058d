"""The nudge-now race: a sweeping fleet and two operators nudge one pair at once; one wake.

    .venv/bin/python -m tests.stress.nudge_race --trials 300
    .venv/bin/python -m tests.stress.nudge_race --fault double-hand   # a control: it must fail

One PostgreSQL (``--dsn``, else ``STALL_TEST_DSN``, else an embedded one)
holds a throwaway database; a ``stall_testing.Receiver`` on loopback
verifies every request. ``--sweepers`` fleet processes (``nudge_race_worker``,
each an ``open_reaper`` running as the sidecar does: a tick every 50 ms, a
full pass every 300 ms) and two operator processes run under libfaketime,
their wall clocks shifted by 0, ±2 s or ±30 s. Trials run four at a time
(the tick limit), each on a fresh pair whose one todo is past the
threshold, in one of ``KINDS``: ``due`` (no row; the todo crosses the
threshold within 40 ms of the nudge), ``row-due`` (nudge 1 sent; nudge 2
falls due as well), ``backing-off`` (nudge 2 sent 2 min ago; only a nudge
now charges it) and ``capped``. Both operators call ``Reaper.nudge`` on
every pair of the batch at one monotonic instant; the fleet ticks on.

A trial is judged once the fleet has run a full pass after both operators
answered and every charge has its outcome: its pair must get exactly one
verified ``stalled`` message (``wakes``); the history must hold one
``charged`` row for it, delivered, matching that message's stamp, and one
``nudged`` action per operator. ``duplicates`` counts every wake past the
first, ``lost`` a trial with none, ``other`` any other disagreement (a
history row too many or missing, an outcome not delivered, a backing-off or
capped pair charged by a tick, an error). The last line is exactly::

    nudge_now: trials=<int> sweepers=<int> operators=2 wakes=<int> duplicates=<int> lost=<int>
    other=<int>

Exit 1 if ``duplicates``, ``lost`` or ``other`` is not 0; 2 if it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import attrs

from adapters.postgres import PostgresLedger, migrate
from stall_core import PacingPolicy
from stall_testing import (
    PostgresHost,
    Receiver,
    SkewUnavailable,
    create_database,
    drop_database,
    embedded_postgres,
    skewed_env,
    with_database,
)
from tests.stress.nudge_race_worker import FAULTS
from tests.stress.shared import spawn

#: The fleet's policy: ``open_reaper``'s default.
POLICY = PacingPolicy()
SECRET = "whsec_" + base64.b64encode(b"stall-nudge nudge-now race key!!").decode()
QUEUE = "q"
KINDS = ("due", "row-due", "backing-off", "capped")
#: Trials per batch: never more due pairs than one tick may charge.
LANES = POLICY.tick_limit
OPERATORS = 2
#: Wall-clock shifts of the processes, cycled over the fleet, then the operators.
OFFSETS = ("+0s", "+2s", "-2s", "+30s", "-30s")
#: The operators start this long after a batch is planted (seconds).
LEAD_S = 0.15
#: Where a ``due`` pair's todo crosses the threshold (or a ``row-due`` pair's nudge 2 falls
#: due): this far either side of the operators' start (seconds).
CROSSING_S = 0.040
#: A bound only a hang reaches.
TIMEOUT_S = 120.0
SEED = 11
NOW = "SELECT clock_timestamp()"
CLEANUP = [
    f"DELETE FROM {table} WHERE {column} = ANY($1::text[])"
    for table, column in (
        ("stall_nudge.queue_stall_nudges", "endpoint_id"),
        ("todos", "endpoint_id"),
        ("notify_hooks", "endpoint_id"),
        ("deliveries", "endpoint_id"),
        ("endpoints", "id"),
        ("stall_nudge.held", "endpoint_id"),
    )
]
LEDGER_ROW = """
INSERT INTO stall_nudge.queue_stall_nudges
       (endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at)
VALUES ($1, $2, $3, $4, $5, NULL)
"""
HISTORY = """
SELECT endpoint_id, event, at, nudge, todo_id, outcome, actor FROM stall_nudge.history
 WHERE endpoint_id = ANY($1::text[]) ORDER BY at
"""
UNSETTLED = """
SELECT count(*) FROM stall_nudge.history
 WHERE endpoint_id = ANY($1::text[]) AND event = 'charged' AND outcome IS NULL
"""
COUNTS = ("duplicates", "lost", "other")
#: What each trial's winner was: the operator's own nudge, another pair's nudge-now tick
#: (an operator's), a fleet tick.
WINNERS = ("by_operator", "by_operator_tick", "by_fleet")


class RaceAbort(RuntimeError):
    """The race could not run (a process died, a wait hung)."""


@attrs.frozen
class Trial:
    index: int
    kind: str
    endpoint: str

    @property
    def path(self) -> str:
        return f"hook/{self.endpoint}"


@attrs.define
class Result:
    sweepers: int
    trials: int = 0
    wakes: int = 0
    counts: Counter[str] = attrs.Factory(Counter)
    stats: Counter[str] = attrs.Factory(Counter)
    by_kind: dict[str, Counter[str]] = attrs.Factory(dict)
    notes: list[str] = attrs.Factory(list)
    spreads: list[float] = attrs.Factory(list)
    fleet_ticks: int = 0
    seconds: float = 0.0

    def note(self, trial: Trial, text: str) -> None:
        self.counts["other"] += 1
        self.by_kind[trial.kind]["other"] += 1
        if len(self.notes) < 20:
            self.notes.append(f"trial {trial.index} ({trial.kind}, {trial.endpoint}): {text}")


@attrs.frozen
class Proc:
    role: str
    index: int
    proc: asyncio.subprocess.Process
    log: Path

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT_S)
        except TimeoutError:
            raise RaceAbort(f"{self.role} {self.index} did not answer; see {self.log}") from None
        if not raw:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RaceAbort(f"{self.role} {self.index} exited: {tail}")
        answer: dict[str, Any] = json.loads(raw)
        return answer

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())


@contextlib.asynccontextmanager
async def _processes(
    dsn: str, sweepers: int, workdir: Path, fault: str
) -> AsyncIterator[tuple[list[Proc], list[Proc]]]:
    procs: list[Proc] = []
    roles = [("fleet", i) for i in range(sweepers)] + [("operator", i) for i in range(OPERATORS)]
    try:
        for n, (role, i) in enumerate(roles):
            log = workdir / f"{role}-{i}.log"
            proc = await spawn(
                "nudge_race_worker", "--dsn", dsn, "--role", role, "--index", str(i),
                "--fault", fault, log=log, env=skewed_env(OFFSETS[n % len(OFFSETS)]),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            procs.append(Proc(role, i, proc, log))
        for p in procs:
            await p.line()  # ready
        yield [p for p in procs if p.role == "fleet"], [p for p in procs if p.role == "operator"]
    finally:
        for p in procs:
            if p.proc.returncode is None and p.proc.stdin is not None:
                p.proc.stdin.close()
        for p in procs:
            try:
                await asyncio.wait_for(p.proc.wait(), timeout=20)
            except TimeoutError:
                p.proc.kill()
                await p.proc.wait()


class Coordinator:
    def __init__(
        self,
        pool: asyncpg.Pool,
        receiver: Receiver,
        operators: Sequence[Proc],
        rng: random.Random,
        result: Result,
    ) -> None:
        self.pool, self.receiver, self.operators = pool, receiver, operators
        self.host, self.rng, self.result = PostgresHost(pool), rng, result

    async def batch(self, first: int, size: int) -> None:
        trials = [
            Trial(i, KINDS[i % len(KINDS)], f"nr-{uuid.uuid4().hex[:8]}-{i}")
            for i in range(first, first + size)
        ]
        fire_at = await self._plant(trials)
        pairs = [[t.endpoint, QUEUE] for t in trials]
        for op in self.operators:
            op.send({"at": fire_at, "pairs": pairs})
        answers = [await op.line() for op in self.operators]
        lates = [a["late_ms"] for a in answers]
        self.result.spreads.append(max(lates) - min(lates))
        answered: datetime = await self.pool.fetchval(NOW)
        await self._settled(trials, answered)
        rows = await self.pool.fetch(HISTORY, [t.endpoint for t in trials])
        for t in trials:
            self._judge(t, [a["answers"] for a in answers], [r for r in rows if r[0] == t.endpoint])
        ledger = PostgresLedger(self.pool)
        async with ledger.hold_tick(), self.pool.acquire() as conn, conn.transaction():
            for sql in CLEANUP:
                await conn.execute(sql, [t.endpoint for t in trials])

    async def _plant(self, trials: Sequence[Trial]) -> float:
        """Plant each trial's pair; return the monotonic instant the operators start at."""
        async with self.pool.acquire() as conn, conn.transaction():
            host = PostgresHost(conn)
            d0: datetime = await conn.fetchval(NOW)
            m0 = time.monotonic()
            for t in trials:
                crossing = d0 + timedelta(seconds=LEAD_S + self.rng.uniform(-1, 1) * CROSSING_S)
                await host.add_endpoint(t.endpoint)
                await host.add_delivery(
                    f"v-{t.endpoint}", endpoint_id=t.endpoint, verified=True, received_at=d0
                )
                url = self.receiver.url(t.path, SECRET)
                await host.add_hook(
                    f"h-{t.endpoint}", endpoint_id=t.endpoint, url=url, secret=SECRET
                )
                created = {
                    "due": crossing - POLICY.threshold,
                    "row-due": d0 - timedelta(minutes=10),
                    "backing-off": d0 - timedelta(minutes=30),
                    "capped": d0 - timedelta(hours=3),
                }[t.kind]
                todo = f"t-{t.endpoint}"
                await host.create_todo(
                    todo, endpoint_id=t.endpoint, queue=QUEUE, created_at=created,
                    delivery_id=f"v-{t.endpoint}", title=f"work {t.index}",
                )  # fmt: skip
                row = {
                    "row-due": (1, crossing - POLICY.delay_before(2)),
                    "backing-off": (2, d0 - timedelta(minutes=2)),
                    "capped": (POLICY.cap, d0 - timedelta(minutes=10)),
                }.get(t.kind)
                if row is not None:
                    await conn.execute(LEDGER_ROW, t.endpoint, QUEUE, *row, todo)
        return m0 + LEAD_S

    async def _settled(self, trials: Sequence[Trial], answered: datetime) -> None:
        """Wait for a fleet full pass after the operators answered, then every charge's outcome."""
        after = answered + timedelta(seconds=CROSSING_S)
        names = [t.endpoint for t in trials]
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            full = await self.pool.fetchval("SELECT full_pass_at FROM stall_nudge.ticks")
            if full is not None and full > after and not await self.pool.fetchval(UNSETTLED, names):
                return
            if time.monotonic() > deadline:
                raise RaceAbort(f"no fleet full pass or no outcome after {after.isoformat()}")
            await asyncio.sleep(0.02)

    def _judge(self, t: Trial, answers: list[list[dict[str, Any]]], rows: list[Any]) -> None:
        r = self.result
        r.trials += 1
        kind = r.by_kind.setdefault(t.kind, Counter())
        kind["trials"] += 1
        mine = [a for per_op in answers for a in per_op if a["pair"][0] == t.endpoint]
        for a in mine:
            if "error" in a:
                r.note(t, f"an operator failed: {a['error']}")
            elif a["decision"] == "wait":
                r.stats["waits"] += 1
            elif a["decision"].startswith("idle:"):
                r.stats["idle"] += 1
        refused = [m for m in self.receiver.messages if m.path == t.path and m.refused]
        if refused:
            r.note(t, f"{len(refused)} request(s) failed verification")
        stalled = [m for m in self.receiver.at(t.path) if m.json()["meta"]["reason"] == "stalled"]
        ids = {m.headers["webhook-id"] for m in stalled}
        wakes = len(ids)
        r.wakes += wakes
        kind["wakes"] += wakes
        if wakes == 0:
            r.counts["lost"] += 1
            kind["lost"] += 1
        elif wakes > 1:
            r.counts["duplicates"] += wakes - 1
            kind["duplicates"] += wakes - 1
        charged = [row for row in rows if row["event"] == "charged"]
        nudged = sorted(row["actor"] for row in rows if row["event"] == "nudged")
        if nudged != [f"operator-{i}" for i in range(OPERATORS)]:
            r.note(t, f"the history holds nudge-now actions by {nudged}")
        if len(charged) != 1:
            r.note(t, f"the history holds {len(charged)} charges")
        if any(row["outcome"] != "delivered" for row in charged):
            r.note(t, f"outcomes {[row['outcome'] for row in charged]}, not delivered")
        if {m.json()["meta"]["todo_id"] for m in stalled} - {row["todo_id"] for row in charged}:
            r.note(t, "a message names a todo no charge in the history names")
        for row in charged[:1]:
            own = [
                a
                for a in mine
                if a.get("charged") and a["charged"]["charged_at"] == row["at"].isoformat()
            ]
            if len(own) > 1:
                r.note(t, "both operators report the one charge")
            winner = "by_operator" if own else self._tick_winner(t, answers, row["at"])
            r.stats[winner] += 1
            kind[winner] += 1
            if t.kind in ("backing-off", "capped") and winner != "by_operator":
                r.note(t, f"a tick charged a {t.kind} pair ({winner})")

    @staticmethod
    def _tick_winner(t: Trial, answers: list[list[dict[str, Any]]], at: datetime) -> str:
        ticked = {
            (pair, stamp)
            for per_op in answers
            for a in per_op
            if "ticked" in a
            for pair, stamp in a["ticked"]
        }
        return "by_operator_tick" if (t.endpoint, at.isoformat()) in ticked else "by_fleet"


async def run(server: str, args: Any) -> Result:
    name = f"stall_nudge_race_{uuid.uuid4().hex[:10]}"
    await create_database(server, name)
    result = Result(sweepers=args.sweepers)
    started = time.monotonic()
    try:
        dsn = with_database(server, name)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
            await migrate(conn, host_schema=True)
        finally:
            await conn.close()
        async with (
            Receiver() as receiver,
            asyncpg.create_pool(dsn, min_size=1, max_size=4) as pool,
            _processes(dsn, args.sweepers, args.workdir, args.fault) as (fleet, operators),
        ):
            coordinator = Coordinator(pool, receiver, operators, random.Random(SEED), result)
            for first in range(0, args.trials, LANES):
                await coordinator.batch(first, min(LANES, args.trials - first))
            for p in fleet:
                assert p.proc.stdin is not None
                p.proc.stdin.close()
                result.fleet_ticks += (await p.line())["ticks"]
    finally:
        await drop_database(server, name)
    result.seconds = time.monotonic() - started
    return result


def _fields(counter: Counter[str], names: Sequence[str]) -> str:
    return " ".join(f"{k}={counter[k]}" for k in names)


def report(r: Result) -> None:
    for note in r.notes:
        print(f"violation: {note}")
    spread = sorted(r.spreads)
    p90 = spread[min(len(spread) - 1, int(0.9 * len(spread)))] if spread else 0.0
    print(
        f"nudge_now[{r.sweepers} sweepers, {OPERATORS} operators]: trials={r.trials}"
        f" {_fields(r.stats, WINNERS)} waits={r.stats['waits']} idle={r.stats['idle']}"
        f" fleet_ticks={r.fleet_ticks} operator_start_spread_p90={p90:.2f}ms"
        f" seconds={r.seconds:.1f}",
        flush=True,
    )
    for kind in (k for k in KINDS if k in r.by_kind):
        v = r.by_kind[kind]
        print(
            f"  {kind}: trials={v['trials']} wakes={v['wakes']} {_fields(v, WINNERS)}"
            f" {_fields(v, COUNTS)}"
        )
    print(
        f"nudge_now: trials={r.trials} sweepers={r.sweepers} operators={OPERATORS}"
        f" wakes={r.wakes} {_fields(r.counts, COUNTS)}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Race two operators' nudge now against a sweeping fleet; count the wakes."
    )
    parser.add_argument("--trials", type=int, default=300, help="in all (default 300)")
    parser.add_argument("--sweepers", type=int, default=4, help="fleet processes (default 4)")
    parser.add_argument("--dsn", default=os.environ.get("STALL_TEST_DSN"), help="a server DSN")
    parser.add_argument(
        "--fault", choices=FAULTS, default="none", help="a control: the operators wake twice"
    )
    args = parser.parse_args(argv)
    if args.trials < 1 or args.sweepers < 1:
        parser.error("--trials and --sweepers must be positive")
    try:
        skewed_env("+0s")
    except SkewUnavailable as exc:
        print(f"nudge_now: cannot shift the processes' wall clocks: {exc}", file=sys.stderr)
        return 2
    args.workdir = Path(tempfile.mkdtemp(prefix="stall-nudge-race-"))
    print(f"nudge_now: logs in {args.workdir}; fault={args.fault}", flush=True)
    try:
        with contextlib.nullcontext(args.dsn) if args.dsn else embedded_postgres() as server:
            result = asyncio.run(run(server, args))
    except RaceAbort as exc:
        print(f"nudge_now: aborted: {exc}", file=sys.stderr)
        return 2
    report(result)
    return 1 if any(result.counts[k] for k in COUNTS) else 0


if __name__ == "__main__":
    sys.exit(main())
