"""The Prometheus collector: the spec's reserved names and the sweep's own, on real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import stall_nudge
from adapters.postgres import PostgresLedger
from stall_core import LedgerError
from stall_nudge.metrics import QUEUE_LABEL_MAX, ReaperCollector, queue_label
from stall_testing import PostgresHost, Receiver

from .conftest import SECRET, ago, stalled_pair

pytestmark = pytest.mark.postgres

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the registry's exposition, keyed by name and sorted labels."""
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def registry_for(reaper: stall_nudge.Reaper) -> CollectorRegistry:
    """An embedder's own registry holding the reaper's collector."""
    registry = CollectorRegistry()
    registry.register(ReaperCollector(reaper))
    return registry


async def test_a_tick_that_nudges_shows_in_the_reserved_and_the_sweeps_metrics(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """One delivered nudge: counted by queue and outcome, one ledger row, one ok tick."""
    await stalled_pair(host, receiver)
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        report = await reaper.tick()
        await reaper.settle()
        samples = scrape(registry)

    assert 1 == samples["switchboard_queue_stall_nudges_total", (("queue", "lane-l"),)]
    assert 1 == samples["switchboard_queue_stall_ledger_rows", ()]
    assert (1, 0, 0) == tuple(
        samples["switchboard_queue_stall_ticks_total", (("outcome", outcome),)]
        for outcome in ("ok", "skipped", "failed")
    )
    assert (1, 0, 0) == tuple(
        samples["switchboard_queue_stall_nudge_outcomes_total", (("outcome", outcome),)]
        for outcome in ("delivered", "refunded", "abandoned")
    )
    assert 1 == samples["switchboard_queue_stall_tick_duration_seconds_count", ()]
    assert (
        report.now.timestamp()
        == samples["switchboard_queue_stall_last_success_timestamp_seconds", ()]
    )
    assert (0, 0) == (
        samples["switchboard_queue_stall_hook_failures_total", ()],
        samples["switchboard_queue_stall_hook_disables_total", ()],
    )


async def test_a_skipped_tick_counts_as_skipped_and_keeps_the_instance_ready(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """While another instance holds the tick, a tick is skipped: counted, and still a success."""
    await stalled_pair(host, receiver)
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        async with PostgresLedger(pg_pool).hold_tick():
            report = await reaper.tick()
        samples = scrape(registry)
        health = reaper.health(interval=15)

    assert True is report.skipped
    assert 1 == samples["switchboard_queue_stall_ticks_total", (("outcome", "skipped"),)]
    assert 0 == samples.get(("switchboard_queue_stall_nudges_total", (("queue", "lane-l"),)), 0)
    assert (True, "tick 1 skipped: another instance holds the tick") == (
        health.ready,
        health.reason.split(", ")[0],
    )


async def test_a_failing_hook_counts_its_failure_and_the_tenth_in_a_row_its_disable(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """A hook answering 410 (final) books a failure; at nine before, it is disabled: counted."""
    receiver.route("hook", 410)
    await stalled_pair(host, receiver)
    await pg_pool.execute("UPDATE notify_hooks SET consecutive_failures = 9")
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await reaper.tick()
        await reaper.settle()
        samples = scrape(registry)

    assert (1, 1) == (
        samples["switchboard_queue_stall_hook_failures_total", ()],
        samples["switchboard_queue_stall_hook_disables_total", ()],
    )
    assert 1 == samples["switchboard_queue_stall_nudge_outcomes_total", (("outcome", "refunded"),)]
    assert False is await pg_pool.fetchval("SELECT enabled FROM notify_hooks")


async def test_a_failed_tick_counts_as_failed(pg_dsn: str, pg_pool: asyncpg.Pool) -> None:
    """A tick the database refuses (the ledger table gone) is counted failed and timed."""
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await pg_pool.execute("DROP TABLE stall_nudge.queue_stall_nudges CASCADE")
        with pytest.raises(LedgerError):
            await reaper.tick()
        samples = scrape(registry)

    assert 1 == samples["switchboard_queue_stall_ticks_total", (("outcome", "failed"),)]
    assert 1 == samples["switchboard_queue_stall_tick_duration_seconds_count", ()]
    assert ("switchboard_queue_stall_last_success_timestamp_seconds", ()) not in samples


def test_a_long_queue_name_is_cut_to_the_documented_length() -> None:
    """Queue labels longer than QUEUE_LABEL_MAX keep their head and end in ``...``."""
    long = "q" * 50 + "x" * 300

    assert (64, "q" * 50 + "x" * 11 + "...") == (QUEUE_LABEL_MAX, queue_label(long))
    assert "lane-l" == queue_label("lane-l")
    assert "y" * 64 == queue_label("y" * 64)


#: A queue name holding ESC, BEL, a C1 CSI, a zero-width space, a right-to-left
#: override and a newline: each would reach a terminal or a dashboard raw.
HOSTILE = "lane\x1b[2J\x07\x9b31m\u200bq\u202e\nfake_metric 1"


async def test_a_hostile_queue_name_reaches_metrics_escaped_and_distinguishable(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """No control, format or invisible char of a queue reaches /metrics raw; its escape does."""
    await stalled_pair(host, receiver, queue=HOSTILE)
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await reaper.tick()
        await reaper.settle()
        body = generate_latest(registry).decode()
        samples = scrape(registry)

    label = r"lane\x1b[2J\x07\x9b31m\u200bq\u202e\x0afake_metric 1"
    assert [] == [c for c in "\x1b\x07\x9b\u200b\u202e" if c in body]
    assert 1 == samples["switchboard_queue_stall_nudges_total", (("queue", label),)]
    assert r'queue="lane\\x1b[2J\\x07' in body  # the exposition doubles each backslash
    assert [] == [line for line in body.splitlines() if line.startswith("fake_metric")]


async def test_nudges_of_two_long_queues_sharing_a_head_share_one_series(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """The cut bounds the series: two queues alike up to the cut (61 characters) count together."""
    head = "lane-" + "z" * 70
    await stalled_pair(host, receiver, queue=head + "-a", todo="a")
    await host.create_todo("b", endpoint_id="ep-1", queue=head + "-b", created_at=ago(30))
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await reaper.tick()
        await reaper.settle()
        samples = scrape(registry)

    nudges = {k[1]: v for k, v in samples.items() if k[0] == "switchboard_queue_stall_nudges_total"}
    assert {(("queue", queue_label(head)),): 2} == nudges


async def test_the_clock_offset_gauge_reads_the_database_against_this_host(
    pg_pool: asyncpg.Pool,
) -> None:
    """With both clocks on one machine the offset gauge is present and small, never absent."""
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await reaper.tick()
        samples = scrape(registry)

    assert abs(samples["switchboard_queue_stall_clock_offset_seconds", ()]) < 60
    assert SECRET not in generate_latest(registry).decode()


async def test_creation_wakes_count_apart_from_nudges_by_outcome(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """reaper.notify's wakes: one answered counts delivered, one no hook answers undelivered."""
    await stalled_pair(host, receiver, minutes=0)
    todo = stall_nudge.TodoRef(id="l-0", created_at=ago(0), title="deploy lane-l")
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        registry = registry_for(reaper)
        await reaper.notify(endpoint_id="ep-1", queue="lane-l", todo=todo, reason="created")
        await reaper.settle()
        receiver.route("hook", 410)  # gone: final, not retried
        await reaper.notify(endpoint_id="ep-1", queue="lane-l", todo=todo, reason="created")
        await reaper.settle()
        samples = scrape(registry)

    assert (1, 1) == tuple(
        samples["switchboard_queue_stall_notify_wakes_total", (("outcome", outcome),)]
        for outcome in ("delivered", "undelivered")
    )
    assert [] == [k for k in samples if k[0] == "switchboard_queue_stall_nudges_total"]
