"""`stall-nudge demo`: the reported case and the lost wake, end to end, in seconds.

Real parts only: an embedded PostgreSQL (or --dsn), the reaper as
``open_reaper`` builds it (the Postgres ledger, the HTTP dispatcher) and a
loopback notify hook whose one-shot consumer verifies each signature, claims
one todo and exits. Only time is accelerated: the ledger, the wire and the
consumer read one virtual clock that the demo moves by one reaper tick at a
time.

Its parser lives in ``stall_nudge.cli``: this module loads only when the demo runs.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import secrets
import uuid
from base64 import b64encode
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta

import asyncpg
from aiohttp import web

import stall_nudge
from adapters.http import parse_secret, sign
from adapters.postgres import DATABASE_ERRORS, describe, migrate
from adapters.postgres.sql import queries
from stall_core import LedgerRow, PairKey, TodoRef, WakeError, format_duration
from stall_nudge._bootstrap import Parts
from stall_nudge.scratch import (
    EmbeddedUnavailable,
    create_database,
    drop_database,
    embedded_postgres,
    with_database,
)

from .common import CliError, open_parts

ENDPOINT = "ep-demo"
TICK = timedelta(seconds=15)
#: Virtual time the demo runs past the last wake, to show the wakes stopped.
QUIET = timedelta(hours=1)


def run(args: argparse.Namespace) -> int:
    # The timeline tells the story; the dispatcher's expected "queue full" warning would repeat it.
    logging.getLogger("adapters.http").setLevel(logging.ERROR)
    return asyncio.run(_demo(args.dsn))


_SQL = queries("stall_nudge.cli", "demo.sql")


class VirtualClock:
    """The demo's accelerated time, started now: it moves only when the demo says."""

    def __init__(self) -> None:
        self.now = self.start = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def offset(self) -> str:
        return "+" + format_duration(self.now - self.start)


class Timeline:
    """The readable story the demo prints as it goes."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock

    def say(self, event: str, *, nudge: int | None = None, row: str = "") -> None:
        number = "" if nudge is None else f"nudge {nudge}"
        print(f"{self._clock.offset():>9}  {event:<58} {number:<8} {row}".rstrip(), flush=True)


class OneShotConsumer:
    """A notify hook whose every wake starts a consumer that claims ONE todo and exits.

    It verifies the Standard Webhooks signature, reads meta.todo_id and the
    pair, and claims through the durable verb (the pair's oldest pending todo),
    as any consumer of SPEC-0024 does; ``reason`` only goes into the log.
    """

    def __init__(self, pool: asyncpg.Pool, clock: VirtualClock, timeline: Timeline) -> None:
        self.secret = "whsec_" + b64encode(secrets.token_bytes(32)).decode()
        self._key = parse_secret(self.secret)
        self._pool = pool
        self._clock = clock
        self._timeline = timeline
        self._runs: set[asyncio.Task[None]] = set()
        self.hold = asyncio.Event()
        self.hold.set()
        self.wakes: list[tuple[datetime, str, str]] = []
        self.bad_signatures = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = sign(
            self._key,
            request.headers.get("webhook-id", ""),
            int(request.headers.get("webhook-timestamp", "0")),
            body,
        )
        if not hmac.compare_digest(expected, request.headers.get("webhook-signature", "")):
            self.bad_signatures += 1
            return web.Response(status=401)
        meta = json.loads(body)["meta"]
        self.wakes.append((self._clock.now, meta["queue"], meta["reason"]))
        task = asyncio.create_task(self._consume(meta))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        await self.hold.wait()
        return web.Response(status=204)

    async def _consume(self, meta: dict[str, str]) -> None:
        at = self._clock.now + timedelta(seconds=2)  # the consumer process starts up
        claimed = await self._pool.fetchval(
            _SQL["claim_next"], meta["endpoint_id"], meta["queue"], at
        )
        what = f"claimed {claimed} and exited" if claimed else "found nothing, exited"
        self._timeline.say(f"  consumer woken ({meta['reason']} {meta['todo_id']}): {what}")

    async def settle(self) -> None:
        """Wait for every consumer started so far to exit."""
        while self._runs:
            await asyncio.gather(*self._runs)


@asynccontextmanager
async def _receiver(consumer: OneShotConsumer) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", consumer.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


@contextmanager
def _server(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    try:
        with embedded_postgres() as embedded:
            yield embedded
    except EmbeddedUnavailable as exc:
        raise CliError(str(exc), status=1) from None


@asynccontextmanager
async def _throwaway_database(dsn: str) -> AsyncIterator[str]:
    name = f"stall_demo_{uuid.uuid4().hex[:10]}"
    try:
        await create_database(dsn, name)
    except DATABASE_ERRORS as exc:
        raise CliError(f"cannot create the demo database: {describe(exc)}", status=1) from None
    except ValueError:  # asyncpg's DSN parser; its message may quote the password
        raise CliError("malformed DSN: asyncpg refuses it (check it with psql)") from None
    try:
        yield with_database(dsn, name)
    finally:
        await drop_database(dsn, name)


async def _demo(dsn: str | None) -> int:
    clock = VirtualClock()
    with _server(dsn) as server:
        # The host: its pool, and a one-slot dispatcher for its creation wakes, so that
        # "its queue is full at the moment of creation" is easy to stage. The sweep
        # (open_reaper, below) gets its own.
        async with (
            _throwaway_database(server) as database,
            open_parts(database, clock=clock, queue_size=1) as host,
        ):
            async with host.pool.acquire() as conn:
                await migrate(conn, host_schema=True)
            return await _play(host, clock)


def _row(rows: Mapping[PairKey, LedgerRow], queue: str) -> str:
    row = rows.get((ENDPOINT, queue))
    return f"[{queue}: none]" if row is None else f"[{queue}: nudges={row.nudges}]"


async def _play(host: Parts, clock: VirtualClock) -> int:
    pool = host.pool
    timeline = Timeline(clock)
    consumer = OneShotConsumer(pool, clock, timeline)
    print("stall-nudge demo: SPEC-0038 on real PostgreSQL and HTTP, one tick = 15 s virtual")
    print(f"{'time':>9}  {'event':<58} {'nudge':<8} ledger")
    async with _receiver(consumer) as url:
        await pool.execute(_SQL["add_endpoint"], ENDPOINT)
        await pool.execute(_SQL["add_hook"], "hook-demo", ENDPOINT, url, consumer.secret)
        await pool.execute(_SQL["add_delivery"], "dlv-demo", ENDPOINT, clock.now)
        # The demo's virtual clock stands in for the database's: it is the ledger's time.
        async with (
            host.dispatcher as creation,
            stall_nudge.open_reaper(pool, clock=clock) as reaper,
        ):

            async def inbound(queue: str, *todo_ids: str) -> str:
                """One inbound webhook: its todos, then ONE creation wake naming the first."""
                for todo_id in todo_ids:
                    await pool.execute(
                        _SQL["create_todo"],
                        todo_id,
                        ENDPOINT,
                        queue,
                        "dlv-demo",
                        f"work item {todo_id}",
                        clock.now,
                    )
                try:
                    await creation.notify(
                        endpoint_id=ENDPOINT,
                        queue=queue,
                        todo=TodoRef(id=todo_ids[0], created_at=clock.now),
                        reason="created",
                    )
                except WakeError:
                    return "DROPPED (dispatcher queue full)"
                return "sent"

            # The receiver holds its answer, so lane-l's wake fills the one-slot queue ...
            consumer.hold.clear()
            sent = await inbound("lane-l", "l-1", "l-2", "l-3")
            timeline.say(f"inbound webhook: l-1, l-2, l-3 on lane-l; creation wake {sent}")
            # ... and lane-m's creation wake, a moment later, is lost.
            sent = await inbound("lane-m", "m-1")
            timeline.say(f"inbound webhook: m-1 on lane-m; creation wake {sent}")
            consumer.hold.set()
            await creation.settle()
            await consumer.settle()

            last_wake = clock.now
            while clock.now - last_wake < QUIET:
                clock.now += TICK
                report = await reaper.tick()
                if report.charged or report.cleared:
                    rows = await host.ledger.ledger_rows()
                    for nudge in report.charged:
                        last_wake = clock.now
                        timeline.say(
                            f"sweep: {nudge.queue} stalled, todo.ready(stalled) "
                            f"names {nudge.todo.id}",
                            nudge=nudge.number,
                            row=_row(rows, nudge.queue),
                        )
                    for _, queue in report.cleared:
                        timeline.say(
                            f"sweep: {queue} drained, ledger row cleared", row=_row(rows, queue)
                        )
                await reaper.settle()
                await consumer.settle()

    created = await pool.fetchval(_SQL["todo_count"])
    pending = [r["id"] for r in await pool.fetch(_SQL["left_over"])]
    left = await host.ledger.ledger_rows()
    stalled_wakes = [w for w in consumer.wakes if w[2] == "stalled"]
    quiet_for = clock.now - max(at for at, _, _ in consumer.wakes)
    ok = not pending and not left and consumer.bad_signatures == 0 and quiet_for >= QUIET
    print(
        f"verdict: {'OK' if ok else 'FAILED'}: {created - len(pending)} of {created} todos "
        f"claimed, {len(stalled_wakes)} stalled wakes, ledger rows left {len(left)}, "
        f"silent for {format_duration(quiet_for)} after the last wake"
        + ("" if not pending else f"; still pending: {', '.join(pending)}")
    )
    return 0 if ok else 1
