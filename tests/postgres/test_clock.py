"""The database is the one clock, and every tick is bounded (Postgres only).

The skew checks run the real `stall-nudge sweep --once` in separate
processes whose wall clock libfaketime shifts, against the test database
and a loopback notify hook: the honest way to skew one process's clock.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, Nudge, PacingPolicy, Sweeper, TodoRef
from stall_testing import PostgresHost, Receiver, RecordingWake, skewed_env
from tests.support import T0

from .proxy import BlackHoleProxy

pytestmark = pytest.mark.postgres

SECRET = "whsec_" + "A" * 32
POLICY = PacingPolicy()


async def db_now(pool: asyncpg.Pool) -> datetime:
    now: datetime = await pool.fetchval("SELECT clock_timestamp()")
    return now


async def test_the_database_clock_decides(pg_pool: asyncpg.Pool) -> None:
    """With no clock given, the ledger charges at the database's time, read inside the tick."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
    now = await db_now(pg_pool)
    await host.create_todo(
        "old", endpoint_id="ep-1", queue="q", created_at=now - timedelta(minutes=10)
    )
    await host.create_todo(
        "new", endpoint_id="ep-1", queue="r", created_at=now - timedelta(seconds=60)
    )
    wake = RecordingWake()

    before = await db_now(pg_pool)
    report = await Sweeper(ledger=PostgresLedger(pg_pool), wake=wake).tick()
    after = await db_now(pg_pool)

    assert ["q"] == [n.queue for n in report.charged]
    assert before < report.now < after
    assert report.now == report.charged[0].charged_at


@pytest.mark.parametrize("skew", ["+90s", "-30s"])
def test_a_skewed_process_runs_on_a_shifted_wall_clock(skew: str) -> None:
    """The skew the sidecar tests rely on takes hold: the child's clock is off by exactly it."""
    offset_ns = int(skew.removesuffix("s")) * 1_000_000_000
    before = time.time_ns()
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time_ns())"],
        env=skewed_env(skew),
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    after = time.time_ns()
    # The child read its clock between our two readings, shifted by the offset.
    assert before + offset_ns <= int(out) <= after + offset_ns


async def sidecar_tick(dsn: str, skew: str) -> dict[str, object]:
    """One `stall-nudge sweep --once --json` in a process whose wall clock is moved by ``skew``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stall_nudge.cli",
        "sweep",
        "--once",
        "--json",
        "--dsn",
        dsn,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**skewed_env(skew), "PYTHONWARNINGS": "error"},
    )
    out, err = await proc.communicate()
    assert (0, b"") == (proc.returncode, err), err.decode()
    line: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return line


@pytest.mark.parametrize("skew", ["+90s", "-10s", "+30s", "-30s"])
async def test_a_skewed_sidecar_decides_on_the_database_clock(
    skew: str,
    pg_pool: asyncpg.Pool,
    pg_dsn: str,
    receiver: Receiver,
) -> None:
    """A sidecar ahead or behind the database nudges no young todo and resets once per claim."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    now = await db_now(pg_pool)
    for todo_id in ("s1", "s2", "s3"):
        await host.create_todo(
            todo_id, endpoint_id="ep-1", queue="stalled", created_at=now - timedelta(minutes=10)
        )
    await host.create_todo(
        "young", endpoint_id="ep-1", queue="young", created_at=now - timedelta(seconds=60)
    )

    first = await sidecar_tick(pg_dsn, skew)
    # The consumer claims with the database's clock (the host's obligation), then more ticks.
    assert "s1" == await host.claim_next("ep-1", "stalled", owner="consumer")
    rest = [await sidecar_tick(pg_dsn, skew) for _ in range(3)]

    numbers = [[(c["queue"], c["nudge"]) for c in t["charged"]] for t in [first, *rest]]  # type: ignore[attr-defined]
    assert [[("stalled", 1)], [("stalled", 1)], [], []] == numbers
    metas = [m.json()["meta"] for m in receiver.messages]
    assert [("stalled", "s1"), ("stalled", "s2")] == [(m["queue"], m["todo_id"]) for m in metas]
    assert [] == receiver.refused
    rows = await PostgresLedger(pg_pool).ledger_rows()
    assert [("ep-1", "stalled")] == list(rows)


async def backend_pid(pool: asyncpg.Pool) -> int:
    """The server process behind the pool's one connection."""
    pid: int = await pool.fetchval("SELECT pg_backend_pid()")
    return pid


async def test_a_black_holed_database_fails_the_tick_by_the_ledgers_own_timeout(
    pg_dsn: str,
) -> None:
    """A tick waiting on a silent database fails by the ledger's timeout and is cut off."""
    # Shown by events, not by timing: the tick's BEGIN is held by the frozen proxy (it
    # waits on the silence), the failure is the ledger's own deadline (a LedgerError
    # naming its 1 s, not the hang guard's TimeoutError), and the next tick runs on a
    # new server connection (the old one was cut off, not handed back).
    async with BlackHoleProxy(pg_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            ledger = PostgresLedger(pool, timeout=1.0)
            sweeper = Sweeper(ledger=ledger, wake=RecordingWake())
            assert False is (await sweeper.tick()).skipped
            before = await backend_pid(pool)
            proxy.freeze()
            # A hang guard only, far past the ledger's timeout: it raises TimeoutError,
            # never the LedgerError checked below.
            async with asyncio.timeout(60):
                tick = asyncio.create_task(sweeper.tick())
                await proxy.withheld(b"BEGIN")
                with pytest.raises(LedgerError) as failure:
                    await tick
                proxy.thaw()
                recovered = await sweeper.tick()
                after = await backend_pid(pool)
        finally:
            pool.terminate()
    assert "charging due pairs failed: timed out after 1s" == str(failure.value)
    assert False is recovered.skipped
    assert before != after


async def test_cancelling_a_tick_on_a_silent_database_returns_at_once(pg_dsn: str) -> None:
    """A tick cancelled while the database is silent cuts its connection off instead of waiting."""
    async with BlackHoleProxy(pg_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            # A bound far past the guard below: only the cut-off can end the wait.
            ledger = PostgresLedger(pool, timeout=3600)
            await ledger.ledger_rows()
            before = await backend_pid(pool)
            proxy.freeze()
            tick = asyncio.create_task(ledger.charge_due(policy=PacingPolicy()))
            # The tick's BEGIN reached the silent server: it is waiting on it now.
            await asyncio.wait_for(proxy.withheld(b"BEGIN"), 30)
            tick.cancel()
            # The wait only turns a hang into a failure (asyncpg's own wait is 60 s).
            await asyncio.wait({tick}, timeout=10)
            assert (True, True) == (tick.done(), tick.cancelled())
            proxy.thaw()
            # The cut-off connection is replaced: the ledger works again, on a new one.
            assert False is (await ledger.charge_due(policy=PacingPolicy())).skipped
            assert before != await backend_pid(pool)
        finally:
            pool.terminate()


async def test_a_connection_the_server_terminates_mid_call_is_a_ledger_error(
    pg_dsn: str, pg_pool: asyncpg.Pool
) -> None:
    """A backend killed mid-statement fails that call as a LedgerError; the next call works.

    asyncpg hands such a connection back to its pool by itself, so the ledger
    must not try to cut it off a second time.
    """
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        ledger = PostgresLedger(pool, timeout=30)
        pid = await pool.fetchval("SELECT pg_backend_pid()")
        # Every read the ledger makes is held up behind this lock until the kill.
        async with pg_pool.acquire() as locker, locker.transaction():
            await locker.execute(
                "LOCK TABLE stall_nudge.queue_stall_nudges IN ACCESS EXCLUSIVE MODE"
            )
            read = asyncio.create_task(ledger.status(policy=PacingPolicy()))
            async with asyncio.timeout(10):
                blocked = False
                while not blocked:
                    blocked = await pg_pool.fetchval(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                        pid,
                    )
            assert await pg_pool.fetchval("SELECT pg_terminate_backend($1)", pid)
            with pytest.raises(LedgerError, match="reading the queue status failed"):
                await read
        assert [] == (await ledger.status(policy=PacingPolicy()))[1]
    finally:
        pool.terminate()


async def test_a_refund_is_bounded_too(pg_dsn: str) -> None:
    """A refund waiting on a black-holed database fails by the ledger's own timeout."""
    async with BlackHoleProxy(pg_dsn) as proxy:
        pool = await asyncpg.create_pool(proxy.dsn, min_size=1, max_size=1)
        try:
            ledger = PostgresLedger(pool, timeout=0.5)
            await ledger.ledger_rows()
            proxy.freeze()
            # A hang guard only: it raises TimeoutError, never the LedgerError checked below.
            async with asyncio.timeout(60):
                refund = asyncio.create_task(ledger.refund(_a_nudge()))
                await proxy.withheld(b"BEGIN")
                with pytest.raises(LedgerError, match=r"timed out after 500ms"):
                    await refund
        finally:
            pool.terminate()


def _a_nudge() -> Nudge:
    return Nudge(
        endpoint_id="ep-1",
        queue="q",
        todo=TodoRef(id="t", created_at=T0),
        number=1,
        charged_at=T0,
    )


@pytest.mark.parametrize(
    ("claimed", "stamp", "after_charge"),
    [
        ("a", "now()", [(1, "b")]),
        ("c", "now()", []),
        ("c", "clock_timestamp()", [(1, "a")]),
    ],
    ids=["named-todo-departs", "other-todo-stamped-before", "other-todo-stamped-after"],
)
async def test_a_claim_in_flight_during_a_charge_counts_as_its_stamp_says_or_by_departure(
    pg_pool: asyncpg.Pool,
    pg_dsn: str,
    claimed: str,
    stamp: str,
    after_charge: list[tuple[int, str]],
) -> None:
    """A claim whose transaction began before the last charge and commits after it.

    Claiming the todo the charge named is progress at the next tick, whatever
    the stamp (the named todo departed). A claim of another todo counts as its
    stamp says: ``now()``, its transaction's start, is before the charge (no
    progress: the capped pair stays silent, its work claimable);
    ``clock_timestamp()`` once the charge committed is after it (progress).
    """
    host = PostgresHost(pg_pool)
    await host.add_endpoint("ep-1")
    await host.add_hook("hook-1", endpoint_id="ep-1", url="http://127.0.0.1:9/", secret=SECRET)
    now = await db_now(pg_pool)
    for todo_id in ("a", "b", "c"):
        await host.create_todo(
            todo_id, endpoint_id="ep-1", queue="q", created_at=now - timedelta(hours=8)
        )
    # The nudge before the last was its backoff step and a second ago: the last is due now.
    await pg_pool.execute(
        "INSERT INTO stall_nudge.queue_stall_nudges VALUES ('ep-1', 'q', $1, $2)",
        POLICY.cap - 1,
        now - POLICY.backoff[POLICY.cap - 2] - timedelta(seconds=1),
    )
    sweeper = Sweeper(ledger=PostgresLedger(pg_pool), wake=RecordingWake())
    consumer = await asyncpg.connect(pg_dsn)
    try:
        # Its BEGIN fixed now(), before the charge; it claims once the charge committed.
        async with consumer.transaction():
            during = await sweeper.tick()
            await consumer.execute(
                f"UPDATE todos SET state = 'claimed', claimed_at = {stamp} WHERE id = $1",
                claimed,
            )
        after = await sweeper.tick()
        again = await sweeper.tick()
    finally:
        await consumer.close()

    assert [(POLICY.cap, "a")] == [(n.number, n.todo.id) for n in during.charged]
    assert after_charge == [(n.number, n.todo.id) for n in after.charged]
    assert () == again.charged
