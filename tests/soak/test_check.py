"""The soak's invariant checks, each fed a planted violation: a zero means it looked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import attrs
import pytest
from benchmarks.soak_check import (
    VIOLATIONS,
    ChargeRecord,
    ClaimRecord,
    Findings,
    LedgerWrite,
    MessageRecord,
    RefundRecord,
    check,
)
from benchmarks.soak_worker import SOAK_POLICY

from stall_core import Nudge, TodoRef
from tests.support import T0

US = timedelta(microseconds=1)
KEY = ("e1", "q")
#: The compressed schedule's nudges 1..5 of one pair, at their earliest: 0, 1, 3, 7, 15 s.
BACKOFF = ((1, 0.0), (2, 1.0), (3, 3.0), (4, 7.0), (5, 15.0))


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _charge(
    number: int, at: float | datetime, *, now: datetime | None = None, worker: int = 0
) -> ChargeRecord:
    """Nudge ``number`` stamped ``at``; its tick decided at ``now`` (the stamp, by default)."""
    charged_at = at if isinstance(at, datetime) else _at(at)
    nudge = Nudge(
        endpoint_id=KEY[0],
        queue=KEY[1],
        todo=TodoRef(id="t1", created_at=T0 - timedelta(minutes=1)),
        number=number,
        charged_at=charged_at,
    )
    return ChargeRecord(worker=worker, now=charged_at if now is None else now, nudge=nudge)


def _claim(at: float | datetime, *, seen_by: datetime | None = None) -> ClaimRecord:
    """A claim at ``at``, committed by ``seen_by`` (at once, by default)."""
    claimed_at = at if isinstance(at, datetime) else _at(at)
    return ClaimRecord(
        endpoint_id=KEY[0],
        queue=KEY[1],
        claimed_at=claimed_at,
        seen_by=claimed_at if seen_by is None else seen_by,
    )


def _refund(charge: ChargeRecord, refunded: bool | None = True) -> RefundRecord:
    return RefundRecord(worker=charge.worker, nudge=charge.nudge, refunded=refunded)


def _write(
    op: str,
    old: tuple[int, float] | None,
    new: tuple[int, float] | None,
    at: float | None = None,
) -> LedgerWrite:
    """A row write of the ledger's history: (nudges, stamp in seconds) before and after."""
    when = _at(at if at is not None else max(r[1] for r in (old, new) if r is not None))
    return LedgerWrite(
        seq=0,
        op=op,
        endpoint_id=KEY[0],
        queue=KEY[1],
        old=None if old is None else (old[0], _at(old[1])),
        new=None if new is None else (new[0], _at(new[1])),
        xact_start=when,
        at=when,
    )


def _history(*writes: LedgerWrite) -> list[LedgerWrite]:
    return [attrs.evolve(w, seq=i) for i, w in enumerate(writes)]


def _message(webhook_id: str, charge: ChargeRecord, answered: int = 204) -> MessageRecord:
    return MessageRecord(
        webhook_id=webhook_id,
        endpoint_id=KEY[0],
        queue=KEY[1],
        reason="stalled",
        sent_at=charge.charged_at,
        answered=answered,
    )


@dataclass
class Record:
    """What one soak recorded, for one pair."""

    charges: list[ChargeRecord]
    claims: list[ClaimRecord] = field(default_factory=list)
    refunds: list[RefundRecord] = field(default_factory=list)
    messages: list[MessageRecord] = field(default_factory=list)
    drains: list[float] = field(default_factory=list)
    resets: list[float] = field(default_factory=list)
    ledger: list[LedgerWrite] | None = None

    def check(self) -> Findings:
        return check(
            ledger=self.ledger,
            charges=self.charges,
            refunds=self.refunds,
            messages=self.messages,
            claims=self.claims,
            drains={KEY: [_at(d) for d in self.drains]},
            ledger_resets=[_at(r) for r in self.resets],
            policy=SOAK_POLICY,
        )


def _backoff() -> list[ChargeRecord]:
    return [_charge(n, at) for n, at in BACKOFF]


def _flagged(findings: Findings) -> dict[str, int]:
    return {kind: count for kind, count in findings.violations.items() if count}


# -- a clean record ----------------------------------------------------------------


def test_a_clean_backoff_has_no_findings() -> None:
    """Nudges 1..5 on the compressed schedule, one message each, a retry sharing an id: clean."""
    charges = _backoff()
    messages = [_message(f"m{i}", c) for i, c in enumerate(charges)]
    messages.append(_message("m0", charges[0], answered=500))  # a retry of m0

    findings = Record(charges, messages=messages).check()

    assert (0, 0, 5, 5, {}) == (
        findings.duplicates,
        findings.unattributed,
        findings.wakes,
        findings.max_between_claims,
        _flagged(findings),
    )
    assert findings.clean


def test_a_clean_life_with_every_kind_of_event_has_no_findings() -> None:
    """Resets on claims, a refund and its retry, an absorbed claim, a drain and an epoch: clean."""
    absorbed = _at(20.5)
    record = Record(
        charges=[
            _charge(1, 0),
            _charge(2, 1),
            _charge(1, 2),  # reset: the claim at 1.5
            _charge(2, 3),  # refunded ...
            _charge(2, 4),  # ... and tried again one step later, at the same number
            _charge(3, 6),
            _charge(1, absorbed, now=_at(20.4)),  # absorbs a claim later than its tick
            _charge(1, 30),  # after the drain at 25: a new row
            _charge(2, 31),
            _charge(1, 41),  # after the ledger drop at 40: a new epoch
        ],
        claims=[_claim(1.5), _claim(absorbed, seen_by=_at(20.6))],
        drains=[25],
        resets=[40],
    )
    record.refunds = [_refund(record.charges[3])]
    record.messages = [_message(f"m{i}", c) for i, c in enumerate(record.charges) if i != 3]

    findings = record.check()

    assert ({}, 0, 0, 1) == (
        _flagged(findings),
        findings.duplicates,
        findings.unattributed,
        findings.refunds,
    )
    assert {"first": 3, "reset": 2, "step": 4, "retry": 1} == findings.judged


# -- every violation, planted --------------------------------------------------------


def _reset_without_claim() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(1, 3)], claims=[_claim(2)]),
        Record([_charge(1, 0), _charge(1, 3)]),
    )


def _double_reset() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(1, 3), _charge(1, 3.5)], claims=[_claim(2), _claim(3.2)]),
        Record([_charge(1, 0), _charge(1, 3), _charge(1, 3.5)], claims=[_claim(2)]),
    )


def _missed_reset() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(1, 1)], claims=[_claim(0.5)]),
        Record([_charge(1, 0), _charge(2, 1)], claims=[_claim(0.5)]),
    )


def _early() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(2, 1)]),
        Record([_charge(1, 0), _charge(2, _at(1) - US)]),
    )


def _over_cap() -> tuple[Record, Record]:
    return (
        Record([*_backoff(), _charge(1, 40)], claims=[_claim(30)]),
        Record([*_backoff(), _charge(6, 40)]),
    )


def _out_of_sequence() -> tuple[Record, Record]:
    return (Record([_charge(1, 0), _charge(2, 1)]), Record([_charge(1, 0), _charge(3, 3)]))


def _duplicate_charges() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0, worker=0), _charge(2, 1, worker=1)]),
        Record([_charge(1, 0, worker=0), _charge(1, 0, worker=1)]),
    )


def _bad_stamp() -> tuple[Record, Record]:
    stamp = _at(3)
    return (
        Record([_charge(1, 0), _charge(1, stamp, now=_at(2.9))], claims=[_claim(stamp)]),
        Record([_charge(1, 0), _charge(1, stamp, now=_at(2.9))], claims=[_claim(2)]),
    )


def _unmatched_refund() -> tuple[Record, Record]:
    charge = _charge(1, 0)
    return (
        Record([charge], refunds=[_refund(charge)]),
        Record([charge], refunds=[_refund(_charge(1, 0.5))]),
    )


def _phantom_write() -> tuple[Record, Record]:
    charge = _charge(1, 0)
    return (
        Record([charge], ledger=_history(_write("INSERT", None, (1, 0)))),
        Record([charge], ledger=[]),
    )


PLANTED: dict[str, Callable[[], tuple[Record, Record]]] = {
    "duplicate_charges": _duplicate_charges,
    "reset_without_claim": _reset_without_claim,
    "double_reset": _double_reset,
    "missed_reset": _missed_reset,
    "early": _early,
    "over_cap": _over_cap,
    "out_of_sequence": _out_of_sequence,
    "bad_stamp": _bad_stamp,
    "unmatched_refund": _unmatched_refund,
    "phantom_write": _phantom_write,
}


def test_every_violation_has_a_planted_case() -> None:
    """The table below plants each kind of violation the checker knows."""
    assert sorted(VIOLATIONS) == sorted(PLANTED)


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_a_planted_violation_is_flagged_and_its_clean_twin_is_not(kind: str) -> None:
    """Each kind is counted once, as a duplicate, when planted, and never on its clean twin."""
    clean, planted = PLANTED[kind]()

    assert ({}, 0) == (_flagged(clean.check()), clean.check().duplicates)
    assert ({kind: 1}, 1) == (_flagged(planted.check()), planted.check().duplicates)


# -- the cases the issue names --------------------------------------------------------


def test_a_reset_with_no_claim_is_flagged() -> None:
    """Nudge 1 again on a live row with no claim since its stamp is a reset without claim."""
    assert {"reset_without_claim": 1} == _flagged(Record([_charge(1, 0), _charge(1, 3)]).check())


def test_two_resets_from_one_claim_are_a_double_reset() -> None:
    """A claim explains one reset; a second reset with no newer claim is a double reset."""
    findings = Record([_charge(1, 0), _charge(1, 3), _charge(1, 3.5)], claims=[_claim(2)]).check()

    assert ({"double_reset": 1}, 1) == (_flagged(findings), findings.double_resets)


def test_a_claim_one_microsecond_after_the_reset_does_not_explain_it() -> None:
    """No slack: a claim 1 µs after the reset's stamp is not in its window."""
    reset = _at(3)

    findings = Record([_charge(1, 0), _charge(1, reset)], claims=[_claim(reset + US)]).check()

    assert {"reset_without_claim": 1} == _flagged(findings)
    assert {} == _flagged(
        Record([_charge(1, 0), _charge(1, reset)], claims=[_claim(reset)]).check()
    )


def test_a_nudge_one_microsecond_before_its_due_is_flagged() -> None:
    """Nudge 3 is due 2 s after nudge 2; 1 µs earlier is early, on the dot is legal."""
    due = _at(3)

    early = Record([_charge(1, 0), _charge(2, 1), _charge(3, due - US)]).check()
    on_time = Record([_charge(1, 0), _charge(2, 1), _charge(3, due)]).check()

    assert ({"early": 1}, {}) == (_flagged(early), _flagged(on_time))


@pytest.mark.parametrize("number", [1, 2, 4])
def test_a_refunded_nudge_retried_one_step_later_at_its_number_is_legal(number: int) -> None:
    """A refunded nudge N leaves (N - 1, its stamp); nudge N again after delay_before(N) is due."""
    before = [_charge(n, at) for n, at in BACKOFF[: number - 1]]
    refunded = _charge(number, BACKOFF[number - 1][1])
    retry = refunded.charged_at + SOAK_POLICY.delay_before(number)
    record = Record([*before, refunded, _charge(number, retry)], refunds=[_refund(refunded)])

    findings = record.check()

    assert ({}, 1, number) == (_flagged(findings), findings.refunds, findings.max_between_claims)


@pytest.mark.parametrize("number", [1, 2, 4])
def test_a_refunded_nudge_retried_before_its_step_is_early(number: int) -> None:
    """The retry of a refunded nudge N waits delay_before(N) from the refunded stamp."""
    before = [_charge(n, at) for n, at in BACKOFF[: number - 1]]
    refunded = _charge(number, BACKOFF[number - 1][1])
    retry = refunded.charged_at + SOAK_POLICY.delay_before(number) - US

    findings = Record(
        [*before, refunded, _charge(number, retry)], refunds=[_refund(refunded)]
    ).check()

    assert {"early": 1} == _flagged(findings)


def test_a_refund_whose_compare_and_set_failed_is_not_applied() -> None:
    """A refund the ledger refused leaves the count: the same number again is out of sequence."""
    refunded = _charge(2, 1)
    record = Record([_charge(1, 0), refunded, _charge(2, 2)], refunds=[_refund(refunded, False)])

    assert {"out_of_sequence": 1} == _flagged(record.check())


@pytest.mark.parametrize(("number", "at"), [(2, 2.0), (3, 3.0)])
def test_a_refund_of_unknown_outcome_allows_either_reading(number: int, at: float) -> None:
    """A worker that died mid-refund leaves both rows possible: retry at N or step to N + 1."""
    refunded = _charge(2, 1)
    record = Record(
        [_charge(1, 0), refunded, _charge(number, at)], refunds=[_refund(refunded, None)]
    )

    assert {} == _flagged(record.check())


def test_a_second_message_for_one_charge_is_a_duplicate() -> None:
    """Two webhook-ids for one charge count one extra message, one duplicate."""
    charge = _charge(1, 0)

    findings = Record([charge], messages=[_message("m1", charge), _message("m2", charge)]).check()

    assert (1, 1, 2) == (findings.duplicates, findings.extra_messages, findings.wakes)


def test_a_step_over_a_claim_it_cannot_have_seen_is_counted_not_flagged() -> None:
    """A claim that committed after the tick's instant is not provably seen: unseen, no finding."""
    late_commit = _claim(0.5, seen_by=_at(1) + US)

    findings = Record([_charge(1, 0), _charge(2, 1)], claims=[late_commit]).check()

    assert ({}, 1) == (_flagged(findings), findings.unseen_claims)


def test_a_reset_after_a_drain_or_a_ledger_drop_needs_no_claim() -> None:
    """A drained row or a dropped table starts over at nudge 1, and only there."""
    charges = [_charge(1, 0), _charge(1, 3)]

    assert {} == _flagged(Record(charges, drains=[2]).check())
    assert {} == _flagged(Record(charges, resets=[2]).check())
    assert {"out_of_sequence": 1} == _flagged(
        Record([_charge(1, 0), _charge(2, 3)], drains=[2]).check()
    )


def test_nudges_between_claims_are_counted_without_refunds() -> None:
    """Six counted charges with no claim between them are over the cap; claims and refunds split."""
    charges = [*_backoff(), _charge(1, 40)]
    refunded = [*_backoff(), _charge(5, 23)]

    assert 6 == Record(charges).check().max_between_claims
    assert 5 == Record(charges, claims=[_claim(30)]).check().max_between_claims
    assert 5 == Record(refunded, refunds=[_refund(refunded[4])]).check().max_between_claims


def test_a_message_with_no_charge_is_unattributed() -> None:
    """A stalled message naming no recorded charge is flagged, and the record is not clean."""
    findings = Record([], messages=[_message("m1", _charge(1, 0))]).check()

    assert (1, False) == (findings.unattributed, findings.clean)


# -- the ledger's own history ---------------------------------------------------------


def test_a_charge_only_the_history_knows_explains_the_next_one() -> None:
    """A tick that died after its commit charged nudge 1 unseen: nudge 2 after it is legal."""
    record = Record(
        [_charge(2, 1)],
        ledger=_history(_write("INSERT", None, (1, 0)), _write("UPDATE", (1, 0), (2, 1))),
    )

    findings = record.check()

    assert ({}, 1, 2) == (_flagged(findings), findings.unacknowledged, findings.charges)
    assert {"out_of_sequence": 1} == _flagged(Record([_charge(2, 1)]).check())


def test_the_history_settles_a_refund_of_unknown_outcome() -> None:
    """The history shows the refund happened: the retry at its number is legal, a step is not."""
    refunded = _charge(2, 1)
    writes = [
        _write("INSERT", None, (1, 0)),
        _write("UPDATE", (1, 0), (2, 1)),
        _write("UPDATE", (2, 1), (1, 1), at=1.5),  # the refund
    ]
    retry = Record(
        [_charge(1, 0), refunded, _charge(2, 2)],
        refunds=[_refund(refunded, None)],
        ledger=_history(*writes, _write("UPDATE", (1, 1), (2, 2))),
    )
    step = Record(
        [_charge(1, 0), refunded, _charge(3, 3)],
        refunds=[_refund(refunded, None)],
        ledger=_history(*writes, _write("UPDATE", (1, 1), (3, 3))),
    )

    assert ({}, 1) == (_flagged(retry.check()), retry.check().refunds)
    assert {"out_of_sequence": 1} == _flagged(step.check())


def test_a_history_write_no_sweep_makes_is_a_phantom() -> None:
    """A count that jumps without a new stamp is no charge, refund or drain."""
    record = Record(
        [_charge(1, 0)],
        ledger=_history(_write("INSERT", None, (1, 0)), _write("UPDATE", (1, 0), (3, 0))),
    )

    assert {"phantom_write": 1} == _flagged(record.check())


def test_journaled_refunds_and_drains_must_be_in_the_history() -> None:
    """A refund the journal calls done, or a drain it records, missing from the history: phantom."""
    charge = _charge(1, 0)
    inserted = _write("INSERT", None, (1, 0))
    drained = _history(inserted, _write("DELETE", (1, 0), None, at=5))

    assert {"phantom_write": 1} == _flagged(
        Record([charge], refunds=[_refund(charge)], ledger=_history(inserted)).check()
    )
    assert {"phantom_write": 1} == _flagged(
        Record([charge], drains=[5], ledger=_history(inserted)).check()
    )
    assert {} == _flagged(Record([charge], drains=[5], ledger=drained).check())


def test_one_charge_journaled_by_two_sweepers_is_a_duplicate() -> None:
    """The ledger wrote one charge; two sweepers both reporting it is a duplicate charge."""
    record = Record(
        [_charge(1, 0, worker=0), _charge(1, 0, worker=1)],
        ledger=_history(_write("INSERT", None, (1, 0))),
    )

    assert {"duplicate_charges": 1} == _flagged(record.check())
