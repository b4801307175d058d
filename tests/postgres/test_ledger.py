"""The Postgres ledger's own checks (the shared scenarios are in tests/contract)."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import HOST_TABLES, PostgresLedger, check, migrate
from stall_core import LedgerError, PacingPolicy
from stall_testing import HostError, PostgresDriver, RecordingWake
from stall_testing.contract import stalled_queue, sweep
from tests import pg
from tests.support import T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

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


async def host_rows(pool: asyncpg.Pool) -> dict[str, list[dict[str, object]]]:
    """Every row of every host table, every column (``SELECT *``), as plain dicts."""
    return {
        table: [dict(r) for r in await pool.fetch(f"SELECT * FROM {table} ORDER BY id")]
        for table in HOST_TABLES
    }


async def ledger_board(driver: PostgresDriver, site: pg.Site) -> None:
    """At NOW: lane-a is due for nudge 1, poison for nudge 2, and drained has a row but no work."""
    await stalled_queue(driver, queue="lane-a")
    await driver.create_todo(
        "p", endpoint_id="ep-1", queue="poison", created_at=T0, delivery_id="dlv-ep-1-lane-a"
    )
    async with site.connect() as conn:
        await conn.executemany(
            "INSERT INTO stall_nudge.queue_stall_nudges VALUES ($1, $2, $3, $4)",
            [("ep-1", "poison", 1, NOW - minutes(6)), ("ep-1", "drained", 2, NOW - minutes(9))],
        )


async def test_host_verb_mistakes_are_host_errors(site: pg.Site) -> None:
    """The reference host names a duplicate, a missing parent or bad text, changing nothing."""
    async with site.driver() as driver:
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


async def test_a_ledger_table_dropped_under_a_prepared_tick_names_the_fix(site: pg.Site) -> None:
    """Ledger table missing once the tick's statements are cached: the tick fails naming it and
    `migrate`; one migrate restores it, and the next tick nudges afresh."""
    async with site.driver() as driver:
        await stalled_queue(driver)
        assert 1 == len((await sweep(driver, T0 + minutes(10), RecordingWake())).charged)
        await pg.execute(site.dsn, "DROP TABLE stall_nudge.queue_stall_nudges")

        with pytest.raises(LedgerError, match=r"queue_stall_nudges.*stall-nudge migrate"):
            await driver.ledger.charge_due(policy=PacingPolicy())
        async with site.connect(site.cast.migrator) as conn:
            assert "missing: stall_nudge.queue_stall_nudges" in (await migrate(conn)).repaired
            # The ledger's indexes, constraint and grants came back with it.
            assert () == (await check(conn)).problems
        report = await sweep(driver, T0 + minutes(30), RecordingWake())

        assert [1] == [n.number for n in report.charged]


async def test_a_failing_charge_writes_nothing(site: pg.Site) -> None:
    """A database error mid-statement raises LedgerError and leaves every ledger row as is."""
    async with site.driver() as driver:
        await ledger_board(driver, site)
        # The ledger refuses one pair's row, so the error strikes while the statement
        # is charging lane-a and deleting the drained row.
        await pg.execute(site.dsn, POISON_TRIGGER)
        before = await driver.ledger_rows()
        wake = RecordingWake()

        with pytest.raises(LedgerError, match=r"charging due pairs failed: .*poisoned queue"):
            await sweep(driver, NOW, wake)

        assert [] == wake.sent
        assert before == await driver.ledger_rows()
        # The same board without the trigger charges both pairs and drains the empty one.
        await pg.execute(site.dsn, "DROP TRIGGER poison ON stall_nudge.queue_stall_nudges")
        report = await sweep(driver, NOW, wake)
        assert ([("ep-1", "lane-a"), ("ep-1", "poison")], [("ep-1", "drained")]) == (
            sorted(n.key for n in report.charged),
            list(report.cleared),
        )


async def test_a_timed_out_charge_writes_nothing(site: pg.Site) -> None:
    """A charge held past its timeout by a row lock raises LedgerError and writes nothing."""
    async with site.driver() as driver:
        await ledger_board(driver, site)
        before = await driver.ledger_rows()
        async with site.connect() as blocker, blocker.transaction():
            # Another session holds the due row, so the charge waits until it is cancelled.
            await blocker.execute(
                "SELECT 1 FROM stall_nudge.queue_stall_nudges WHERE queue = 'poison' FOR UPDATE"
            )
            impatient = PostgresLedger(driver.sweeper, clock=FakeClock(NOW), timeout=0.3)
            with pytest.raises(LedgerError, match=r"charging due pairs failed: .*time"):
                await impatient.charge_due(policy=PacingPolicy())

        assert before == await driver.ledger_rows()
