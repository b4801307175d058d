"""The Postgres ledger's own checks (the shared scenarios are in tests/contract)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import PostgresLedger, check, migrate
from stall_core import (
    ChargeOutcome,
    LedgerError,
    LedgerPort,
    Nudge,
    PacingPolicy,
    Sweeper,
)
from stall_testing import HostError, PostgresDriver, RecordingWake
from stall_testing.contract import stalled_queue, sweep
from tests.postgres.pgboard import host_rows, listening
from tests.support import T0, FakeClock, minutes


@pytest.mark.postgres
class TestPostgresLedger:
    @pytest.fixture(name="driver")
    def _driver(self, pg_pool: asyncpg.Pool) -> PostgresDriver:
        return PostgresDriver(pg_pool)

    async def test_host_verb_mistakes_are_host_errors(self, driver: PostgresDriver) -> None:
        """The reference host names a duplicate, a missing parent or bad text, changing nothing."""
        await stalled_queue(driver)
        before = await host_rows(driver.pool)
        mistakes = [
            (driver.add_endpoint("ep-1"), "endpoint 'ep-1' already exists"),
            (
                driver.create_todo("t", endpoint_id="nope", queue="q", created_at=T0),
                "todo 't'",
            ),
            (
                driver.create_todo("t", endpoint_id="ep-1", queue="q\x00", created_at=T0),
                "queue contains a NUL character",
            ),
            (driver.complete("todo-ep-1-lane-l-0"), "is pending, not claimed"),
            (driver.set_endpoint_state("ghost", "paused"), "no endpoint 'ghost'"),
        ]
        for verb, message in mistakes:
            with pytest.raises(HostError, match=message):
                await verb

        assert before == await host_rows(driver.pool)

    async def test_a_nudge_spends_no_ring_budget_raw_rows(
        self, driver: PostgresDriver, pg_dsn: str
    ) -> None:
        """A nudge spends no ring budget: every host row, all columns, is unchanged by sweeps."""
        ids = await stalled_queue(driver, todos=3)
        await stalled_queue(driver, endpoint="ep-2", queue="quarantine")
        await driver.ring(ids[0], at=T0 + minutes(1))
        await driver.claim(ids[2], owner="someone", at=T0 + minutes(1))
        before = await host_rows(driver.pool)
        wake = RecordingWake()

        async with listening(pg_dsn) as listener:
            clock = FakeClock(T0 + minutes(3))
            while clock.now < T0 + timedelta(hours=9):
                await sweep(driver, clock.now, wake)
                clock.advance(minutes(1))
            notified = await listener.fence(driver.pool)

        assert [1, 2, 3, 4, 5] == [n.number for n in wake.sent]
        assert [] == notified
        assert before == await host_rows(driver.pool)

    async def test_ledger_table_missing(
        self, driver: PostgresDriver, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Ledger table missing: each tick logs why and `migrate`; the loop goes on."""
        await stalled_queue(driver)
        ledger = driver.ledger
        # One good tick first, so the charge statement is prepared and cached when the table goes.
        assert 1 == len((await sweep(driver, T0 + minutes(10), RecordingWake())).charged)
        await driver.pool.execute("DROP TABLE stall_nudge.queue_stall_nudges")
        before = await host_rows(driver.pool)
        stop = asyncio.Event()
        counting = StopAfter(ledger, ticks=5, stop=stop)
        wake = RecordingWake()
        driver.clock.set(T0 + minutes(30))
        sweeper = Sweeper(ledger=counting, wake=wake)

        with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
            ran = await sweeper.run(interval=0.001, stop=stop)

        assert 5 == ran
        assert 5 == len(caplog.records)
        for record in caplog.records:
            # A LedgerError is logged as one line, its message carrying the reason.
            assert not record.exc_info
            text = record.getMessage()
            assert "sweep failed" in text
            assert "queue_stall_nudges" in text
            assert "stall-nudge migrate" in text
        assert [] == wake.sent
        assert before == await host_rows(driver.pool)
        with pytest.raises(LedgerError, match="queue_stall_nudges"):
            await ledger.charge_due(policy=PacingPolicy())

        # Nothing else changed: once migrated again, the next tick nudges afresh.
        async with driver.pool.acquire() as conn:
            assert ("missing: stall_nudge.queue_stall_nudges",) == (await migrate(conn)).repaired
            # The ledger's indexes and constraint came back with it: nothing left to repair.
            assert () == (await check(conn)).problems
        report = await sweeper.tick()
        assert [1] == [n.number for n in report.charged]

    async def test_a_failing_charge_writes_nothing(self, driver: PostgresDriver) -> None:
        """A database error mid-statement raises LedgerError and leaves every ledger row as is."""
        await ledger_board(driver)
        # The ledger refuses one pair's row, so the error strikes while the statement
        # is charging lane-a and deleting the drained row.
        await driver.pool.execute(POISON_TRIGGER)
        before = (await driver.ledger_rows(), await host_rows(driver.pool))
        wake = RecordingWake()

        with pytest.raises(LedgerError, match="poisoned queue"):
            await sweep(driver, NOW, wake)

        assert [] == wake.sent
        assert before == (await driver.ledger_rows(), await host_rows(driver.pool))
        # The same board without the trigger charges both pairs and drains the empty one.
        await driver.pool.execute("DROP TRIGGER poison ON stall_nudge.queue_stall_nudges")
        report = await sweep(driver, NOW, wake)
        assert ([("ep-1", "lane-a"), ("ep-1", "poison")], [("ep-1", "drained")]) == (
            sorted(n.key for n in report.charged),
            list(report.cleared),
        )

    async def test_sweep_query_error(
        self, driver: PostgresDriver, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Sweep query error: logged on each tick, the loop continues, and pull still drains."""
        await ledger_board(driver)
        await driver.pool.execute(POISON_TRIGGER)
        stop = asyncio.Event()
        driver.clock.set(NOW)
        sweeper = Sweeper(ledger=StopAfter(driver.ledger, ticks=3, stop=stop), wake=RecordingWake())

        with caplog.at_level(logging.ERROR, logger="stall_core.sweeper"):
            ran = await sweeper.run(interval=0.001, stop=stop)

        assert 3 == ran
        messages = [r.getMessage() for r in caplog.records]
        assert 3 == len(messages)
        for n, message in enumerate(messages, start=1):
            assert message.startswith(f"tick {n}: sweep failed, the loop continues: ")
            assert "charging due pairs failed" in message
            assert "poisoned queue" in message
        pulled = [
            await driver.claim_next("ep-1", queue, owner="puller", at=NOW)
            for queue in ("lane-a", "poison")
        ]
        assert ["todo-ep-1-lane-a-0", "p"] == pulled

    async def test_a_timed_out_charge_writes_nothing(
        self, driver: PostgresDriver, pg_dsn: str
    ) -> None:
        """A charge held past its timeout by a row lock raises LedgerError and writes nothing."""
        await ledger_board(driver)
        before = await driver.ledger_rows()
        blocker = await asyncpg.connect(pg_dsn)
        try:
            async with blocker.transaction():
                # Another session holds the due row, so the charge waits until it is cancelled.
                await blocker.execute(
                    "SELECT 1 FROM stall_nudge.queue_stall_nudges WHERE queue = 'poison' FOR UPDATE"
                )
                impatient = PostgresLedger(driver.pool, clock=FakeClock(NOW), timeout=0.3)
                with pytest.raises(LedgerError, match=r"charging due pairs failed: .*time"):
                    await impatient.charge_due(policy=PacingPolicy())
        finally:
            await blocker.close()

        assert before == await driver.ledger_rows()


NOW = T0 + minutes(30)

POISON_TRIGGER = """
CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.queue = 'poison' THEN
        RAISE EXCEPTION 'poisoned queue %', NEW.queue;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON stall_nudge.queue_stall_nudges
    FOR EACH ROW EXECUTE FUNCTION poison();
"""


async def ledger_board(driver: PostgresDriver) -> None:
    """At NOW: lane-a is due for nudge 1, poison for nudge 2, and drained has a row but no work."""
    await stalled_queue(driver, queue="lane-a")
    await driver.create_todo(
        "p", endpoint_id="ep-1", queue="poison", created_at=T0, delivery_id="dlv-ep-1-lane-a"
    )
    await driver.pool.executemany(
        "INSERT INTO stall_nudge.queue_stall_nudges VALUES ($1, $2, $3, $4)",
        [("ep-1", "poison", 1, NOW - minutes(6)), ("ep-1", "drained", 2, NOW - minutes(9))],
    )


class StopAfter:
    """A LedgerPort wrapper that sets ``stop`` on its ``ticks``-th charge, then charges."""

    def __init__(self, inner: LedgerPort, *, ticks: int, stop: asyncio.Event) -> None:
        self.inner = inner
        self.left = ticks
        self.stop = stop

    async def charge_due(
        self, *, policy: PacingPolicy, every: timedelta | None = None
    ) -> ChargeOutcome:
        self.left -= 1
        if self.left == 0:
            self.stop.set()
        return await self.inner.charge_due(policy=policy, every=every)

    async def refund(self, nudge: Nudge) -> bool:
        return await self.inner.refund(nudge)


async def test_a_todo_whose_delivery_is_missing_does_not_pass_the_gate(
    pg_pool: asyncpg.Pool,
) -> None:
    """Without the host's foreign key, a dangling delivery id fails the gate in sweep and status."""
    driver = PostgresDriver(pg_pool, FakeClock(T0 + minutes(10)))
    await driver.add_endpoint("ep-1")
    await driver.add_hook("hook-1", endpoint_id="ep-1")
    await pg_pool.execute("ALTER TABLE todos DROP CONSTRAINT todos_delivery_id_fkey")
    await driver.create_todo(
        "dangling",
        endpoint_id="ep-1",
        queue="lane-l",
        created_at=T0,
        delivery_id="no-such-delivery",
        title="<sender text>",
    )
    wake = RecordingWake()

    report = await sweep(driver, T0 + minutes(10), wake)
    _, [status] = await PostgresLedger(pg_pool, clock=driver.clock).status(policy=PacingPolicy())

    assert ((), []) == (report.charged, wake.sent)
    assert (0, 1, "held-by-gate") == (status.sendable, status.held_by_gate, status.verdict.value)
