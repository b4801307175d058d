"""Signed todo.ready deliveries per second to a loopback aiohttp receiver, and their latency.

The receiver runs in its own process (one core each on a 2-core machine)
and verifies every signature with the standardwebhooks package, answering
204. Two phases:

* throughput: a burst of messages queued at once, timed until the
  dispatcher has drained every delivery (response received and booked);
* latency: one message at a time on an idle dispatcher, from ``notify()``
  to the delivery being booked, next to a bare ``ClientSession.post`` of the
  same signed body, so the dispatcher's added cost is visible.

The last line is ``dispatch: deliveries_per_s=<float> p50_ms=<float> p99_ms=<float>``
(p50/p99 of the dispatcher's per-delivery latency).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import os
import socket
import statistics
import time
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from adapters.http import CREATED, HookDispatcher, parse_secret, signed_headers
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import TodoRef

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
TODO = TodoRef(id="t1", created_at=datetime(2026, 10, 15, 12, 0, tzinfo=UTC), title="bench")


def _serve(sock: socket.socket, secret: str) -> None:
    """The receiver process: verify every delivery, count the bad ones, answer 204."""
    from standardwebhooks.webhooks import Webhook  # only the receiver needs it

    webhook = Webhook(secret)
    counts = {"ok": 0, "bad": 0}

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            webhook.verify(body, dict(request.headers))
        except Exception:
            counts["bad"] += 1
            return web.Response(status=400)
        counts["ok"] += 1
        return web.Response(status=204)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({**counts, "cpu_s": time.process_time()})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", stats)
    web.run_app(app, sock=sock, access_log=None, print=None, handle_signals=True)


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def _bench(url: str, stats_url: str, messages: int, samples: int, workers: int) -> None:
    board = MemoryBoard(clock=lambda: datetime.now(UTC))
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)
    hooks = MemoryHooks(board)

    async with HookDispatcher(hooks=hooks, queue_size=messages, workers=workers) as dispatcher:
        # Warm the connection pool.
        for _ in range(workers):
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.drain()

        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(messages):
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.drain()
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        throughput = messages / elapsed

        latencies: list[float] = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
            await dispatcher.drain()
            latencies.append((time.perf_counter() - t0) * 1000)
        stats = dispatcher.stats

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
        async with session.get(stats_url) as response:
            received = await response.json()

    failed = stats.failed + stats.dropped
    print(f"receiver: verified={received['ok']} rejected={received['bad']} (standardwebhooks)")
    print(
        f"throughput: {messages} messages in {elapsed:.3f}s with {workers} workers,"
        f" failed={failed}, dispatcher CPU {cpu:.2f}s, receiver CPU (whole run)"
        f" {received['cpu_s']:.2f}s"
    )
    p50, p99 = _percentile(latencies, 50), _percentile(latencies, 99)
    print(
        f"latency: dispatcher p50={p50:.3f}ms p99={p99:.3f}ms;"
        f" bare aiohttp POST p50={_percentile(bare, 50):.3f}ms p99={_percentile(bare, 99):.3f}ms"
    )
    print(f"dispatch: deliveries_per_s={throughput:.1f} p50_ms={p50:.3f} p99_ms={p99:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=32)  # the dispatcher's default
    args = parser.parse_args()

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    receiver = multiprocessing.get_context("spawn").Process(target=_serve, args=(sock, SECRET))
    receiver.start()
    sock.close()
    try:
        url = f"http://127.0.0.1:{port}/hook"
        asyncio.run(
            _bench(url, f"http://127.0.0.1:{port}/stats", args.messages, args.samples, args.workers)
        )
    finally:
        receiver.terminate()
        receiver.join()


if __name__ == "__main__":
    main()
