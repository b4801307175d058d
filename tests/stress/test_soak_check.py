"""The soak's invariant checks, each fed a planted violation: a zero means it looked.

A record is written as a script of one pair's events, in commit order: a
claim or requeue by the host (with its clock reads), a tick charging,
resetting or draining, a refund, the ledger's drop. ``Record`` turns it into
what the soak records: the journals, the ledger's history (every row before
and after each write) and the host's claims and requeues.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from stall_core import LedgerRow, Nudge, TodoRef, charge_row, refunded_row, reset_row
from tests.stress.soak_check import (
    VIOLATIONS,
    ChargeRecord,
    Findings,
    HostWrite,
    LedgerWrite,
    MessageRecord,
    RefundRecord,
    check,
)
from tests.stress.soak_worker import SOAK_POLICY
from tests.support import T0

US = timedelta(microseconds=1)
KEY = ("e1", "q")
#: The compressed schedule's nudges 1..5 of one pair, at their earliest: 0, 1, 3, 7, 15 s.
BACKOFF = ((1, 0.0), (2, 1.0), (3, 3.0), (4, 7.0), (5, 15.0))


def _at(seconds: float | datetime) -> datetime:
    return seconds if isinstance(seconds, datetime) else T0 + timedelta(seconds=seconds)


# -- the steps of a script ------------------------------------------------------------


@dataclass(frozen=True)
class Charge:
    """A tick charged nudge ``number`` stamped ``stamp``, naming ``named``, deciding at ``now``.

    ``worker`` None: the tick died after its commit (only the history knows
    it); ``written`` False: journaled, never written (a phantom).
    """

    number: int
    stamp: datetime
    now: datetime
    named: str = "t1"
    worker: int | None = 0
    written: bool = True
    written_at: datetime | None = None

    @property
    def nudge(self) -> Nudge:
        return Nudge(
            endpoint_id=KEY[0],
            queue=KEY[1],
            todo=TodoRef(id=self.named, created_at=T0 - timedelta(minutes=1)),
            number=self.number,
            charged_at=self.stamp,
        )

    @property
    def record(self) -> ChargeRecord:
        return ChargeRecord(worker=self.worker, now=self.now, nudge=self.nudge)


@dataclass(frozen=True)
class Host:
    """The host claimed (or requeued) ``todo``; its statement ran between ``lb`` and ``ub``."""

    op: str
    todo: str
    at: datetime
    lb: datetime | None
    ub: datetime | None


@dataclass(frozen=True)
class Reset:
    """A tick kept the pair's progress for a nudge to come (``reset_row``) at ``at``."""

    at: datetime


@dataclass(frozen=True)
class Drain:
    """A tick deleted the pair's row; ``written``: in the history too."""

    at: datetime
    written: bool = True


@dataclass(frozen=True)
class Refund:
    """A sweeper refunded ``charge``: ``refunded`` as journaled, ``written`` in the history."""

    charge: Charge
    refunded: bool | None = True
    written: bool | None = None  # as refunded, unless told


@dataclass(frozen=True)
class Drop:
    """The ledger table was dropped (and restored): every row is gone."""


@dataclass(frozen=True)
class Write:
    """A ledger write no sweep makes."""

    old: tuple[int, float] | None
    new: tuple[int, float] | None


Step = Charge | Host | Reset | Drain | Refund | Drop | Write


def _charge(
    number: int,
    at: float | datetime,
    *,
    now: float | datetime | None = None,
    named: str = "t1",
    worker: int | None = 0,
    written: bool = True,
    written_at: float | None = None,
) -> Charge:
    """Nudge ``number`` stamped ``at``; its tick decided at ``now`` (the stamp, by default)."""
    return Charge(
        number=number,
        stamp=_at(at),
        now=_at(at if now is None else now),
        named=named,
        worker=worker,
        written=written,
        written_at=None if written_at is None else _at(written_at),
    )


def _claim(
    todo: str, at: float, *, lb: float | None = None, ub: float | None = None, known: bool = True
) -> Host:
    """A claim stamped ``at``; it began at ``lb`` and committed by ``ub`` (both ``at`` unless told).

    ``known`` False: the host could not record its clock reads (found in the final table).
    """
    if not known:
        return Host("claim", todo, _at(at), None, None)
    return Host(
        "claim", todo, _at(at), _at(at if lb is None else lb), _at(at if ub is None else ub)
    )


def _requeue(todo: str, at: float, stamp: float) -> Host:
    """The host handed ``todo`` (claimed at ``stamp``) back, at ``at``."""
    return Host("requeue", todo, _at(stamp), _at(at), _at(at))


def _reset(at: float) -> Reset:
    return Reset(at=_at(at))


def _drain(at: float, *, written: bool = True) -> Drain:
    return Drain(at=_at(at), written=written)


def _refund(charge: Charge, refunded: bool | None = True, *, written: bool | None = None) -> Refund:
    return Refund(charge=charge, refunded=refunded, written=written)


def _message(webhook_id: str, charge: Charge, answered: int = 204) -> MessageRecord:
    return MessageRecord(
        webhook_id=webhook_id,
        endpoint_id=KEY[0],
        queue=KEY[1],
        reason="stalled",
        sent_at=charge.stamp,
        answered=answered,
    )


def _row(nudges: int, stamp: float) -> LedgerRow:
    """The row a charge naming the default todo leaves."""
    return LedgerRow(
        endpoint_id=KEY[0], queue=KEY[1], nudges=nudges, last_nudged_at=_at(stamp), named_todo="t1"
    )


@dataclass
class Record:
    """What one soak recorded, for one pair, from a script of its events."""

    steps: list[Step]
    messages: list[MessageRecord] = field(default_factory=list)

    def check(self) -> Findings:
        seq, xids = itertools.count(1), itertools.count(1000)
        row: LedgerRow | None = None
        charges: list[ChargeRecord] = []
        refunds: list[RefundRecord] = []
        drains: list[datetime] = []
        ledger: list[LedgerWrite] = []
        host: list[HostWrite] = []
        resets: list[int] = []

        def write(
            op: str, new: LedgerRow | None, start: datetime, at: datetime | None = None
        ) -> None:
            nonlocal row
            ledger.append(
                LedgerWrite(
                    seq=next(seq),
                    op=op,
                    endpoint_id=KEY[0],
                    queue=KEY[1],
                    old=row,
                    new=new,
                    xid=next(xids),
                    xact_start=start,
                    at=start if at is None else at,
                )
            )
            row = new

        for step in self.steps:
            if isinstance(step, Host):
                host.append(
                    HostWrite(
                        op=step.op,
                        endpoint_id=KEY[0],
                        queue=KEY[1],
                        todo_id=step.todo,
                        claimed_at=step.at,
                        lb=step.lb,
                        ub=step.ub,
                    )
                )
            elif isinstance(step, Charge):
                if step.worker is not None:
                    charges.append(step.record)
                if step.written:
                    at = step.written_at or max(step.now, step.stamp)
                    write(
                        "INSERT" if row is None else "UPDATE", charge_row(step.nudge), step.now, at
                    )
            elif isinstance(step, Reset):
                assert row is not None  # a reset keeps a row
                write("UPDATE", reset_row(row, step.at), step.at)
            elif isinstance(step, Drain):
                drains.append(step.at)
                if step.written:
                    write("DELETE", None, step.at)
            elif isinstance(step, Refund):
                c = step.charge
                refunds.append(RefundRecord(worker=c.worker, nudge=c.nudge, refunded=step.refunded))
                if step.refunded if step.written is None else step.written:
                    # The compare-and-set matched the row of the charge it names.
                    row = charge_row(c.nudge)
                    write("UPDATE", refunded_row(row, c.nudge), c.stamp)
            elif isinstance(step, Drop):
                resets.append(next(seq))
                row = None
            else:
                row = None if step.old is None else _row(*step.old)
                new = None if step.new is None else _row(*step.new)
                write("UPDATE", new, T0 if new is None else new.last_nudged_at)
        return check(
            ledger=ledger,
            charges=charges,
            refunds=refunds,
            messages=self.messages,
            host=host,
            drains={KEY: drains},
            ledger_resets=resets,
            policy=SOAK_POLICY,
        )


def _backoff() -> list[Step]:
    return [_charge(n, at) for n, at in BACKOFF]


def _flagged(findings: Findings) -> dict[str, int]:
    return {kind: count for kind, count in findings.violations.items() if count}


# -- a clean record ----------------------------------------------------------------


def test_a_clean_backoff_has_no_findings() -> None:
    """Nudges 1..5 on the compressed schedule, one message each, a retry sharing an id: clean."""
    steps = _backoff()
    messages = [_message(f"m{i}", c) for i, c in enumerate(steps) if isinstance(c, Charge)]
    messages.append(_message("m0", _charge(1, 0), answered=500))  # a retry of m0

    findings = Record(steps, messages=messages).check()

    assert (0, 0, 5, 5, {}) == (
        findings.duplicates,
        findings.unattributed,
        findings.wakes,
        findings.max_between_claims,
        _flagged(findings),
    )
    assert findings.clean


def test_a_clean_life_with_every_kind_of_event_has_no_findings() -> None:
    """Resets by claim and by departure, a refund and its retry, a kept reset, a drain, a drop."""
    refunded = _charge(2, 3, named="t2")
    steps: list[Step] = [
        _charge(1, 0),
        _charge(2, 1),
        _claim("t5", 1.5),
        _charge(1, 2, named="t2"),  # reset: a claim after the last nudge
        refunded,
        _refund(refunded),
        _charge(2, 4, named="t2"),  # ... tried again one step later, at the same number
        _claim("t2", 3.9, ub=4.5),  # stamped before nudge 2, committed after it
        _charge(1, 5, named="t3"),  # reset: the named todo departed
        _claim("t6", 5.5),
        _reset(6),  # kept: no nudge may go out now
        _charge(1, 7, named="t3"),  # the kept progress: nudge 1 at once
        _claim("t4", 20.5, lb=20.3),
        _charge(1, 20.5, now=20.4, named="t3"),  # stamped at a claim later than its tick
        _drain(25),
        _charge(1, 30),  # after the drain: a new row
        _charge(2, 31),
        Drop(),
        _charge(1, 41),  # after the ledger drop: a new epoch
    ]
    record = Record(steps)
    record.messages = [
        _message(f"m{i}", c) for i, c in enumerate(steps) if isinstance(c, Charge) and c != refunded
    ]

    findings = record.check()

    assert ({}, 0, 0, 1) == (
        _flagged(findings),
        findings.duplicates,
        findings.unattributed,
        findings.refunds,
    )
    assert {"first": 3, "reset": 4, "step": 3, "retry": 1, "kept": 1, "drain": 1} == dict(
        findings.judged
    )
    assert {"by_claim": 2, "by_departure": 1, "by_kept": 1} == dict(findings.progress)


# -- what a tick may have seen of the host ----------------------------------------------


def test_a_claim_stamped_before_the_last_nudge_is_progress_by_departure_only() -> None:
    """Stamped 0.9, before nudge 2 at 1, committed after it looked: its todo's departure counts.

    A claim of the todo nudge 2 named explains a reset after it; a claim of
    another todo, stamped as early, explains none; and once a tick surely saw
    the departure, a step is a missed reset.
    """
    named: list[Step] = [_charge(1, 0), _claim("t1", 0.9, ub=1.2), _charge(2, 1)]
    other: list[Step] = [_charge(1, 0), _claim("t7", 0.9, ub=1.2), _charge(2, 1)]

    reset = Record([*named, _charge(1, 1.5, named="t2")]).check()
    unexplained = Record([*other, _charge(1, 1.5, named="t2")]).check()
    step = Record([*named, _charge(3, 3, named="t1")]).check()

    assert ({}, {"by_departure": 1}) == (_flagged(reset), dict(reset.progress))
    assert {"reset_without_progress": 1} == _flagged(unexplained)
    assert {"missed_reset": 1} == _flagged(step)


def test_a_claim_the_tick_may_not_have_seen_neither_explains_nor_demands() -> None:
    """Committed after the tick wrote: a reset it explains may be one, a step over it is no miss."""
    late: list[Step] = [_charge(1, 0), _claim("t7", 0.5, lb=0.5, ub=1.5)]

    reset = Record([*late, _charge(1, 1, now=1, written_at=1.1)]).check()
    step = Record([*late, _charge(2, 1, now=1, written_at=1.1)]).check()
    unseen = Record([_charge(1, 0), _claim("t7", 1.2, lb=1.2), _charge(1, 1, written_at=1.1)])

    assert ({}, {}) == (_flagged(reset), _flagged(step))
    assert {"reset_without_progress": 1} == _flagged(unseen.check())


def test_a_requeue_the_tick_saw_undoes_a_departure() -> None:
    """The named todo claimed (stamped early) and handed back: pending again, no progress."""
    steps: list[Step] = [
        _charge(1, 0),
        _claim("t1", -0.5, lb=-0.5, ub=0.5),
        _requeue("t1", 0.6, -0.5),
        _charge(1, 2),
    ]

    assert {"reset_without_progress": 1} == _flagged(Record(steps).check())
    assert {} == _flagged(Record(steps[:2] + steps[3:]).check())


def test_a_claim_the_host_could_not_record_may_explain_a_reset_and_demands_none() -> None:
    """A claim found only in the final table: any tick may have seen it, none surely."""
    claim = _claim("t7", 0.5, known=False)

    assert {} == _flagged(Record([_charge(1, 0), claim, _charge(1, 1)]).check())
    assert {} == _flagged(Record([_charge(1, 0), claim, _charge(2, 1)]).check())


# -- every violation, planted --------------------------------------------------------


def _reset_without_progress() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim("t7", 2), _charge(1, 3)]),
        Record([_charge(1, 0), _charge(1, 3)]),
    )


def _double_reset() -> tuple[Record, Record]:
    once: list[Step] = [_charge(1, 0), _claim("t7", 2), _charge(1, 3, named="t1")]
    return (
        Record([*once, _claim("t8", 3.2), _charge(1, 3.5)]),
        Record([*once, _charge(1, 3.5)]),
    )


def _missed_reset() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim("t7", 0.5), _charge(1, 1)]),
        Record([_charge(1, 0), _claim("t7", 0.5), _charge(2, 1)]),
    )


def _early() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(2, 1)]),
        Record([_charge(1, 0), _charge(2, _at(1) - US)]),
    )


def _over_cap() -> tuple[Record, Record]:
    return (
        Record([*_backoff(), _claim("t7", 30), _charge(1, 40)]),
        Record([*_backoff(), _charge(6, 40)]),
    )


def _out_of_sequence() -> tuple[Record, Record]:
    return (Record([_charge(1, 0), _charge(2, 1)]), Record([_charge(1, 0), _charge(3, 3)]))


def _duplicate_charges() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0, worker=0)]),
        Record([_charge(1, 0, worker=0), _charge(1, 0, worker=1, written=False)]),
    )


def _bad_stamp() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim("t7", 3, lb=2.8), _charge(1, 3, now=2.9)]),
        Record([_charge(1, 0), _claim("t7", 2), _charge(1, 3, now=2.9)]),
    )


def _unmatched_refund() -> tuple[Record, Record]:
    charge = _charge(1, 0)
    return (
        Record([charge, _refund(charge)]),
        Record([charge, _refund(_charge(1, 0.5))]),
    )


def _phantom_write() -> tuple[Record, Record]:
    return (Record([_charge(1, 0)]), Record([_charge(1, 0, written=False)]))


PLANTED: dict[str, Callable[[], tuple[Record, Record]]] = {
    "duplicate_charges": _duplicate_charges,
    "reset_without_progress": _reset_without_progress,
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


# -- resets, rule by rule ------------------------------------------------------------


def test_two_resets_from_one_claim_are_a_double_reset() -> None:
    """A reset stamps at or after the claim it saw and names a pending todo: it explains no more."""
    _, planted = _double_reset()

    findings = planted.check()

    assert ({"double_reset": 1}, 1) == (_flagged(findings), findings.double_resets)


def test_a_kept_reset_needs_progress_and_keeps_the_row() -> None:
    """A reset with no progress to see is flagged; one with it is judged kept, then nudge 1."""
    claimed = Record([_charge(1, 0), _claim("t7", 0.5), _reset(1), _charge(1, 2)]).check()
    unexplained = Record([_charge(1, 0), _reset(1)]).check()

    assert ({}, 1, 1) == (_flagged(claimed), claimed.judged["kept"], claimed.judged["reset"])
    assert {"reset_without_progress": 1} == _flagged(unexplained)


def test_a_step_after_kept_progress_is_a_missed_reset() -> None:
    """Progress a reset kept is surely seen: the next charge is nudge 1, whatever the count."""
    refunded = _charge(1, 0)
    steps: list[Step] = [refunded, _refund(refunded), _claim("t7", 0.5), _reset(1)]

    assert {} == _flagged(Record([*steps, _charge(1, 1.2)]).check())
    assert {"missed_reset": 1} == _flagged(Record([*steps, _charge(2, 6)]).check())


def test_the_stamp_is_the_latest_claim_only_when_later_than_the_tick() -> None:
    """charge_stamp: the tick's instant, or a latest claim it may have read if later; no other."""
    claims: list[Step] = [_charge(1, 0), _claim("t7", 2.95, lb=2.8), _claim("t8", 2.97, lb=2.8)]

    later = Record([*claims, _charge(1, 2.97, now=2.9)]).check()
    either = Record([*claims, _charge(1, 2.95, now=2.9)]).check()
    earlier = Record([*claims, _charge(1, 3)]).check()
    on_claim = Record([*claims, _charge(1, 2.97, now=3)]).check()

    assert ({}, {}, {}) == (_flagged(later), _flagged(either), _flagged(earlier))
    assert {"bad_stamp": 1} == _flagged(on_claim)


def test_an_unacknowledged_charge_stamps_within_its_transaction() -> None:
    """A charge only the history knows read its instant between its start and its write."""
    in_window = _charge(1, 3, now=2.9, worker=None, written_at=3.1)
    after_write = _charge(1, 3.2, now=2.9, worker=None, written_at=3.1)
    on_a_claim = _charge(1, 3.2, now=2.9, worker=None, written_at=3.1)

    assert {} == _flagged(Record([in_window]).check())
    assert {"bad_stamp": 1} == _flagged(Record([after_write]).check())
    assert {} == _flagged(Record([_claim("t7", 3.2, lb=2.8), on_a_claim]).check())


# -- pacing ---------------------------------------------------------------------------


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
    retry = refunded.stamp + SOAK_POLICY.delay_before(number)
    record = Record([*before, refunded, _refund(refunded), _charge(number, retry)])

    findings = record.check()

    assert ({}, 1, number) == (_flagged(findings), findings.refunds, findings.max_between_claims)


@pytest.mark.parametrize("number", [1, 2, 4])
def test_a_refunded_nudge_retried_before_its_step_is_early(number: int) -> None:
    """The retry of a refunded nudge N waits delay_before(N) from the refunded stamp."""
    before = [_charge(n, at) for n, at in BACKOFF[: number - 1]]
    refunded = _charge(number, BACKOFF[number - 1][1])
    retry = refunded.stamp + SOAK_POLICY.delay_before(number) - US

    findings = Record([*before, refunded, _refund(refunded), _charge(number, retry)]).check()

    assert {"early": 1} == _flagged(findings)


def test_a_refunded_first_nudge_with_progress_is_a_reset_due_at_once() -> None:
    """A row at 0 (its first nudge refunded): nudge 1 waits a step, unless there was progress."""
    refunded = _charge(1, 0)
    steps: list[Step] = [refunded, _refund(refunded)]

    reset = Record([*steps, _claim("t7", 0.2), _charge(1, 0.5)]).check()
    early = Record([*steps, _charge(1, 0.5)]).check()

    assert ({}, {"first": 1, "reset": 1}) == (_flagged(reset), dict(reset.judged))
    assert {"early": 1} == _flagged(early)


def test_a_refund_whose_compare_and_set_failed_is_not_applied() -> None:
    """A refund the ledger refused leaves the count: the same number again is out of sequence."""
    refunded = _charge(2, 1)
    record = Record([_charge(1, 0), refunded, _refund(refunded, False), _charge(2, 2)])

    assert {"out_of_sequence": 1} == _flagged(record.check())


@pytest.mark.parametrize(("written", "number", "at"), [(True, 2, 2.0), (False, 3, 3.0)])
def test_the_history_settles_a_refund_of_unknown_outcome(
    written: bool, number: int, at: float
) -> None:
    """A worker that died mid-refund: the history says whether it happened, and judges by it."""
    refunded = _charge(2, 1)
    steps: list[Step] = [_charge(1, 0), refunded, _refund(refunded, None, written=written)]
    other = (3, 3.0) if written else (2, 2.0)

    findings = Record([*steps, _charge(number, at)]).check()
    crossed = Record([*steps, _charge(*other)]).check()

    assert ({}, int(written)) == (_flagged(findings), findings.refunds)
    assert {"out_of_sequence": 1} == _flagged(crossed)


def test_a_second_message_for_one_charge_is_a_duplicate() -> None:
    """Two webhook-ids for one charge count one extra message, one duplicate."""
    charge = _charge(1, 0)

    findings = Record([charge], messages=[_message("m1", charge), _message("m2", charge)]).check()

    assert (1, 1, 2) == (findings.duplicates, findings.extra_messages, findings.wakes)


def test_a_first_nudge_after_a_drain_or_a_ledger_drop_needs_no_progress() -> None:
    """A drained row or a dropped table starts over at nudge 1, and only there."""
    assert {} == _flagged(Record([_charge(1, 0), _drain(2), _charge(1, 3)]).check())
    assert {} == _flagged(Record([_charge(1, 0), Drop(), _charge(1, 3)]).check())
    assert {"out_of_sequence": 1} == _flagged(
        Record([_charge(1, 0), _drain(2), _charge(2, 3)]).check()
    )


def test_nudges_between_claims_are_counted_without_refunds() -> None:
    """Six counted charges with no reset between them are over the cap; resets and refunds split."""
    refunded = _backoff()[4]
    assert isinstance(refunded, Charge)

    assert 6 == Record([*_backoff(), _charge(1, 40)]).check().max_between_claims
    assert 5 == Record([*_backoff(), _claim("t7", 30), _charge(1, 40)]).check().max_between_claims
    assert 5 == Record([*_backoff(), _refund(refunded), _charge(5, 23)]).check().max_between_claims


def test_a_message_with_no_charge_is_unattributed() -> None:
    """A stalled message naming no recorded charge is flagged, and the record is not clean."""
    findings = Record([], messages=[_message("m1", _charge(1, 0))]).check()

    assert (1, False) == (findings.unattributed, findings.clean)


# -- the ledger's own history ---------------------------------------------------------


def test_a_charge_only_the_history_knows_explains_the_next_one() -> None:
    """A tick that died after its commit charged nudge 1 unseen: nudge 2 after it is legal."""
    record = Record([_charge(1, 0, worker=None), _charge(2, 1)])

    findings = record.check()

    assert ({}, 1, 2) == (_flagged(findings), findings.unacknowledged, findings.charges)
    assert {"out_of_sequence": 1} == _flagged(Record([_charge(2, 1)]).check())


def test_a_history_write_no_sweep_makes_is_a_phantom() -> None:
    """A count that jumps without a new stamp is no charge, reset, refund or drain."""
    record = Record([_charge(1, 0), Write((1, 0), (3, 0))])

    assert {"phantom_write": 1} == _flagged(record.check())


def test_a_history_that_skips_a_write_is_a_phantom() -> None:
    """A write whose row before is not the replay's: the history lost a write."""
    whole = Record([_charge(1, 0), Write((1, 0), (2, 1)), Write((2, 1), (3, 3))])
    gap = Record([_charge(1, 0), Write((2, 1), (3, 3))])

    assert ({}, 2) == (_flagged(whole.check()), whole.check().unacknowledged)
    assert {"phantom_write": 1} == _flagged(gap.check())


def test_journaled_refunds_and_drains_must_be_in_the_history() -> None:
    """A refund the journal calls done, or a drain it records, missing from the history: phantom."""
    charge = _charge(1, 0)

    assert {"phantom_write": 1} == _flagged(
        Record([charge, _refund(charge, written=False)]).check()
    )
    assert {"phantom_write": 1} == _flagged(Record([charge, _drain(5, written=False)]).check())
    assert {} == _flagged(Record([charge, _drain(5)]).check())


def test_one_charge_journaled_by_two_sweepers_is_a_duplicate() -> None:
    """The ledger wrote one charge; two sweepers both reporting it is a duplicate charge."""
    _, planted = _duplicate_charges()

    assert {"duplicate_charges": 1} == _flagged(planted.check())
