"""A brief soak in the suite: four sweeper processes, every fault class, every invariant.

No assertion here depends on how fast the machine runs: the soak itself
runs on until every fault was injected, every sweeper ticked again after
each, and the backlog drained, up to a bound only a hang reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stress.soak import FAULT_CLASSES, SoakResult, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: The suite's soaks: a quarter minute of load on 1,000 pairs (the script's default is
#: ten minutes on 2,000).
MINUTES = 0.25
PAIRS = 1000


def _brief_soak(tmp_path: Path, footprint: str) -> tuple[SoakResult, list[str]]:
    lines: list[str] = []
    # recovery=None: every sweeper must tick OK again after each fault, with no time bound.
    result = run_soak(
        MINUTES,
        pairs=PAIRS,
        settle=20,
        recovery=None,
        workdir=tmp_path,
        say=lines.append,
        footprint=footprint,
    )
    return result, lines


def _holds_every_invariant(result: SoakResult, lines: list[str]) -> None:
    """What both footprints' soaks must show."""
    said = "\n".join(lines)
    assert (0, 0, 0) == (result.duplicates, result.double_resets, result.lost_todos), said
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
    assert 2 == len(result.details["killed_worker_pids"]), said  # the SIGKILLed one came back
    assert result.wakes > 0
    # The record is exact: refunds happened and were replayed, requeued claims were kept.
    assert result.details["refunds_applied"] > 0
    assert result.details["consumer_requeues"] > 0
    # Claims committed late (held transactions) and two claims on one wake were made.
    assert result.details["consumer_held_claims"] > 0
    assert result.details["consumer_batches"] > 0
    assert result.ok
    assert result.line().startswith("soak: ticks=")


def test_brief_soak_holds_every_invariant(tmp_path: Path) -> None:
    """Incremental: no illegal charge or double reset, no lost todo, every claim accounted for."""
    result, lines = _brief_soak(tmp_path, "incremental")

    _holds_every_invariant(result, lines)
    # The claim log was audited row by row: each logged claim absorbed (by a charge, a
    # drain, a reset or a tick that found no row), compacted, or left.
    log = result.details["claim_log"]
    assert log["logged"] > 0
    assert log["logged"] == log["absorbed"] + log["compacted"] + log["left"], log


def test_brief_lean_soak_holds_every_invariant(tmp_path: Path) -> None:
    """Lean: the same invariants with resets judged by the host's claims; no claim is logged."""
    result, lines = _brief_soak(tmp_path, "lean")

    _holds_every_invariant(result, lines)
    assert result.findings.judged.get("reset", 0) > 0, result.details
    assert {"logged": 0, "left": 0} == {
        k: result.details["claim_log"][k] for k in ("logged", "left")
    }
