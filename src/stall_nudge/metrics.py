"""Prometheus metrics of a reaper (the ``metrics`` extra: ``pip install 'stall-nudge[metrics]'``).

Register the collector in your own registry::

    registry.register(stall_nudge.metrics.ReaperCollector(reaper))

It reads the reaper's counters at each scrape (no counting of its own), so
every number starts at the reaper's start. Names (docs/operations.md):

- ``switchboard_queue_stall_nudges_total{queue}`` and
  ``switchboard_queue_stall_ledger_rows``, the two SPEC-0038 reserves;
- ``switchboard_queue_stall_ticks_total{outcome}`` (ok, skipped, failed),
  ``..._tick_duration_seconds`` (histogram),
  ``..._nudge_outcomes_total{outcome}`` (delivered, refunded, abandoned),
  ``..._hook_failures_total``, ``..._hook_disables_total``,
  ``..._last_success_timestamp_seconds`` (database time) and
  ``..._clock_offset_seconds`` (the database's clock minus this host's).

``queue`` values are a sender's names: escaped and cut to ``QUEUE_LABEL_MAX``
characters as ``status`` writes them (``queue_label``, ``stall_core.printable``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ._reaper import Reaper
from ._tally import QUEUE_LABEL_MAX, TICK_BUCKETS, queue_label

__all__ = ["PREFIX", "QUEUE_LABEL_MAX", "ReaperCollector", "queue_label"]

PREFIX = "switchboard_queue_stall"


class ReaperCollector:
    """A ``prometheus_client`` collector over one reaper's counters; safe from a scrape thread."""

    def __init__(self, reaper: Reaper) -> None:
        self._reaper = reaper

    def collect(self) -> Iterator[Metric]:
        reaper, tally = self._reaper, self._reaper.tally
        nudges = CounterMetricFamily(
            f"{PREFIX}_nudges",
            "Nudges this instance charged and handed to the dispatcher, by queue (cut).",
            labels=["queue"],
        )
        for queue, count in sorted(dict(tally.nudges).items()):
            nudges.add_metric([queue], count)
        yield nudges
        if tally.ledger_rows is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_ledger_rows",
                "Rows of queue_stall_nudges at this instance's last tick (fleet: max).",
                value=tally.ledger_rows,
            )
        ticks = CounterMetricFamily(
            f"{PREFIX}_ticks", "Ticks of this instance by outcome.", labels=["outcome"]
        )
        for outcome, count in dict(tally.ticks).items():
            ticks.add_metric([outcome], count)
        yield ticks
        counts = list(tally.durations)
        cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
        yield HistogramMetricFamily(
            f"{PREFIX}_tick_duration_seconds",
            "Seconds each tick took, failed ones included.",
            buckets=[
                *((f"{bound:g}", n) for bound, n in zip(TICK_BUCKETS, cumulative, strict=False)),
                ("+Inf", cumulative[-1]),
            ],
            sum_value=tally.duration_sum,
        )
        outcomes = CounterMetricFamily(
            f"{PREFIX}_nudge_outcomes",
            "Nudges by outcome: a receiver answered, refunded (reached nobody), "
            "abandoned (reached nobody, refund failed: the charge stands).",
            labels=["outcome"],
        )
        outcomes.add_metric(["delivered"], reaper.delivered)
        outcomes.add_metric(["refunded"], reaper.refunded)
        outcomes.add_metric(["abandoned"], reaper.unrefunded)
        yield outcomes
        stats = reaper.stats
        notified = CounterMetricFamily(
            f"{PREFIX}_notify_wakes",
            "Wakes sent through reaper.notify (creation wakes; not nudges) by outcome: "
            "a hook answered, or none did.",
            labels=["outcome"],
        )
        notified.add_metric(["delivered"], stats.notified)
        notified.add_metric(["undelivered"], stats.unnotified)
        yield notified
        yield CounterMetricFamily(
            f"{PREFIX}_hook_failures",
            "Deliveries booked as a failure against their hook (every attempt failed, or refused).",
            value=stats.failed + stats.refused,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_hook_disables",
            "Hooks this instance disabled (consecutive failures reached the limit).",
            value=tally.disables,
        )
        success = tally.last_success
        if success is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_last_success_timestamp_seconds",
                "Database time of this instance's last successful tick (fleet: max).",
                value=success.now.timestamp(),
            )
        offset = reaper.clock_offset
        if offset is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_clock_offset_seconds",
                "The database's clock minus this host's, as last measured.",
                value=offset.total_seconds(),
            )
