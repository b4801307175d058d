"""The soak's invariant checks, each fed a planted violation: a zero means it looked."""

from __future__ import annotations

from datetime import timedelta

from benchmarks.soak_check import ChargeRecord, MessageRecord, check
from benchmarks.soak_worker import SOAK_POLICY

from tests.support import T0

S = timedelta(seconds=1)
KEY = ("e1", "q")


def _charge(number: int, at_s: float, worker: int = 0) -> ChargeRecord:
    return ChargeRecord(worker=worker, endpoint_id="e1", queue="q", number=number, at=T0 + at_s * S)


def _message(webhook_id: str, at_s: float, answered: int = 204) -> MessageRecord:
    return MessageRecord(
        webhook_id=webhook_id,
        endpoint_id="e1",
        queue="q",
        reason="stalled",
        sent_at=T0 + at_s * S,
        answered=answered,
    )


def _check(charges, messages=(), claims=(), drains=(), resets=()):  # type: ignore[no-untyped-def]
    return check(
        charges=charges,
        messages=messages,
        claims={KEY: [T0 + c * S for c in claims]},
        drains={KEY: [T0 + d * S for d in drains]},
        ledger_resets=[T0 + r * S for r in resets],
        policy=SOAK_POLICY,
    )


def test_a_clean_backoff_has_no_findings() -> None:
    """Nudges 1..5 on the compressed schedule, one message each, retries sharing an id: clean."""
    charges = [_charge(n, at) for n, at in ((1, 0), (2, 1), (3, 3), (4, 7), (5, 15))]
    messages = [_message(f"m{i}", c.at.second - T0.second) for i, c in enumerate(charges)]
    messages.append(_message("m0", 0, answered=500))  # a retry of m0

    findings = _check(charges, messages)

    assert (0, 0, 5, 5) == (
        findings.duplicates,
        findings.unattributed,
        findings.wakes,
        findings.max_between_claims,
    )


def test_one_charge_sent_as_two_messages_is_a_duplicate() -> None:
    """Two webhook-ids for one charge count one duplicate."""
    findings = _check([_charge(1, 0)], [_message("m1", 0), _message("m2", 0)])

    assert (1, 1) == (findings.duplicates, findings.extra_messages)


def test_two_workers_charging_one_window_is_a_duplicate() -> None:
    """A second nudge before its backoff, or a repeated number, breaks pacing."""
    early = _check([_charge(1, 0, worker=0), _charge(2, 0.5, worker=1)])
    repeated = _check([_charge(1, 0, worker=0), _charge(1, 0.2, worker=1)])

    assert (1, 1) == (early.pacing_violations, repeated.pacing_violations)


def test_a_reset_needs_a_claim_a_drain_or_a_new_epoch() -> None:
    """Nudge 1 again is fine after a claim, a drained row or a dropped ledger table."""
    charges = [_charge(1, 0), _charge(1, 3)]

    assert 0 == _check(charges, claims=[2]).duplicates
    assert 0 == _check(charges, drains=[2]).duplicates
    assert 0 == _check(charges, resets=[2]).duplicates
    assert 1 == _check(charges).duplicates


def test_nudges_between_claims_are_counted_per_epoch() -> None:
    """Six charges with no claim between them are over the cap; a claim splits the count."""
    charges = [_charge(n, at) for n, at in ((1, 0), (2, 1), (3, 3), (4, 7), (5, 15))]
    charges.append(_charge(1, 40))

    assert 6 == _check(charges).max_between_claims
    assert 5 == _check(charges, claims=[30]).max_between_claims


def test_a_message_with_no_charge_is_unattributed() -> None:
    """A stalled message naming no recorded charge is flagged."""
    assert 1 == _check([], [_message("m1", 0)]).unattributed
