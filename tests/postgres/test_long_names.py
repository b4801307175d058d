"""Names of any length: installing never fails on them, and no tick stumbles on them.

A btree entry stops near 2.7 kB, so our indexes keyed by a pair's names hold
only pairs whose names fit in 2,000 bytes (``stall_core.names_fit``). A pair
with longer names is never swept; status lists it as ``names-too-long``.
Which pairs fit, in a full pass and in status, is held to ``names_fit`` in
test_rules_differential.py; a host write of a long name, in
tests/hostile/test_names.py. Here the names cannot be compressed to fit.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import asyncpg
import pytest

from adapters.postgres import check, migrate
from stall_testing import RecordingWake
from stall_testing.contract import POLICY, sweep
from tests import pg
from tests.support import T0, minutes

pytestmark = pytest.mark.postgres

#: Random hex does not compress, so this queue name cannot fit a btree entry whole.
LONG_QUEUE = "lane-" + secrets.token_hex(1600)
#: A pending index keying the names whole, with no length predicate.
WHOLE_NAMES_INDEX = "CREATE INDEX whole_names ON todos (endpoint_id, queue) WHERE state = 'pending'"


async def test_migrate_succeeds_on_a_table_holding_a_long_name(bare_site: pg.Site) -> None:
    """migrate indexes a table already holding a long-named todo; one of whole names could not."""
    async with bare_site.connect() as conn:
        await conn.execute(
            f"SET search_path = {pg.HOST_SCHEMA}; INSERT INTO endpoints VALUES ('ep-1', 'active');"
            f" INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
            f" VALUES ('t-1', 'ep-1', '{LONG_QUEUE}', 'pending', now())"
        )
        with pytest.raises(asyncpg.ProgramLimitExceededError, match="index row size"):
            await conn.execute(WHOLE_NAMES_INDEX)  # the name is long enough to matter

    async with bare_site.connect(bare_site.cast.migrator) as conn:
        report = await migrate(conn, grant=bare_site.cast.sweeper)

        assert "missing: index stall_nudge_pending on todos" in report.repaired
        assert () == (await check(conn)).problems


async def test_a_long_named_pair_stops_no_delta(site: pg.Site) -> None:
    """A stalled pair with a long queue name, found by a delta, is not charged; others are."""
    async with site.driver() as driver:
        await driver.add_endpoint("ep-1")
        await driver.add_hook("hook-ep-1", endpoint_id="ep-1")
        for todo in ("t-1", "t-2"):
            await driver.create_todo(todo, endpoint_id="ep-1", queue=LONG_QUEUE, created_at=T0)
        await driver.create_todo("t-short", endpoint_id="ep-1", queue="lane-l", created_at=T0)
        wake = RecordingWake()
        stalled = T0 + POLICY.threshold + timedelta(seconds=1)

        # Both pairs cross the threshold between the two ticks: the second is a delta.
        reports = [await sweep(driver, at, wake) for at in (T0 + minutes(1), stalled)]

        assert ["full", "delta"] == [r.kind for r in reports]
        assert [("lane-l", "t-short", 1)] == [(n.queue, n.todo.id, n.number) for n in wake.sent]
        assert [("ep-1", "lane-l")] == list(await driver.ledger_rows())
