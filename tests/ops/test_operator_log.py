"""What the sweep loop says in its log: start, stop, and one line a failure."""

from __future__ import annotations

import asyncio
import logging
import re

import asyncpg
import pytest

import stall_nudge
from adapters.postgres import SCHEMA_VERSION
from stall_core import PacingPolicy, TickFailure
from stall_testing import PostgresHost, Receiver
from tests.postgres.proxy import BlackHoleProxy

from .conftest import stalled_pair

pytestmark = pytest.mark.postgres


def messages(caplog: pytest.LogCaptureFixture, logger: str = "stall_nudge") -> list[str]:
    """The messages of the captured records from ``logger`` and its children."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == logger or r.name.startswith(logger + ".")
    ]


async def one_tick_loop(reaper: stall_nudge.Reaper, **callbacks: object) -> None:
    """Run the loop until its first tick is handed over, then stop it."""
    stop = asyncio.Event()

    def stopping(_: object) -> None:
        stop.set()

    await reaper.run(interval=0.05, stop=stop, on_report=stopping, on_error=stopping)


async def test_the_loop_says_how_it_starts_and_what_its_stop_waits_for(
    pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up line names version, interval, tick limit and address policy; the stop
    line says what it waits for and for how long."""
    caplog.set_level(logging.INFO)
    async with stall_nudge.open_reaper(pg_pool, stop_timeout=8) as reaper:
        await one_tick_loop(reaper)

    said = messages(caplog)
    start = next(m for m in said if m.startswith("starting: "))
    stop = next(m for m in said if m.startswith("stopping: "))
    assert re.fullmatch(
        rf"starting: version: \S+; schema version: {SCHEMA_VERSION}; host schema: public; "
        rf"interval: 50ms; tick limit: {PacingPolicy().tick_limit}; "
        r"hooks refused: link-local and metadata addresses; stop within: 8s",
        start,
    ), start
    assert re.fullmatch(
        r"stopping: the tick in progress and 0 deliveries in flight get up to 6s, "
        r"then refunds of nudges that reached nobody the rest: all done within 8s",
        stop,
    ), stop


async def test_a_failed_tick_is_logged_once_even_with_an_on_error(
    pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """The library logs a failed tick in one line; on_error gets it to record, not to log."""
    failures: list[TickFailure] = []
    caplog.set_level(logging.INFO)
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        await pg_pool.execute("DROP TABLE stall_nudge.queue_stall_nudges CASCADE")
        stop = asyncio.Event()

        def on_error(failure: TickFailure) -> None:
            failures.append(failure)
            stop.set()

        await reaper.run(interval=0.05, stop=stop, on_error=on_error)

    logged = [r for r in caplog.records if "tick 1" in r.getMessage()]
    assert [logging.ERROR] == [r.levelno for r in logged]
    assert [False] == [bool(r.exc_info) for r in logged]
    assert 1 == len(failures)


async def test_a_database_freeze_logs_one_line_a_fault_and_no_traceback(
    pg_dsn: str,
    pg_pool: asyncpg.Pool,
    host: PostgresHost,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With PostgreSQL black-holed, failed ticks, a failed booking and the pool's own
    reconnect attempts are each one line; no record carries a traceback."""
    await stalled_pair(host, receiver)
    receiver.route("hook", receiver.hang(410))  # a final failure, booked at once when released
    caplog.set_level(logging.INFO)
    booked, failed_twice = asyncio.Event(), asyncio.Event()
    failed: list[TickFailure] = []

    def on_error(failure: TickFailure) -> None:
        failed.append(failure)
        if len(failed) >= 2:
            failed_twice.set()

    class Booked(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "could not book" in record.getMessage():
                booked.set()

    watcher = Booked()
    logging.getLogger().addHandler(watcher)
    try:
        async with (
            BlackHoleProxy(pg_dsn) as proxy,
            stall_nudge.open_reaper(proxy.dsn, timeout=0.5, stop_timeout=2) as reaper,
        ):
            stop = asyncio.Event()
            loop = asyncio.create_task(reaper.run(interval=0.05, stop=stop, on_error=on_error))
            await receiver.wait_for(1, "hook")
            proxy.freeze()
            receiver.release()
            await asyncio.wait_for(booked.wait(), 60)
            await asyncio.wait_for(failed_twice.wait(), 60)
            stop.set()
            await loop
    finally:
        logging.getLogger().removeHandler(watcher)

    assert [] == [r.getMessage() for r in caplog.records if r.exc_info or r.exc_text]
    assert [] == [r.getMessage() for r in caplog.records if "\n" in r.getMessage()]
    booking = next(m for m in messages(caplog, "adapters") if "could not book" in m)
    assert "timed out" in booking
