"""The soak in the suite: four sweeper processes, every fault class, every invariant.

Its load lasts 15 s by default, ``STALL_SOAK_SECONDS`` when set (a release
check runs ``STALL_SOAK_SECONDS=600``, ten minutes); the checks are the same
at every length. No assertion here depends on how fast the machine runs:
the soak itself runs on until every fault was injected, every sweeper
ticked again after each, and the backlog drained, up to a bound only a hang
reaches. Its lines, counts included, are printed (``pytest -rP`` shows them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.stress.soak import FAULT_CLASSES, run_soak
from tests.stress.soak_check import HISTORY_FAULTS

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: The suite's soak: 15 s of load (STALL_SOAK_SECONDS overrides it) on 1,000 pairs, a full
#: pass every 2 s (the script's default is ten minutes on 2,000, every 5 s).
SECONDS = float(os.environ.get("STALL_SOAK_SECONDS", "15"))
PAIRS = 1000
FULL_PASS_S = 2.0


def test_brief_soak_holds_every_invariant(tmp_path: Path) -> None:
    """No illegal charge, reset or double reset, no lost todo, full passes and deltas both;
    the history holds every charge and action of it once."""
    lines: list[str] = []
    # recovery=None: every sweeper must tick OK again after each fault, with no time bound.
    result = run_soak(
        SECONDS / 60,
        pairs=PAIRS,
        settle=20,
        recovery=None,
        workdir=tmp_path,
        say=lines.append,
        full_pass_s=FULL_PASS_S,
    )
    print("\n".join(lines))
    print(json.dumps(result.figures, default=str))
    print(result.history_line())
    print(result.line())

    said, f = "\n".join(lines), result.figures
    assert (0, 0, 0) == (f["duplicates"], f["double_resets"], f["lost_todos"]), said
    assert {} == {k: v for k, v in f["violations"].items() if v}, f
    zero = ("audit_writes", "unattributed", "ungated_named", "bad_signatures", "raw_tick_errors")
    assert dict.fromkeys(zero, 0) == {k: f[k] for k in zero}, f["raw_tick_error_kinds"]
    assert [] == f["liveness_failures"]
    assert f["max_nudges_between_claims"] <= 5
    assert [] == [name for name in FAULT_CLASSES if not f["fault_counts"].get(name)]
    assert 2 == len(f["killed_worker_pids"]), said  # the SIGKILLed one came back
    assert f["wakes"] > 0
    # Both kinds of tick judged, and the checker judged resets (progress read).
    assert f["tick_kinds"].get("full", 0) > 0, f["tick_kinds"]
    assert f["tick_kinds"].get("delta", 0) > 0, f["tick_kinds"]
    assert f["judged"].get("reset", 0) > 0, f
    # Ticks surely read new claims of live rows, and each answered them (a write).
    assert f["answered_new_claims"] > 0, f
    # The record is exact: refunds happened and were replayed, requeued claims were kept.
    assert f["refunds_applied"] > 0
    assert f["consumer_requeues"] > 0
    # Claims committed late (held transactions) and two claims on one wake were made.
    assert f["consumer_held_claims"] > 0
    assert f["consumer_batches"] > 0
    # The history holds every charge once with its outcome, and every operator action once.
    h = f["history"]
    assert dict.fromkeys(HISTORY_FAULTS, 0) == {k: h[k] for k in HISTORY_FAULTS}, f
    assert h["charges"] == f["charges"], f
    assert h["outcomes"].get("delivered", 0) > 0, h
    assert h["actions"] > 0, h
    assert result.ok
    assert result.line().startswith("soak: ticks=")
