"""Draw docs/status-page.png again: a board in several verdicts, the status page, chromium.

    .venv/bin/python tools/screenshot.py                 # on an embedded PostgreSQL 18
    .venv/bin/python tools/screenshot.py --dsn postgresql://postgres@127.0.0.1:5432/test

On a throwaway database (dropped at the end) it builds the reference host,
then plays seven and a half hours of the sweep on a clock of its own, so
the ledger and its history hold what real time would leave: a capped pair,
a failing hook's pairs backing off, a pair nudged twice, a receiver that
failed and answers again, and an endpoint an operator silenced (with who,
why and until when). Hooks point at a loopback
receiver (``stall_testing.Receiver``). The page is served on loopback
while the reaper's loop runs, and headless chromium writes the PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

import stall_nudge
from adapters.http import CREATED
from adapters.postgres import migrate
from stall_core import TodoRef
from stall_nudge.ops_port import serve_ops_port
from stall_testing import (
    FakeClock,
    PostgresHost,
    Receiver,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)

OUT = Path(__file__).resolve().parents[1] / "docs" / "status-page.png"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: Headless, and nothing fetched but the page: chromium only ever talks to loopback here.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1440,900",
)


async def play(pool: asyncpg.Pool, receiver: Receiver, clock: FakeClock, chromium: str) -> None:
    """Build the board, sweep it through its history on ``clock``, then photograph the page."""
    start = clock.now
    host = PostgresHost(pool)
    ok, failing = receiver.url("ok", SECRET), receiver.url("fail", SECRET)
    flaky = receiver.url("flaky", SECRET)
    receiver.route("fail", 400)  # a final failure: booked against the hook, nudge refunded
    receiver.route("flaky", 400)  # until the last nudges: then it answers again (recovered)
    for endpoint, state, url in [
        ("ep-billing", "active", ok),
        ("ep-search", "active", failing),
        ("ep-orders", "active", flaky),
        ("ep-reports", "active", ok),
        ("ep-ingest", "paused", ok),
        ("ep-mail", "active", None),
        ("ep-intake", "active", ok),
    ]:
        await host.add_endpoint(endpoint, state=state)
        if url:
            await host.add_hook(f"hook-{endpoint}", endpoint_id=endpoint, url=url, secret=SECRET)
    await host.add_delivery("unsigned", endpoint_id="ep-intake", verified=False, received_at=start)
    todos = [  # (endpoint, queue, minutes after start it was created)
        ("ep-billing", "invoices", -3),  # five nudges over the whole run: capped
        ("ep-billing", "refunds", 400),
        ("ep-billing", "refunds", 401),
        ("ep-search", "synonyms", 410),
        ("ep-search", "<script>alert(1)</script>", 420),
        ("ep-search", "reindex", 430),
        ("ep-mail", "outbound", 420),  # no hook: no-receiver
        ("ep-ingest", "webhooks", 440),  # paused endpoint
        ("ep-intake", "forms", 408),  # an unverified delivery: held by the gate
        ("ep-billing", "disputes", 447),  # a minute old at the end: fresh
        (
            "ep-orders",
            "shipping",
            405,
        ),  # refunded at 435 and 445.5; a creation wake answered at 448: recovered
        ("ep-reports", "exports", 420),  # silenced before its first nudge
    ]
    for n, (endpoint, queue, minutes) in enumerate(todos):
        created = start + timedelta(minutes=minutes)
        delivery = "unsigned" if endpoint == "ep-intake" else None
        await host.create_todo(
            f"t-{n}", endpoint_id=endpoint, queue=queue, created_at=created, delivery_id=delivery
        )
    async with stall_nudge.open_reaper(pool, clock=clock) as reaper:
        # Each nudge of invoices is due at one of these; the rest charge along the way.
        for minutes in (0, 5, 25, 85, 435, 445.5):
            clock.set(start + timedelta(minutes=minutes))
            if minutes == 435:
                await reaper.silence(
                    "ep-reports",
                    None,
                    lasting=timedelta(hours=2),
                    by="ann",
                    reason="exporter redeploy",
                )
            while (await reaper.tick()).charged:  # past the tick limit, until all are charged
                await reaper.settle()
                clock.advance(timedelta(seconds=1))
            await reaper.settle()
        clock.set(start + timedelta(minutes=448))
        receiver.route("flaky", 204)  # the receiver is fixed: it answers the host's next wake
        todo = TodoRef(id="t-new", created_at=clock.now)
        await host.create_todo(
            todo.id, endpoint_id="ep-orders", queue="shipping", created_at=clock.now
        )
        await reaper.notify(endpoint_id="ep-orders", queue="shipping", todo=todo, reason=CREATED)
        await reaper.settle()
        # The loop's first tick charges nothing; after it the page says the sweep is ready.
        stop, ticked = asyncio.Event(), asyncio.Event()
        every = timedelta(seconds=15)
        loop = asyncio.create_task(
            reaper.run(interval=every, stop=stop, on_report=lambda _: ticked.set())
        )
        try:
            await ticked.wait()
            async with serve_ops_port(reaper, host="127.0.0.1", port=0) as url:
                await photograph(chromium, url + "/")
        finally:
            stop.set()
            await loop


async def photograph(chromium: str, url: str) -> None:
    with tempfile.TemporaryDirectory(prefix="stall-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={OUT}",
            url,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await proc.communicate()
    if proc.returncode != 0 or not OUT.exists():
        raise SystemExit(f"chromium failed: {stderr.decode(errors='replace')[-500:]}")


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
    else:
        with embedded_postgres() as embedded:
            yield embedded


async def main(dsn: str | None, chromium: str) -> None:
    # The run ends now: 7 h 28 min after the first nudge of a pair that will be capped.
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=448))
    with server(dsn) as base:
        name = f"stall_screenshot_{uuid.uuid4().hex[:10]}"
        await create_database(base, name)
        try:
            async with (
                asyncpg.create_pool(with_database(base, name), min_size=1, max_size=4) as pool,
                Receiver(clock=clock) as receiver,
            ):
                async with pool.acquire() as conn:
                    await migrate(conn, host_schema=True)
                await play(pool, receiver, clock, chromium)
        finally:
            await drop_database(base, name)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dsn", help="a PostgreSQL server to use (default: an embedded one)")
    args = parser.parse_args()
    # The failing hook's deliveries are staged; their warnings would only repeat that.
    logging.getLogger("adapters.http").setLevel(logging.ERROR)
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("tools/screenshot.py: needs Debian's chromium (apt-get install chromium)")
    asyncio.run(main(args.dsn, chromium))
