"""A brief soak in the suite: four sweeper processes, every fault class, every invariant."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stress.soak import FAULT_CLASSES, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_brief_soak_holds_every_invariant(tmp_path: Path) -> None:
    """Under every fault: no illegal charge, no double reset, no lost todo, all sweepers ticking."""
    lines: list[str] = []

    # recovery=None: every sweeper must tick OK again after each fault, with no time bound.
    result = run_soak(
        0.35, pairs=2000, settle=25, recovery=None, workdir=tmp_path, say=lines.append
    )

    assert (0, 0, 0) == (result.duplicates, result.double_resets, result.lost_todos), result.details
    assert {} == {k: v for k, v in result.findings.violations.items() if v}, result.details
    assert (0, 0, 0, 0) == (
        result.audit_writes,
        result.unattributed,
        result.ungated_named,
        result.bad_signatures,
    )
    raw = result.details["raw_tick_error_kinds"]
    assert ((), 0) == (result.liveness_failures, result.raw_tick_errors), raw
    assert result.max_between_claims <= 5
    assert [] == [name for name in FAULT_CLASSES if not result.fault_counts.get(name)]
    assert len(result.details["killed_worker_pids"]) == 2  # the SIGKILLed worker came back
    assert result.wakes > 0
    # The record is exact: refunds happened and were replayed, requeued claims were kept.
    assert result.details["refunds_applied"] > 0
    assert result.details["consumer_requeues"] > 0
    # Claims committed late (held transactions) and two claims on one wake were made.
    assert result.details["consumer_held_claims"] > 0
    assert result.details["consumer_batches"] > 0
    # The claim log was audited row by row: each logged claim absorbed, compacted or left.
    log = result.details["claim_log"]
    assert log["logged"] > 0
    assert log["logged"] == log["absorbed"] + log["compacted"] + log["left"], log
    assert result.ok
    assert result.line().startswith("soak: ticks=")
