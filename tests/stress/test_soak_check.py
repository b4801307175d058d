"""The soak's checker, fed broken records: every way a run can break the rule is flagged.

A checker that forgives would let a broken soak print zeros, so each case
plants one violation beside its twin (the same record without it): the
twin is clean and the planted record is flagged as exactly that kind, once.
Where the checker allows latitude (what a tick may have seen of the host,
read off the database clock around each host statement), a case sits just
outside it. A case is a script of one pair's events in commit order; every
tick in it records itself (its ``now``) after its writes, as the fleet's
record does, so the tick before each one is the last judging tick.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import attrs
import pytest

from stall_core import HistoryEntry, LedgerRow, Nudge, charge_row, refunded_row, reset_row
from tests.stress.shared import nudge
from tests.stress.soak_check import (
    HISTORY_FAULTS,
    VIOLATIONS,
    ActionRecord,
    BookingRecord,
    ChargeRecord,
    Findings,
    HistoryFindings,
    HostWrite,
    LedgerWrite,
    MessageRecord,
    RefundRecord,
    TickWrite,
    check,
    check_history,
)
from tests.stress.soak_worker import LOOKBACK, SOAK_POLICY
from tests.support import T0

US = timedelta(microseconds=1)
KEY = ("e1", "q")


def _at(seconds: float | datetime) -> datetime:
    return seconds if isinstance(seconds, datetime) else T0 + timedelta(seconds=seconds)


def _maybe_at(seconds: float | datetime | None) -> datetime | None:
    return None if seconds is None else _at(seconds)


@attrs.frozen
class C:
    """A tick deciding at ``now`` (the stamp unless told) charged nudge ``number`` at ``stamp``.

    ``worker`` None: the tick died after its commit (only the history knows
    it); ``written`` False: journaled, never written (a phantom);
    ``recorded`` False: written by a transaction that recorded no tick.
    """

    number: int
    stamp: datetime = attrs.field(converter=_at)
    now: datetime = attrs.field(converter=_at)
    named: str = "t1"
    worker: int | None = 0
    written: bool = True
    written_at: datetime | None = attrs.field(default=None, converter=_maybe_at)
    recorded: bool = True

    @now.default
    def _now(self) -> datetime:
        return self.stamp

    @property
    def nudge(self) -> Nudge:
        return nudge(*KEY, self.number, self.stamp, self.named, T0 - timedelta(minutes=1))


@attrs.frozen
class Host:
    """The host claimed (or requeued) ``todo``; its statement ran between ``lb`` and ``ub``."""

    op: str
    todo: str
    at: datetime = attrs.field(converter=_at)
    lb: datetime = attrs.field(converter=_at)
    ub: datetime = attrs.field(converter=_at)


def _claim(todo: str, at: float, *, lb: float | None = None, ub: float | None = None) -> Host:
    """A claim stamped ``at``, begun at ``lb`` and committed by ``ub`` (both ``at`` unless told)."""
    return Host("claim", todo, at, at if lb is None else lb, at if ub is None else ub)


@attrs.frozen
class Reset:
    """A tick deciding at ``at`` kept the pair's progress for a nudge to come (``reset_row``),
    at ``kept`` (``at`` unless told)."""

    at: datetime = attrs.field(converter=_at)
    kept: datetime = attrs.field(converter=_at)

    @kept.default
    def _kept(self) -> datetime:
        return self.at


@attrs.frozen
class Tick:
    """A tick judged at ``now`` and wrote nothing to the pair."""

    now: datetime = attrs.field(converter=_at)


@attrs.frozen
class Cleared:
    """``migrate`` cleared the fleet's record (its ``now``; the claims read are kept) at ``at``."""

    at: datetime = attrs.field(converter=_at)


@attrs.frozen
class Refund:
    """A sweeper refunded ``charge``, and the history holds the refund."""

    charge: C


@attrs.frozen
class Write:
    """A ledger write no sweep makes: the row before and after, as (nudges, stamp)."""

    old: tuple[int, float]
    new: tuple[int, float]


Step = C | Host | Reset | Tick | Cleared | Refund | Write


def _message(webhook_id: str, charge: C) -> MessageRecord:
    return MessageRecord(
        webhook_id=webhook_id,
        endpoint_id=KEY[0],
        queue=KEY[1],
        reason="stalled",
        sent_at=charge.stamp,
        answered=204,
    )


def _row(nudges: int, stamp: float) -> LedgerRow:
    """The row a charge naming the default todo leaves."""
    return LedgerRow(
        endpoint_id=KEY[0], queue=KEY[1], nudges=nudges, last_nudged_at=_at(stamp), named_todo="t1"
    )


def _check(steps: list[Step], messages: tuple[MessageRecord, ...] = ()) -> Findings:
    """What the soak records of one pair's script, checked."""
    seq, xids = itertools.count(1), itertools.count(1000)
    row: LedgerRow | None = None
    charges: list[ChargeRecord] = []
    refunds: list[RefundRecord] = []
    ledger: list[LedgerWrite] = []
    ticks: list[TickWrite] = []
    host: list[HostWrite] = []

    def tick(now: datetime | None, at: datetime, xid: int | None = None) -> None:
        """The tick's record, written last in its transaction."""
        xid = next(xids) if xid is None else xid
        ticks.append(TickWrite(seq=next(seq), xid=xid, xact_start=now or at, at=at, now=now))

    def write(new: LedgerRow | None, start: datetime, at: datetime | None = None) -> int:
        nonlocal row
        xid = next(xids)
        ledger.append(
            LedgerWrite(
                seq=next(seq),
                op="INSERT" if row is None else "UPDATE",
                endpoint_id=KEY[0],
                queue=KEY[1],
                old=row,
                new=new,
                xid=xid,
                xact_start=start,
                at=start if at is None else at,
            )
        )
        row = new
        return xid

    for step in steps:
        if isinstance(step, Host):
            host.append(HostWrite(op=step.op, endpoint_id=KEY[0], queue=KEY[1], todo_id=step.todo,
                                  claimed_at=step.at, lb=step.lb, ub=step.ub))  # fmt: skip
        elif isinstance(step, C):
            if step.worker is not None:
                charges.append(ChargeRecord(worker=step.worker, now=step.now, nudge=step.nudge))
            if step.written:
                at = step.written_at or step.stamp
                xid = write(charge_row(step.nudge), step.now, at)
                if step.recorded:
                    tick(step.now, at, xid)
        elif isinstance(step, Reset):
            assert row is not None  # a reset keeps a row
            tick(step.at, step.at, write(reset_row(row, step.kept), step.at))
        elif isinstance(step, Tick):
            tick(step.now, step.now)
        elif isinstance(step, Cleared):
            tick(None, step.at)
        elif isinstance(step, Refund):
            c = step.charge
            refunds.append(RefundRecord(worker=c.worker, nudge=c.nudge, refunded=True))
            row = charge_row(c.nudge)  # the compare-and-set matched the charge it names
            write(refunded_row(row, c.nudge), c.stamp)
        else:
            row = _row(*step.old)
            at = _at(step.new[1])
            tick(at, at, write(_row(*step.new), at))
    return check(
        ledger=ledger,
        ticks=ticks,
        charges=charges,
        refunds=refunds,
        messages=messages,
        host=host,
        drains={KEY: []},
        ledger_resets=[],
        policy=SOAK_POLICY,
        lookback=LOOKBACK,
    )


def _flagged(findings: Findings) -> dict[str, int]:
    return {kind: count for kind, count in findings.violations.items() if count}


#: Nudges 1..5 of one pair at their earliest on the soak's schedule: 0, 1, 3, 7, 15 s.
BACKOFF = [C(1, 0), C(2, 1), C(3, 3), C(4, 7), C(5, 15)]
REQUEUED: list[Step] = [C(1, 0), _claim("t1", -0.5, lb=-0.5, ub=0.5), C(1, 2)]
ONCE: list[Step] = [C(1, 0), _claim("t7", 2), C(1, 3)]
#: A claim stamped ahead of the ledger's clock (5 s), committed before the tick at 1.
AHEAD: list[Step] = [C(1, 0), _claim("t7", 5, lb=0.5, ub=0.6), C(1, 1)]
#: The lookback (5 s) before the tick at 0: the claims window of the tick at 1 starts there.
EDGE = -LOOKBACK.total_seconds()
#: (kind, what is planted, the clean twin, the planted record)
CASES: list[tuple[str, str, list[Step], list[Step]]] = [
    (
        "duplicate_charges",
        "one charge journaled by two sweepers",
        [C(1, 0, worker=0)],
        [C(1, 0, worker=0), C(1, 0, worker=1, written=False)],
    ),
    (
        "reset_without_progress",
        "nudge 1 over a live row, nothing claimed",
        [C(1, 0), _claim("t7", 2), C(1, 3)],
        [C(1, 0), C(1, 3)],
    ),
    (
        "reset_without_progress",
        "a claim that began after the tick wrote",
        [C(1, 0), _claim("t7", 0.5, lb=0.5, ub=1.5), C(1, 1, written_at=1.1)],
        [C(1, 0), _claim("t7", 1.2, lb=1.2, ub=1.5), C(1, 1, written_at=1.1)],
    ),
    (
        "reset_without_progress",
        "the named todo claimed early and handed back before the tick",
        REQUEUED,
        [*REQUEUED[:2], Host("requeue", "t1", -0.5, 0.6, 0.6), REQUEUED[2]],
    ),
    (
        "reset_without_progress",
        "a claim stamped before the last nudge that its tick read (the twin commits after it)",
        [C(1, 0), _claim("t7", 0.9, ub=1.2), C(2, 1), C(1, 1.5, named="t2")],
        [_claim("t7", -0.1, ub=-0.05), C(1, 0), C(2, 1), C(1, 1.5, named="t2")],
    ),
    (
        "reset_without_progress",
        "a claim committed late, stamped before the claims window (the lookback's limit)",
        [C(1, 0), _claim("t7", EDGE + 0.1, ub=0.5), C(1, 1)],
        [C(1, 0), _claim("t7", EDGE - 0.1, ub=0.5), C(1, 1)],
    ),
    (
        "reset_without_progress",
        "a claim before the window of a tick after migrate cleared the record",
        [C(1, 0), _claim("t7", -4, ub=0.5), C(1, 2)],
        [C(1, 0), _claim("t7", -4, ub=0.5), Cleared(1), C(1, 2)],
    ),
    (
        "reset_without_progress",
        "a kept reset with nothing to see",
        [C(1, 0), _claim("t7", 0.5), Reset(1)],
        [C(1, 0), Reset(1)],
    ),
    (
        "double_reset",
        "one claim used by two resets",
        [*ONCE, _claim("t8", 3.2), C(1, 3.5)],
        [*ONCE, C(1, 3.5)],
    ),
    (
        "double_reset",
        "a claim stamped ahead of the clock, after the last nudge, used by two resets",
        [*AHEAD, _claim("t8", 1.2), C(1, 1.5)],
        [*AHEAD, C(1, 1.5)],
    ),
    (
        "missed_reset",
        "a step over a claim the tick surely saw",
        [C(1, 0), _claim("t7", 0.5), C(1, 1)],
        [C(1, 0), _claim("t7", 0.5), C(2, 1)],
    ),
    ("early", "nudge 2 one microsecond early", [C(1, 0), C(2, 1)], [C(1, 0), C(2, _at(1) - US)]),
    ("over_cap", "nudge 6", [*BACKOFF, _claim("t7", 30), C(1, 40)], [*BACKOFF, C(6, 40)]),
    ("out_of_sequence", "nudge 3 after nudge 1", [C(1, 0), C(2, 1)], [C(1, 0), C(3, 3)]),
    (
        "bad_stamp",
        "a charge stamped with a claim later than its tick's now",
        [C(1, 0), _claim("t7", 3, lb=2.8), C(1, 2.9)],
        [C(1, 0), _claim("t7", 3, lb=2.8), C(1, 3, now=2.9)],
    ),
    (
        "bad_stamp",
        "an unacknowledged charge stamped after the now its tick recorded",
        [C(1, 2.9, worker=None, written_at=3.1)],
        [C(1, 3, now=2.9, worker=None, written_at=3.1)],
    ),
    (
        "bad_stamp",
        "a reset keeping progress after its tick's now",
        [C(1, 0), _claim("t7", 0.5), Reset(1)],
        [C(1, 0), _claim("t7", 0.5), Reset(1, kept=1.05)],
    ),
    (
        "ignored_progress",
        "a tick that surely read a new claim and left the live row",
        [C(1, 0), _claim("t7", 0.5), Reset(1)],
        [C(1, 0), _claim("t7", 0.5), Tick(1)],
    ),
    (
        "unmatched_refund",
        "a refund of a charge the row does not hold",
        [C(1, 0), Refund(C(1, 0))],
        [C(1, 0), Refund(C(1, 0.5))],
    ),
    ("phantom_write", "a journaled charge never written", [C(1, 0)], [C(1, 0, written=False)]),
    (
        "phantom_write",
        "a charge written by a transaction that recorded no tick",
        [C(1, 0), C(2, 1)],
        [C(1, 0), C(2, 1, recorded=False)],
    ),
    (
        "phantom_write",
        "a count that jumps with no new stamp",
        [C(1, 0)],
        [C(1, 0), Write((1, 0), (3, 0))],
    ),
    (
        "phantom_write",
        "a history that lost a write",
        [C(1, 0), Write((1, 0), (2, 1)), Write((2, 1), (3, 3))],
        [C(1, 0), Write((2, 1), (3, 3))],
    ),
]


def test_every_violation_has_a_planted_case() -> None:
    """Each kind of violation the checker knows is planted below at least once."""
    assert sorted(VIOLATIONS) == sorted({kind for kind, *_ in CASES})


@pytest.mark.parametrize(
    ("kind", "clean", "planted"),
    [(kind, clean, planted) for kind, _, clean, planted in CASES],
    ids=[f"{kind}: {what}" for kind, what, _, _ in CASES],
)
def test_a_planted_violation_is_flagged_and_its_twin_is_not(
    kind: str, clean: list[Step], planted: list[Step]
) -> None:
    """The planted record counts one violation of its kind, as a duplicate; its twin none."""
    twin, broken = _check(clean), _check(planted)

    assert ({}, 0) == (_flagged(twin), twin.duplicates)
    assert ({kind: 1}, 1) == (_flagged(broken), broken.duplicates)
    if kind == "ignored_progress":  # the twin's tick answered the claim it read
        assert (1, 0) == (twin.answered, broken.answered)


def test_a_charge_sent_twice_or_a_message_of_no_charge_is_counted() -> None:
    """A second webhook-id for one charge is a duplicate; a message naming no charge is flagged."""
    charge = C(1, 0)

    once = _check([charge], (_message("m1", charge),))
    twice = _check([charge], (_message("m1", charge), _message("m2", charge)))
    stray = _check([], (_message("m1", charge),))

    assert (0, 0, True) == (once.duplicates, once.unattributed, once.clean)
    assert (1, 1) == (twice.duplicates, twice.extra_messages)
    assert (1, False) == (stray.unattributed, stray.clean)


def test_charges_between_resets_are_counted_for_the_cap() -> None:
    """The soak holds this to the cap: six charges with no reset are six; a refunded one is none."""
    refunded = C(2, 1)  # retried one step later (1 s), then nudges 3..5 at their earliest
    retried = _check([C(1, 0), refunded, Refund(refunded), C(2, 2), C(3, 4), C(4, 8), C(5, 16)])

    assert 6 == _check([*BACKOFF, C(1, 40)]).max_between_claims
    assert ({}, 5) == (_flagged(retried), retried.max_between_claims)


# -- the history: every outcome of the soak, none missing, none twice -----------------------

#: Three charges: delivered (answered 204), given up (answered 500, refunded) and one only the
#: ledger knows (its tick died after the commit: never woken, never booked).
DELIVERED = nudge("e1", "q", 1, _at(0), "t1")
GAVE_UP = nudge("e1", "q", 2, _at(10), "t1")
UNKNOWN = nudge("e2", "q", 1, _at(5), "t9")
SILENCE = ActionRecord(
    action="silenced", endpoint_id="e1", queue=None, reason="r1", by="op", kept=True
)
#: An unsilence of no silence: refused by nothing, kept by nobody.
NOTHING_ENDED = ActionRecord(
    action="unsilenced", endpoint_id="e2", queue="q", reason="r2", by="op", kept=False
)
#: A silence through a fault: the call failed, so the history may hold it or not.
THROUGH_A_FAULT = ActionRecord(
    action="silenced", endpoint_id="e2", queue="q", reason="r3", by="op", kept=None
)


def _charged(n: Nudge, outcome: str | None) -> HistoryEntry:
    return HistoryEntry(
        at=n.charged_at, endpoint_id=n.endpoint_id, queue=n.queue, event="charged",
        nudge=n.number, todo_id=n.todo.id, outcome=outcome,
    )  # fmt: skip


def _kept(a: ActionRecord, actor: str | None = None) -> HistoryEntry:
    return HistoryEntry(
        at=_at(3), endpoint_id=a.endpoint_id, queue=a.queue, event=a.action, detail=a.reason,
        by=a.by if actor is None else actor,
    )  # fmt: skip


HISTORY = [
    _charged(DELIVERED, "delivered"),
    _charged(GAVE_UP, "gave-up"),
    _charged(UNKNOWN, None),
    _kept(SILENCE),
]


def _answered(n: Nudge, status: int, webhook_id: str) -> MessageRecord:
    return MessageRecord(
        webhook_id=webhook_id, endpoint_id=n.endpoint_id, queue=n.queue, reason="stalled",
        sent_at=n.charged_at, answered=status,
    )  # fmt: skip


def _written(seq: int, n: Nudge, old: LedgerRow | None) -> LedgerWrite:
    return LedgerWrite(
        seq=seq, op="INSERT" if old is None else "UPDATE", endpoint_id=n.endpoint_id,
        queue=n.queue, old=old, new=charge_row(n), xid=seq, xact_start=n.charged_at,
        at=n.charged_at,
    )  # fmt: skip


def _check_history(
    history: list[HistoryEntry],
    *,
    bookings: tuple[BookingRecord, ...] | None = None,
    messages: tuple[MessageRecord, ...] | None = None,
) -> HistoryFindings:
    """The history read back against the three charges and the actions, as the soak has them."""
    ledger = [
        _written(1, DELIVERED, None),
        _written(2, UNKNOWN, None),
        _written(3, GAVE_UP, charge_row(DELIVERED)),
    ]
    return check_history(
        history=history,
        ledger=ledger,
        charges=[ChargeRecord(worker=0, now=n.charged_at, nudge=n) for n in (DELIVERED, GAVE_UP)],
        bookings=bookings
        if bookings is not None
        else (
            BookingRecord(nudge=DELIVERED, outcome="delivered", booked=True),
            BookingRecord(nudge=GAVE_UP, outcome="gave-up", booked=True),
        ),
        refunds=[RefundRecord(worker=0, nudge=GAVE_UP, refunded=True)],
        messages=messages
        if messages is not None
        else (_answered(DELIVERED, 204, "m1"), _answered(GAVE_UP, 500, "m2")),
        actions=[SILENCE, NOTHING_ENDED, THROUGH_A_FAULT],
    )


def _faults(found: HistoryFindings) -> dict[str, int]:
    return {kind: n for kind, n in found.faults.items() if n}


def test_the_history_of_a_clean_soak_holds_every_outcome_once() -> None:
    """Three charges (delivered, given up, never woken) and one action: nothing flagged."""
    found = _check_history(HISTORY)
    through = _check_history([*HISTORY, _kept(THROUGH_A_FAULT)])

    assert ({}, True, 3, 1) == (_faults(found), found.clean, found.charges, found.actions)
    assert {"delivered": 1, "gave-up": 1, "none": 1} == found.outcomes
    assert {} == _faults(through)  # a failed call may have been kept


ADDED = nudge("e3", "q", 1, _at(7), "t3")
HISTORY_CASES = [
    ("missing", "a charge's row is gone", HISTORY[1:]),
    ("missing", "an unacknowledged charge's row is gone", [*HISTORY[:2], HISTORY[3]]),
    ("twice", "a charge's row is there twice", [*HISTORY, HISTORY[0]]),
    ("unexplained", "a row of no charge", [*HISTORY, _charged(ADDED, None)]),
    ("wrong_outcome", "booked, yet not settled", [_charged(DELIVERED, None), *HISTORY[1:]]),
    ("wrong_outcome", "another outcome", [_charged(DELIVERED, "gave-up"), *HISTORY[1:]]),
    (
        "wrong_outcome",
        "an outcome nobody booked",
        [*HISTORY[:2], _charged(UNKNOWN, "delivered"), HISTORY[3]],
    ),
    ("missing_action", "an action's row is gone", HISTORY[:3]),
    ("action_twice", "an action's row is there twice", [*HISTORY, HISTORY[3]]),
    ("unexplained_action", "an action nobody took", [*HISTORY, _kept(SILENCE, actor="eve")]),
    ("unexplained_action", "an action that changed nothing", [*HISTORY, _kept(NOTHING_ENDED)]),
]


def test_every_history_fault_has_a_planted_case() -> None:
    assert sorted(HISTORY_FAULTS) == sorted({kind for kind, *_ in HISTORY_CASES})


@pytest.mark.parametrize(
    ("kind", "tampered"),
    [(kind, tampered) for kind, _, tampered in HISTORY_CASES],
    ids=[f"{kind}: {what}" for kind, what, _ in HISTORY_CASES],
)
def test_a_tampered_history_is_flagged(kind: str, tampered: list[HistoryEntry]) -> None:
    """One row gone, doubled, added or changed: flagged once, as exactly that kind."""
    found = _check_history(tampered)

    assert ({kind: 1}, False) == (_faults(found), found.clean), found.examples


def test_an_outcome_the_receiver_and_refunds_belie_is_flagged() -> None:
    """Booked as delivered though no message of it was answered 2xx; given up with no refund."""
    unanswered = _check_history(
        HISTORY, messages=(_answered(DELIVERED, 500, "m1"), _answered(GAVE_UP, 500, "m2"))
    )
    delivered = nudge("e1", "q", 2, _at(10), "t1")
    unrefunded = _check_history(
        [*HISTORY[:1], _charged(delivered, "delivered"), *HISTORY[2:]],
        bookings=(
            BookingRecord(nudge=DELIVERED, outcome="delivered", booked=True),
            BookingRecord(nudge=GAVE_UP, outcome="delivered", booked=True),
        ),
        messages=(_answered(DELIVERED, 204, "m1"), _answered(GAVE_UP, 204, "m2")),
    )

    assert {"wrong_outcome": 1} == _faults(unanswered)
    assert {"wrong_outcome": 1} == _faults(unrefunded)  # delivered, yet its refund was asked
