"""Signed todo.ready deliveries per second to a loopback aiohttp receiver, and their latency.

    .venv/bin/python -m benchmarks.dispatch                       # STALL_TEST_DSN, else embedded
    .venv/bin/python -m benchmarks.dispatch --dsn postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python -m benchmarks.dispatch --messages 2000 --samples 200   # a shorter run

The receiver (``stall_testing.Receiver``) runs in its own process (one
core each on a 2-core machine), verifies every signature and answers 204,
and is asked for its counts over a pipe. Each phase runs on two hook
directories in the same run: ``MemoryHooks`` and the real path,
``PostgresHooks`` on a throwaway database of the server (``--dsn``, else
STALL_TEST_DSN, else an embedded PostgreSQL), with its defaults (lookups
cached for 1 s, successes booked in batches).

* throughput: a burst of messages queued at once, timed until the
  dispatcher has drained every delivery (response received and booked);
  rounds alternate between the directories, the median of each is reported;
* latency: one message at a time on an idle dispatcher, from ``notify()``
  to the delivery being drained (booked), next to a bare
  ``ClientSession.post`` of the same signed body;
* isolation (real path): 100 messages queued to a second hook that never
  answers (the receiver holds each request open), then one message at a
  time to the healthy hook, from ``wake()`` to its receipt, while the
  hanging hook's attempts are still in flight.

The last line is ``dispatch: deliveries_per_s=<float> real_path_deliveries_per_s=<float>
healthy_p99_ms_with_hanging_hook=<float>`` (MemoryHooks' throughput, PostgresHooks'
throughput, the healthy hook's p99 beside the hanging one on the real path).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from multiprocessing.connection import Connection

import aiohttp
import asyncpg

from adapters.http import CREATED, HookDispatcher, parse_secret, signed_headers
from adapters.memory import MemoryBoard, MemoryHooks
from adapters.postgres import PostgresHooks, migrate
from stall_core import HookDirectory, Nudge, TodoRef
from stall_testing import (
    PostgresHost,
    Receiver,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
TODO = TodoRef(id="t1", created_at=datetime(2026, 10, 15, 12, 0, tzinfo=UTC), title="bench")
#: Messages queued to the hook that never answers, as in issue 11.
HANGING_MESSAGES = 100


def _serve(secret: str, pipe: Connection) -> None:
    """The receiver process: the stall_testing receiver, answering the benchmark over ``pipe``."""
    asyncio.run(_answer(secret, pipe))


async def _answer(secret: str, pipe: Connection) -> None:
    """Send the base URL, then answer each question: held, release or stats."""
    async with Receiver() as receiver:
        receiver.url("hook", secret)
        receiver.url("hang", secret)
        receiver.route("hang", receiver.hang())  # never answers until released (or the timeout)
        pipe.send(f"http://127.0.0.1:{receiver.port}")
        while True:
            question, *args = await asyncio.to_thread(pipe.recv)
            if question == "held":  # once this many requests are held open on /hang
                await receiver.wait_for(args[0], "hang")
            elif question == "release":
                receiver.release()
            pipe.send(
                {
                    "ok": len(receiver.at("hook")),
                    "bad": len(receiver.refused),
                    "hanging": len(receiver.at("hang")),
                    "cpu_s": time.process_time(),
                }
            )


async def _ask(pipe: Connection, *question: object) -> dict[str, float]:
    """The receiver's counts, once it has done what ``question`` asks."""
    pipe.send(question)
    counts: dict[str, float] = await asyncio.to_thread(pipe.recv)
    return counts


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def _isolation(
    hooks: HookDirectory, pipe: Connection, samples: int, workers: int
) -> tuple[list[float], int]:
    """The healthy hook's latencies while a hanging hook holds its attempts; and its in-flight."""
    latencies: list[float] = []
    nudge = Nudge(endpoint_id="e1", queue="q", todo=TODO, number=1, charged_at=TODO.created_at)
    async with HookDispatcher(hooks=hooks, workers=workers) as dispatcher:
        for _ in range(HANGING_MESSAGES):
            await dispatcher.notify(endpoint_id="slow", queue="q", todo=TODO, reason=CREATED)
        # Measure only once the hanging hook's attempts are all in flight.
        await _ask(pipe, "held", workers)
        for _ in range(samples):
            t0 = time.perf_counter()
            delivered = await (await dispatcher.wake(nudge))
            latencies.append((time.perf_counter() - t0) * 1000)
            if not delivered:
                raise SystemExit("the healthy hook was not delivered")
        hanging = int((await _ask(pipe, "stats"))["hanging"])
        in_flight = dispatcher.outstanding
        await _ask(pipe, "release")
        await dispatcher.settle()
    if in_flight != HANGING_MESSAGES:
        raise SystemExit(f"expected {HANGING_MESSAGES} hanging deliveries, {in_flight} outstanding")
    return latencies, hanging


async def _throughput(
    hooks: HookDirectory, messages: int, workers: int
) -> tuple[float, float, int]:
    """Deliveries per second of one burst, the dispatcher's CPU seconds, deliveries not made."""
    async with HookDispatcher(hooks=hooks, queue_size=messages, workers=workers) as dispatcher:
        # Warm the connection pool (and the real path's hook cache).
        for _ in range(workers):
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.settle()
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(messages):
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.settle()
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        stats = dispatcher.stats
    return messages / elapsed, cpu, stats.failed + stats.dropped


async def _latency(hooks: HookDirectory, samples: int) -> list[float]:
    latencies: list[float] = []
    async with HookDispatcher(hooks=hooks) as dispatcher:
        for _ in range(samples):
            t0 = time.perf_counter()
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
            await dispatcher.settle()
            latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


@asynccontextmanager
async def _host_database(dsn: str, base: str) -> AsyncIterator[asyncpg.Pool]:
    """A throwaway database on ``dsn`` with the host schema, our migration and the two hooks."""
    name = f"stall_bench_dispatch_{uuid.uuid4().hex[:12]}"
    await create_database(dsn, name)
    try:
        conn = await asyncpg.connect(with_database(dsn, name))
        try:
            await migrate(conn, host_schema=True)
        finally:
            await conn.close()
        pool = await asyncpg.create_pool(with_database(dsn, name), min_size=1, max_size=10)
        try:
            host = PostgresHost(pool)
            for endpoint, path in (("e1", "hook"), ("slow", "hang")):
                await host.add_endpoint(endpoint)
                await host.add_hook(
                    f"h-{endpoint}", endpoint_id=endpoint, url=f"{base}/{path}", secret=SECRET
                )
            yield pool
        finally:
            await pool.close()
    finally:
        await drop_database(dsn, name)


async def _bench(
    dsn: str, base: str, pipe: Connection, messages: int, samples: int, workers: int, rounds: int
) -> None:
    url = f"{base}/hook"
    board = MemoryBoard(clock=lambda: datetime.now(UTC))
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)
    board.add_endpoint("slow")
    board.add_hook("h-hang", endpoint_id="slow", url=f"{base}/hang", secret=SECRET)
    memory = MemoryHooks(board)

    async with _host_database(dsn, base) as pool:
        real = PostgresHooks(pool)
        rates: dict[str, list[float]] = {"memory": [], "postgres": []}
        cpus: dict[str, list[float]] = {"memory": [], "postgres": []}
        failed = 0
        for i in range(rounds):
            # Alternate which goes first, so a slow moment of the machine lands on both.
            order = [("memory", memory), ("postgres", real)]
            for name, hooks in order if i % 2 == 0 else order[::-1]:
                rate, cpu, lost = await _throughput(hooks, messages, workers)
                rates[name].append(rate)
                cpus[name].append(cpu)
                failed += lost
        latencies = await _latency(memory, samples)
        real_latencies = await _latency(real, samples)
        healthy, hanging = await _isolation(real, pipe, samples, workers)
        booked = await pool.fetchval("SELECT count(*) FROM notify_hooks WHERE enabled")

    key = parse_secret(SECRET)
    body = b'{"type":"todo.ready"}'
    bare: list[float] = []
    async with aiohttp.ClientSession() as session:
        for i in range(samples):
            headers = signed_headers(key, f"msg_bare_{i}", int(time.time()), body)
            t0 = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
            bare.append((time.perf_counter() - t0) * 1000)
    received = await _ask(pipe, "stats")

    memory_rate, real_rate = (statistics.median(rates[name]) for name in ("memory", "postgres"))
    print(f"receiver: verified={received['ok']} refused={received['bad']} (stall_testing)")
    for name in ("memory", "postgres"):
        print(
            f"throughput ({name}): {messages} messages a round, {rounds} rounds,"
            f" {workers} workers per hook: per_s={_list(rates[name], '.0f')},"
            f" dispatcher CPU ms per delivery="
            f"{_list([c / messages * 1000 for c in cpus[name]], '.3f')}"
        )
    print(
        f"throughput: real path at {real_rate / memory_rate:.1%} of memory; failed={failed};"
        f" enabled hooks after the run={booked}; receiver CPU (whole run)"
        f" {received['cpu_s']:.2f}s"
    )
    print(
        f"latency: memory p50={_percentile(latencies, 50):.3f}ms"
        f" p99={_percentile(latencies, 99):.3f}ms;"
        f" postgres p50={_percentile(real_latencies, 50):.3f}ms"
        f" p99={_percentile(real_latencies, 99):.3f}ms;"
        f" bare aiohttp POST p50={_percentile(bare, 50):.3f}ms p99={_percentile(bare, 99):.3f}ms"
    )
    healthy_p50, healthy_p99 = _percentile(healthy, 50), _percentile(healthy, 99)
    print(
        f"isolation (postgres): {HANGING_MESSAGES} messages to a hook that never answers"
        f" ({hanging} requests held open); healthy hook p50={healthy_p50:.3f}ms"
        f" p99={healthy_p99:.3f}ms max={max(healthy):.3f}ms over {len(healthy)} messages"
    )
    print(
        f"dispatch: deliveries_per_s={memory_rate:.1f} real_path_deliveries_per_s={real_rate:.1f}"
        f" healthy_p99_ms_with_hanging_hook={healthy_p99:.3f}"
    )


def _list(values: Sequence[float], spec: str) -> str:
    return "/".join(format(value, spec) for value in values)


@contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    """``dsn``, else STALL_TEST_DSN, else an embedded PostgreSQL started for the run."""
    chosen = dsn or os.environ.get("STALL_TEST_DSN")
    if chosen:
        yield chosen
    else:
        with embedded_postgres() as embedded:
            yield embedded


@contextmanager
def _receiver() -> Iterator[tuple[str, Connection]]:
    """The receiver process on a loopback port: its base URL, and the pipe that asks it."""
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    receiver = spawn.Process(target=_serve, args=(SECRET, theirs))
    receiver.start()
    theirs.close()  # the process holds its end: if it dies, our reads end
    try:
        yield ours.recv(), ours
    finally:
        receiver.terminate()
        receiver.join()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="PostgreSQL server (default STALL_TEST_DSN, else embedded)")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=32)  # per hook, the dispatcher's default
    args = parser.parse_args(argv)

    with _server(args.dsn) as dsn, _receiver() as (base, pipe):
        asyncio.run(_bench(dsn, base, pipe, args.messages, args.samples, args.workers, args.rounds))


if __name__ == "__main__":
    main()
