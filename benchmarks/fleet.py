"""One sweep per interval across a fleet: N real `stall-nudge sweep` sidecars on random phases.

    .venv/bin/python -m benchmarks.fleet     # 4 then 8 sidecars, 15 intervals of 2 s each
    .venv/bin/python -m benchmarks.fleet --sidecars 2 --intervals 4
    .venv/bin/python -m benchmarks.fleet --dsn postgresql://postgres@127.0.0.1:5432/test

For each fleet size: a fresh throwaway database (the reference host schema,
migrated; dropped at the end) holds ``--pairs`` stalled (endpoint,
queue) pairs, each with a hook pointing at a loopback receiver run here
(``stall_testing.Receiver``, which verifies each delivery) that answers
204, so every sweep wants more than the tick limit (4). N processes
``python -m stall_nudge.cli sweep --interval ... --json`` start one after
another, each after a random delay within one interval, and run on real
wall clocks until the database's clock is ``--intervals`` intervals past the
fleet's first sweep; then each is stopped with SIGTERM.

Every tick prints one JSON record (outcome ok or skipped, the database time
it decided at, what it charged). From them:

* ``sweeps_per_interval``: sweeps performed (outcome ok) by the whole fleet
  in the ``--intervals`` intervals from its first sweep, divided by that
  number of intervals (database time);
* ``max_wakes_per_interval``: the most nudges charged in any interval-long
  window ``[t, t + interval)`` over the whole run (database time).

They are checked against the database (every charge in the ledger, no pair
charged twice in a run this short) and the receiver (one delivery per
charge). The receiver's own count in a sliding window of arrival times is
printed beside them: it can be higher by the deliveries' jitter, since two
sweeps an interval apart deliver over a few milliseconds each.

The last lines are ``fleet: sidecars=<int> sweeps_per_interval=<float>
max_wakes_per_interval=<int>``, one per fleet size (targets: at most 1.1 and
at most the tick limit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import attrs
from aiohttp import web

from adapters.postgres import migrate
from stall_core import PacingPolicy
from stall_testing import (
    Received,
    Receiver,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)

#: Sidecar counts run by default, one after the other.
FLEETS = (4, 8)
#: Every stalled pair's todo was created this long before the run (far past the threshold).
STALLED_FOR = timedelta(hours=1)
#: Every hook's secret: the receiver verifies each delivery with it.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TICK_LIMIT = PacingPolicy().tick_limit
#: How long a sidecar gets to stop on SIGTERM (its deliveries answer at once).
STOP_S = 30.0


@attrs.frozen(kw_only=True)
class Tick:
    """One tick's JSON record from a sidecar: what it did, when, on the database's clock."""

    sidecar: int
    outcome: str
    at: datetime | None
    #: Each charge: (its todo's id, when it was charged).
    charged: tuple[tuple[str, datetime], ...]


@attrs.frozen(kw_only=True)
class FleetRun:
    """What one fleet did: every tick record, the receiver's arrivals, the ledger's charges."""

    sidecars: int
    interval: float
    intervals: int
    ticks: tuple[Tick, ...]
    #: Deliveries at the receiver: (the todo's id, wall-clock arrival time in s).
    arrivals: tuple[tuple[str, float], ...]
    #: Charges the ledger holds at the end: (pairs with a row, their nudges in all).
    ledger: tuple[int, int]

    @property
    def sweeps(self) -> list[datetime]:
        return sorted(t.at for t in self.ticks if t.outcome == "ok" and t.at is not None)

    @property
    def charges(self) -> list[datetime]:
        return sorted(at for t in self.ticks for _, at in t.charged)

    def sweeps_per_interval(self) -> float:
        """Sweeps in the ``intervals`` intervals from the fleet's first, per interval."""
        sweeps = self.sweeps
        if not sweeps:
            return 0.0
        end = sweeps[0] + timedelta(seconds=self.interval * self.intervals)
        return sum(1 for at in sweeps if at < end) / self.intervals

    def max_wakes_per_interval(self) -> int:
        """The most charges in any window ``[t, t + interval)``, on the database's clock."""
        window = timedelta(seconds=self.interval)
        return max_in_window(self.charges, window)

    def receiver_max_per_interval(self) -> int:
        """The same window over the receiver's arrival times (jitter included)."""
        return max_in_window(sorted(at for _, at in self.arrivals), self.interval)

    def lags(self) -> list[float]:
        """Seconds from each charge (database clock) to its delivery's arrival (this machine's)."""
        charged = {todo: at.timestamp() for t in self.ticks for todo, at in t.charged}
        return sorted(at - charged[todo] for todo, at in self.arrivals if todo in charged)


def max_in_window(times: Sequence[Any], window: Any) -> int:
    """The most of the sorted ``times`` in any half-open window ``[t, t + window)``."""
    best = start = 0
    for end, at in enumerate(times):
        while times[start] + window <= at:
            start += 1
        best = max(best, end - start + 1)
    return best


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[tuple[str, list[tuple[str, float]]]]:
    """The hooks' receiver, answering 204; yields its URL and each verified delivery's arrival."""
    arrivals: list[tuple[str, float]] = []

    async def arrived(received: Received, request: web.Request) -> web.StreamResponse:
        arrivals.append((received.json()["meta"]["todo_id"], time.time()))
        return web.Response(status=204)

    async with Receiver() as hooks:
        hooks.route("hook", arrived)
        yield hooks.url("hook", SECRET), arrivals


@contextlib.asynccontextmanager
async def board(server: str, pairs: int, url: str) -> AsyncIterator[str]:
    """A throwaway database with ``pairs`` stalled pairs, each with its hook; dropped after."""
    name = f"stall_fleet_{uuid.uuid4().hex[:12]}"
    await create_database(server, name)
    try:
        dsn = with_database(server, name)
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn, host_schema=True)
            await conn.execute(
                "INSERT INTO endpoints (id, state)"
                " SELECT 'e' || i, 'active' FROM generate_series(1, $1) i",
                pairs,
            )
            await conn.execute(
                "INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)"
                " SELECT 'h' || i, 'e' || i, $1, $2, ARRAY['q' || i], true"
                " FROM generate_series(1, $3) i",
                url,
                SECRET,
                pairs,
            )
            await conn.execute(
                "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
                " SELECT 't' || i, 'e' || i, 'q' || i, 'pending', clock_timestamp() - $1::interval"
                " FROM generate_series(1, $2) i",
                STALLED_FOR,
                pairs,
            )
        finally:
            await conn.close()
        yield dsn
    finally:
        await drop_database(server, name)


async def sidecar(dsn: str, interval: float, delay: float, log: Path) -> asyncio.subprocess.Process:
    """Start a sidecar after ``delay`` s, its JSON records on a pipe, its log in ``log``."""
    await asyncio.sleep(delay)
    with log.open("wb") as stderr:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "stall_nudge.cli",
            "sweep",
            "--dsn",
            dsn,
            "--interval",
            f"{interval}s",
            "--json",
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )


async def read_ticks(number: int, process: asyncio.subprocess.Process, ticks: list[Tick]) -> None:
    """Append each JSON record the sidecar prints to ``ticks``."""
    assert process.stdout is not None
    async for line in process.stdout:
        record = json.loads(line)
        ticks.append(
            Tick(
                sidecar=number,
                outcome=record["outcome"],
                at=None if record["at"] is None else datetime.fromisoformat(record["at"]),
                charged=tuple(
                    (c["todo_id"], datetime.fromisoformat(c["charged_at"]))
                    for c in record["charged"]
                ),
            )
        )


async def run_fleet(
    server: str, sidecars: int, interval: float, intervals: int, pairs: int, rng: random.Random
) -> FleetRun:
    """Run ``sidecars`` sidecars on random phases until ``intervals`` intervals passed; collect."""
    ticks: list[Tick] = []
    async with receiver() as (url, arrivals), board(server, pairs, url) as dsn:
        with tempfile.TemporaryDirectory(prefix="stall_fleet_") as logs:
            delays = sorted(rng.uniform(0, interval) for _ in range(sidecars))
            logged = [Path(logs) / f"sidecar{i}.log" for i in range(sidecars)]
            started = [
                asyncio.create_task(sidecar(dsn, interval, d, logged[i]))
                for i, d in enumerate(delays)
            ]
            processes: list[asyncio.subprocess.Process] = []
            readers: list[asyncio.Task[None]] = []
            try:
                for i, task in enumerate(started):
                    process = await task
                    processes.append(process)
                    readers.append(asyncio.create_task(read_ticks(i, process, ticks)))
                await until_past(dsn, ticks, interval, intervals, processes, logged)
            finally:
                for task in started:
                    task.cancel()
                for task in started:
                    if (
                        task.done()
                        and not task.cancelled()
                        and task.exception() is None
                        and task.result() not in processes
                    ):
                        processes.append(task.result())
                await stop(processes)
                await asyncio.gather(*readers, return_exceptions=True)
            conn = await asyncpg.connect(dsn)
            try:
                row = await conn.fetchrow(
                    "SELECT count(*) AS pairs, coalesce(sum(nudges), 0) AS nudges"
                    " FROM stall_nudge.queue_stall_nudges"
                )
            finally:
                await conn.close()
            assert row is not None
        return FleetRun(
            sidecars=sidecars,
            interval=interval,
            intervals=intervals,
            ticks=tuple(ticks),
            arrivals=tuple(arrivals),
            ledger=(row["pairs"], row["nudges"]),
        )


async def until_past(
    dsn: str,
    ticks: list[Tick],
    interval: float,
    intervals: int,
    processes: list[asyncio.subprocess.Process],
    logs: list[Path],
) -> None:
    """Wait until the database's clock is intervals and a half past the fleet's first sweep."""
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            for number, process in enumerate(processes):
                if process.returncode is not None:
                    raise SystemExit(
                        f"sidecar {number} exited with {process.returncode}:\n"
                        + logs[number].read_text(errors="replace")[-2000:]
                    )
            swept = [t.at for t in ticks if t.outcome == "ok" and t.at is not None]
            if swept:
                now: datetime = await conn.fetchval("SELECT clock_timestamp()")
                if now >= min(swept) + timedelta(seconds=interval * (intervals + 0.5)):
                    return
            await asyncio.sleep(interval / 10)
    finally:
        await conn.close()


async def stop(processes: list[asyncio.subprocess.Process]) -> None:
    """SIGTERM each sidecar and wait for it (killed past STOP_S)."""
    for process in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), STOP_S)
        except TimeoutError:
            process.kill()
            await process.wait()


def report(run: FleetRun) -> None:
    """The run's details, then its ``fleet:`` figures; fails when the sources disagree."""
    sweeps, charges = run.sweeps, run.charges
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sweeps)]
    skipped = sum(1 for t in run.ticks if t.outcome == "skipped")
    failed = sum(1 for t in run.ticks if t.outcome == "failed")
    by_sidecar = [
        sum(1 for t in run.ticks if t.sidecar == i and t.outcome == "ok")
        for i in range(run.sidecars)
    ]
    print(
        f"fleet of {run.sidecars}: {len(sweeps)} sweeps in all (by sidecar {by_sidecar}),"
        f" {skipped} skipped ticks, {failed} failed; {len(charges)} charges,"
        f" ledger {run.ledger[1]} nudges on {run.ledger[0]} pairs,"
        f" receiver {len(run.arrivals)} deliveries"
        f" (most in an interval of arrivals: {run.receiver_max_per_interval()})"
    )
    lags = run.lags()
    if lags:
        print(
            f"fleet of {run.sidecars}: deliveries arrived {statistics.median(lags) * 1000:.1f} ms"
            f" (median), {max(lags) * 1000:.1f} ms (max) after their charge"
        )
    if gaps:
        print(
            f"fleet of {run.sidecars}: gaps between sweeps (database time, interval"
            f" {run.interval:g}s): min {min(gaps):.3f}s median {statistics.median(gaps):.3f}s"
            f" max {max(gaps):.3f}s"
        )
    if not (len(charges) == run.ledger[1] == len(run.arrivals)):
        raise SystemExit(
            f"sources disagree: {len(charges)} charges in the records, {run.ledger[1]} in the"
            f" ledger, {len(run.arrivals)} deliveries at the receiver"
        )
    if run.ledger[0] != run.ledger[1]:
        raise SystemExit("a pair was charged twice: add --pairs or shorten --intervals")


def fleet_line(run: FleetRun) -> str:
    return (
        f"fleet: sidecars={run.sidecars} sweeps_per_interval={run.sweeps_per_interval():.3f}"
        f" max_wakes_per_interval={run.max_wakes_per_interval()}"
    )


async def run(server: str, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    print(
        f"{args.intervals} intervals of {args.interval:g}s, {args.pairs} stalled pairs,"
        f" tick limit {TICK_LIMIT}; load average {os.getloadavg()[0]:.2f}"
    )
    lines = []
    for sidecars in args.sidecars:
        fleet = await run_fleet(server, sidecars, args.interval, args.intervals, args.pairs, rng)
        report(fleet)
        lines.append(fleet_line(fleet))
    for line in lines:
        print(line)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--sidecars",
        type=positive_int,
        nargs="+",
        default=list(FLEETS),
        help="fleet sizes to run, one after the other (default: 4 8)",
    )
    parser.add_argument(
        "--interval", type=float, default=2.0, help="each sidecar's --interval, in s (default: 2)"
    )
    parser.add_argument(
        "--intervals", type=positive_int, default=15, help="intervals to run (default: 15)"
    )
    parser.add_argument(
        "--pairs", type=positive_int, default=200, help="stalled pairs (default: 200)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the random phases")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("STALL_TEST_DSN"),
        help="server to use (default: STALL_TEST_DSN, else an embedded PostgreSQL)",
    )
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be positive")
    if args.dsn:
        asyncio.run(run(args.dsn, args))
    else:
        with embedded_postgres() as dsn:
            asyncio.run(run(dsn, args))


if __name__ == "__main__":
    main()
