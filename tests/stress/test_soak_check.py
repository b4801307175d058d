"""The soak's invariant checks, each fed a planted violation: a zero means it looked.

A record is written as a script: each step is one transaction of one pair,
in commit order (a claim logged, a tick charging, draining, compacting or
absorbing, a refund, the ledger's drop). ``Record`` turns it into what the
soak records: the journals, the ledger's history, the claim log's history
and its rows left at the end, and the host's claims.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from stall_core import Nudge, TodoRef
from tests.stress.soak_check import (
    VIOLATIONS,
    ChargeRecord,
    ClaimRecord,
    ClaimWrite,
    Findings,
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
    """A tick charged nudge ``number`` stamped ``stamp``, deciding at ``now``.

    It absorbed the claims ``absorbs`` (deleted them in its transaction).
    ``worker`` None: the tick died after its commit (only the history knows
    it); ``written`` False: journaled, never written (a phantom).
    """

    number: int
    stamp: datetime
    now: datetime
    worker: int | None = 0
    absorbs: tuple[int, ...] = ()
    written: bool = True
    written_at: datetime | None = None

    @property
    def nudge(self) -> Nudge:
        return Nudge(
            endpoint_id=KEY[0],
            queue=KEY[1],
            todo=TodoRef(id="t1", created_at=T0 - timedelta(minutes=1)),
            number=self.number,
            charged_at=self.stamp,
        )

    @property
    def record(self) -> ChargeRecord:
        return ChargeRecord(worker=self.worker, now=self.now, nudge=self.nudge)


@dataclass(frozen=True)
class Claim:
    """The host claimed a todo of the pair at ``at``; the log logged it as row ``id``."""

    id: int
    at: datetime
    logged: bool = True


@dataclass(frozen=True)
class Tick:
    """A tick that neither charged nor drained the pair deleted its claims ``absorbs``."""

    absorbs: tuple[int, ...]


@dataclass(frozen=True)
class Drain:
    """A tick deleted the pair's row (and absorbed ``absorbs``); ``journaled``, ``written``."""

    at: datetime
    absorbs: tuple[int, ...] = ()
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


Step = Charge | Claim | Tick | Drain | Refund | Drop | Write


def _charge(
    number: int,
    at: float | datetime,
    *,
    now: float | datetime | None = None,
    worker: int | None = 0,
    absorbs: tuple[int, ...] = (),
    written: bool = True,
    written_at: float | None = None,
) -> Charge:
    """Nudge ``number`` stamped ``at``; its tick decided at ``now`` (the stamp, by default)."""
    return Charge(
        number=number,
        stamp=_at(at),
        now=_at(at if now is None else now),
        worker=worker,
        absorbs=absorbs,
        written=written,
        written_at=None if written_at is None else _at(written_at),
    )


def _claim(claim_id: int, at: float | datetime, *, logged: bool = True) -> Claim:
    return Claim(id=claim_id, at=_at(at), logged=logged)


def _tick(*absorbs: int) -> Tick:
    return Tick(absorbs=absorbs)


def _drain(at: float, *absorbs: int, written: bool = True) -> Drain:
    return Drain(at=_at(at), absorbs=absorbs, written=written)


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


@dataclass
class Record:
    """What one soak recorded, for one pair, from a script of its transactions."""

    steps: list[Step]
    messages: list[MessageRecord] = field(default_factory=list)
    #: the host's claims (every claim step, by default)
    made: list[ClaimRecord] | None = None
    #: the claim log's rows at the end (every logged claim no step deleted, by default)
    left: list[int] | None = None
    #: whether a claim log is kept (the incremental footprint); False: lean
    logged: bool = True

    def check(self) -> Findings:
        seq, xids = itertools.count(1), itertools.count(1000)
        row: tuple[int, datetime] | None = None
        charges: list[ChargeRecord] = []
        refunds: list[RefundRecord] = []
        drains: list[datetime] = []
        ledger: list[LedgerWrite] = []
        log: list[ClaimWrite] = []
        resets: list[int] = []
        made: list[ClaimRecord] = []
        logged: dict[int, datetime] = {}
        deleted: set[int] = set()

        def write(
            op: str,
            old: tuple[int, datetime] | None,
            new: tuple[int, datetime] | None,
            xid: int,
            start: datetime,
            at: datetime,
        ) -> None:
            ledger.append(
                LedgerWrite(
                    seq=next(seq),
                    op=op,
                    endpoint_id=KEY[0],
                    queue=KEY[1],
                    old=old,
                    new=new,
                    xid=xid,
                    xact_start=start,
                    at=at,
                )
            )

        def delete(ids: tuple[int, ...], xid: int) -> None:
            for claim_id in ids:
                claimed_at = logged.get(claim_id, T0)
                log.append(_claim_write("DELETE", claim_id, claimed_at, next(seq), xid))
                deleted.add(claim_id)

        for step in self.steps:
            xid = next(xids)
            if isinstance(step, Claim):
                made.append(ClaimRecord(endpoint_id=KEY[0], queue=KEY[1], claimed_at=step.at))
                if step.logged:
                    log.append(_claim_write("INSERT", step.id, step.at, next(seq), xid))
                    logged[step.id] = step.at
            elif isinstance(step, Charge):
                if step.worker is not None:
                    charges.append(step.record)
                if step.written:
                    delete(step.absorbs, xid)
                    new = (step.number, step.stamp)
                    at = step.written_at or max(step.now, step.stamp)
                    write("INSERT" if row is None else "UPDATE", row, new, xid, step.now, at)
                    row = new
            elif isinstance(step, Tick):
                delete(step.absorbs, xid)
            elif isinstance(step, Drain):
                drains.append(step.at)
                if step.written:
                    delete(step.absorbs, xid)
                    write("DELETE", row, None, xid, step.at, step.at)
                    row = None
            elif isinstance(step, Refund):
                c = step.charge
                refunds.append(RefundRecord(worker=c.worker, nudge=c.nudge, refunded=step.refunded))
                if step.refunded if step.written is None else step.written:
                    # The compare-and-set matched the row of the charge it names.
                    new = (c.number - 1, c.stamp)
                    write("UPDATE", (c.number, c.stamp), new, xid, c.stamp, c.stamp)
                    row = new
            elif isinstance(step, Drop):
                resets.append(next(seq))
                row = None
            else:
                old = None if step.old is None else (step.old[0], _at(step.old[1]))
                raw = None if step.new is None else (step.new[0], _at(step.new[1]))
                when = T0 if raw is None else raw[1]
                write("UPDATE", old, raw, xid, when, when)
                row = raw
        return check(
            ledger=ledger,
            claim_log=log,
            claims_left=sorted(logged.keys() - deleted) if self.left is None else self.left,
            charges=charges,
            refunds=refunds,
            messages=self.messages,
            claims=made if self.made is None else self.made,
            drains={KEY: drains},
            ledger_resets=resets,
            policy=SOAK_POLICY,
            logged=self.logged,
        )


def _claim_write(op: str, claim_id: int, claimed_at: datetime, seq: int, xid: int) -> ClaimWrite:
    return ClaimWrite(
        seq=seq,
        op=op,
        claim_id=claim_id,
        endpoint_id=KEY[0],
        queue=KEY[1],
        claimed_at=claimed_at,
        xid=xid,
        at=claimed_at,
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
    """Resets, a refund and its retry, a compaction, a drain, a drop, a row-less tick: clean."""
    refunded = _charge(2, 3)
    steps: list[Step] = [
        _charge(1, 0),
        _charge(2, 1),
        _claim(1, 1.5),
        _charge(1, 2, absorbs=(1,)),  # reset: it absorbed the claim
        refunded,
        _refund(refunded),
        _charge(2, 4),  # ... tried again one step later, at the same number
        _charge(3, 6),
        _claim(2, 20.5),
        _charge(1, 20.5, now=20.4, absorbs=(2,)),  # absorbs a claim later than its tick
        _claim(3, 22),
        _claim(4, 23),
        _tick(3),  # a compaction: the latest claim stays
        _drain(25, 4),  # absorbs it
        _charge(1, 30),  # after the drain: a new row
        _charge(2, 31),
        Drop(),
        _claim(5, 35),
        _tick(5),  # a tick that finds no row absorbs the pair's claims
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
    assert {"first": 3, "reset": 2, "step": 4, "retry": 1} == findings.judged
    assert {
        "logged": 5,
        "absorbed": 4,
        "compacted": 1,
        "left": 0,
        "late": 0,
        "late_resets": 0,
    } == findings.claims


# -- a claim that commits after a charge looked ---------------------------------------


@pytest.mark.parametrize("logged_before", [True, False], ids=["logged-before", "logged-after"])
def test_a_claim_stamped_before_the_last_nudge_is_progress_at_the_next_charge(
    logged_before: bool,
) -> None:
    """Stamped 0.9, before nudge 2 at 1, committed after it looked: nudge 1 next is a reset.

    Its log row may be written before nudge 2's (the claim's transaction was
    still open) or after; either way nudge 2 did not absorb it, and the next
    charge that does is a reset, due at once, stamped at its own instant.
    """
    claim = _claim(1, 0.9)
    before: list[Step] = [_charge(1, 0), claim, _charge(2, 1)]
    if not logged_before:
        before = [_charge(1, 0), _charge(2, 1), claim]

    reset = Record([*before, _charge(1, 1.5, absorbs=(1,))]).check()
    no_claim = Record([*before, _charge(1, 1.5)]).check()
    step = Record([*before, _charge(3, 3, absorbs=(1,))]).check()
    drained = Record([*before, _drain(1.5, 1)]).check()

    assert ({}, {"first": 1, "step": 1, "reset": 1}) == (_flagged(reset), reset.judged)
    assert (1, 1) == (reset.claims["late"], reset.claims["late_resets"])
    assert {"reset_without_claim": 1} == _flagged(no_claim)
    assert {"missed_reset": 1} == _flagged(step)
    assert ({}, 1, 0) == (
        _flagged(drained),
        drained.claims["late"],
        drained.claims["late_resets"],
    )


# -- every violation, planted --------------------------------------------------------


def _reset_without_claim() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim(1, 2), _charge(1, 3, absorbs=(1,))]),
        Record([_charge(1, 0), _claim(1, 2), _charge(1, 3)]),
    )


def _double_reset() -> tuple[Record, Record]:
    once: list[Step] = [_charge(1, 0), _claim(1, 2), _charge(1, 3, absorbs=(1,))]
    return (
        Record([*once, _claim(2, 3.2), _charge(1, 3.5, absorbs=(2,))]),
        Record([*once, _charge(1, 3.5, absorbs=(1,))]),
    )


def _missed_reset() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim(1, 0.5), _charge(1, 1, absorbs=(1,))]),
        Record([_charge(1, 0), _claim(1, 0.5), _charge(2, 1, absorbs=(1,))]),
    )


def _compacted_last_claim() -> tuple[Record, Record]:
    claims: list[Step] = [_charge(1, 0), _claim(1, 0.5), _claim(2, 0.7)]
    return (
        Record([*claims, _tick(1), _charge(1, 1, absorbs=(2,))]),
        Record([*claims, _tick(1, 2), _charge(2, 1)]),
    )


def _lost_claim() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim(1, 0.5)]),
        Record([_charge(1, 0), _claim(1, 0.5)], left=[]),
    )


def _unlogged_claim() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _claim(1, 0.5)]),
        Record([_charge(1, 0), _claim(1, 0.5, logged=False)]),
    )


def _early() -> tuple[Record, Record]:
    return (
        Record([_charge(1, 0), _charge(2, 1)]),
        Record([_charge(1, 0), _charge(2, _at(1) - US)]),
    )


def _over_cap() -> tuple[Record, Record]:
    return (
        Record([*_backoff(), _claim(1, 30), _charge(1, 40, absorbs=(1,))]),
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
        Record([_charge(1, 0), _claim(1, 3), _charge(1, 3, now=2.9, absorbs=(1,))]),
        Record([_charge(1, 0), _claim(1, 2), _charge(1, 3, now=2.9, absorbs=(1,))]),
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
    "reset_without_claim": _reset_without_claim,
    "double_reset": _double_reset,
    "missed_reset": _missed_reset,
    "compacted_last_claim": _compacted_last_claim,
    "lost_claim": _lost_claim,
    "unlogged_claim": _unlogged_claim,
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


# -- the claim log, rule by rule ---------------------------------------------------------


def test_a_reset_that_absorbed_no_claim_is_flagged() -> None:
    """Nudge 1 again on a live row whose transaction absorbed nothing: a reset without claim."""
    assert {"reset_without_claim": 1} == _flagged(Record([_charge(1, 0), _charge(1, 3)]).check())


def test_two_resets_from_one_claim_are_a_double_reset() -> None:
    """A claim is absorbed once; a second reset absorbing it again is a double reset."""
    _, planted = _double_reset()

    findings = planted.check()

    assert ({"double_reset": 1}, 1) == (_flagged(findings), findings.double_resets)


def test_a_claim_absorbed_twice_by_any_transaction_is_a_double_reset() -> None:
    """A drain or a compaction deleting a row already absorbed is flagged the same way."""
    absorbed: list[Step] = [_charge(1, 0), _claim(1, 0.5), _charge(1, 1, absorbs=(1,))]

    assert {"double_reset": 1} == _flagged(Record([*absorbed, _drain(2, 1)]).check())
    assert {"double_reset": 1} == _flagged(Record([*absorbed, _tick(1)]).check())


def test_the_stamp_is_the_latest_absorbed_claim_only_when_later_than_the_tick() -> None:
    """charge_stamp: the tick's instant, or the latest claim it absorbed if later; nothing else."""
    claims: list[Step] = [_charge(1, 0), _claim(1, 2.95), _claim(2, 2.97)]

    later = Record([*claims, _charge(1, 2.97, now=2.9, absorbs=(1, 2))]).check()
    not_latest = Record([*claims, _charge(1, 2.95, now=2.9, absorbs=(1, 2))]).check()
    earlier = Record([*claims, _charge(1, 3, absorbs=(1, 2))]).check()
    on_claim = Record([*claims, _charge(1, 2.97, now=3, absorbs=(1, 2))]).check()

    assert ({}, {}) == (_flagged(later), _flagged(earlier))
    assert ({"bad_stamp": 1}, {"bad_stamp": 1}) == (_flagged(not_latest), _flagged(on_claim))


def test_an_unacknowledged_charge_stamps_within_its_transaction() -> None:
    """A charge only the history knows read its instant between its start and its write."""
    in_window = _charge(1, 3, now=2.9, worker=None, written_at=3.1)
    after_write = _charge(1, 3.2, now=2.9, worker=None, written_at=3.1)
    on_a_claim = _charge(1, 3.2, now=2.9, worker=None, written_at=3.1, absorbs=(1,))

    assert {} == _flagged(Record([in_window]).check())
    assert {"bad_stamp": 1} == _flagged(Record([after_write]).check())
    assert {} == _flagged(Record([_claim(1, 3.2), on_a_claim]).check())


def test_a_charge_that_skips_the_claim_a_compaction_kept_is_flagged() -> None:
    """A compaction kept the latest claim: the pair's next absorption must take it.

    A claim logged after the compaction does not stand in for it: every tick
    after the compaction sees the kept one, so whatever absorbs takes it too.
    """
    kept: list[Step] = [_charge(1, 0), _claim(1, 0.5), _claim(2, 0.7), _tick(1)]

    skipped = Record([*kept, _charge(2, 1)]).check()
    later = Record([*kept, _claim(3, 0.8), _tick(2), _charge(1, 1, absorbs=(3,))]).check()
    drained_past = Record([*kept, _claim(3, 0.8), _drain(1, 3)]).check()

    assert {"compacted_last_claim": 1} == _flagged(skipped)
    assert ({}, 2) == (_flagged(later), later.claims["compacted"])
    assert {"compacted_last_claim": 1} == _flagged(drained_past)


def test_the_claim_a_compaction_kept_may_be_left_in_the_log() -> None:
    """Kept and never absorbed (the soak ended first): in the log at the end, or lost."""
    kept: list[Step] = [_charge(1, 0), _claim(1, 0.5), _claim(2, 0.7), _tick(1)]

    assert ({}, 1) == (_flagged(Record(kept).check()), Record(kept).check().claims["left"])
    assert {"lost_claim": 1} == _flagged(Record(kept, left=[]).check())


def test_a_tick_that_finds_no_row_absorbs_every_claim() -> None:
    """With no ledger row (never charged, drained, dropped), a tick absorbs all: no compaction."""
    never = Record([_claim(1, 0.5), _claim(2, 0.6), _tick(1, 2), _charge(1, 3)]).check()
    dropped = Record(
        [_charge(1, 0), _claim(1, 0.5), _claim(2, 0.6), Drop(), _tick(1, 2), _charge(1, 3)]
    ).check()

    assert ({}, {}) == (_flagged(never), _flagged(dropped))
    assert (2, 0) == (never.claims["absorbed"], never.claims["compacted"])


@pytest.mark.parametrize(
    "record",
    [
        Record([_charge(1, 0), _tick(9)]),  # deletes a row the log never logged
        Record([_claim(1, 0.5), _tick(1)], left=[1]),  # deleted, yet left
        Record([_charge(1, 0)], left=[7]),  # left, never logged
        Record([_charge(1, 0), _claim(1, 0.5)], made=[]),  # logged a claim nobody made
    ],
    ids=["never-logged", "deleted-and-left", "left-never-logged", "never-made"],
)
def test_the_claim_log_must_agree_with_itself_and_the_host(record: Record) -> None:
    """The log's history, its final rows and the host's claims tell one story."""
    assert {"phantom_write": 1} == _flagged(record.check())


def test_a_claim_logged_by_update_is_a_phantom() -> None:
    """The log is only ever inserted into and deleted from."""
    at = _at(0.5)
    log = [
        _claim_write("INSERT", 1, at, 1, 10),
        ClaimWrite(
            seq=2,
            op="UPDATE",
            claim_id=1,
            endpoint_id=KEY[0],
            queue=KEY[1],
            claimed_at=at,
            xid=11,
            at=at,
        ),
    ]

    findings = check(
        ledger=[],
        claim_log=log,
        claims_left=[1],
        charges=[],
        messages=[],
        claims=[ClaimRecord(endpoint_id=KEY[0], queue=KEY[1], claimed_at=at)],
        drains={},
        ledger_resets=[],
        policy=SOAK_POLICY,
    )

    assert {"phantom_write": 1} == _flagged(findings)


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


def test_a_refunded_first_nudge_that_absorbs_a_claim_is_a_reset_due_at_once() -> None:
    """A row at 0 (its first nudge refunded): nudge 1 waits a step, unless it absorbed a claim."""
    refunded = _charge(1, 0)
    steps: list[Step] = [refunded, _refund(refunded)]

    reset = Record([*steps, _claim(1, 0.2), _charge(1, 0.5, absorbs=(1,))]).check()
    early = Record([*steps, _charge(1, 0.5)]).check()

    assert ({}, {"first": 1, "reset": 1}) == (_flagged(reset), reset.judged)
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


def test_a_reset_after_a_drain_or_a_ledger_drop_needs_no_claim() -> None:
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
    assert (
        5
        == (
            Record([*_backoff(), _claim(1, 30), _charge(1, 40, absorbs=(1,))]).check()
        ).max_between_claims
    )
    assert (
        5 == (Record([*_backoff(), _refund(refunded), _charge(5, 23)]).check()).max_between_claims
    )


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
    """A count that jumps without a new stamp is no charge, refund or drain."""
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


# -- the lean footprint: no claim log, progress by the host's timestamps ----------------


def _lean(*steps: Step) -> Findings:
    """A lean record: its claims are the host's, none logged."""
    lean = [
        Claim(id=step.id, at=step.at, logged=False) if isinstance(step, Claim) else step
        for step in steps
    ]
    return Record(lean, logged=False).check()


def test_a_lean_reset_needs_a_claim_after_the_rows_stamp() -> None:
    """Nudge 1 on a live row: legal with a claim after its stamp, else a reset without claim."""
    claimed = _lean(_charge(1, 0), _charge(2, 1), _claim(1, 1.5), _charge(1, 2))
    before = _lean(_charge(1, 0), _charge(2, 1), _claim(1, 0.5), _charge(1, 2))

    assert ({}, 1) == (_flagged(claimed), claimed.judged["reset"])
    assert {"reset_without_claim": 1} == _flagged(before)


def test_one_lean_claim_explains_one_reset() -> None:
    """The reset stamps at or after the claim, so the same claim is not after the next stamp."""
    findings = _lean(_charge(1, 0), _claim(1, 0.5), _charge(1, 1), _charge(1, 3))

    assert {"reset_without_claim": 1} == _flagged(findings)


def test_a_lean_increment_over_a_claim_is_not_blamed() -> None:
    """Whether a claim at or before the tick's instant was visible to it is unknown."""
    findings = _lean(_charge(1, 0), _claim(1, 0.5), _charge(2, 1))

    assert ({}, 1) == (_flagged(findings), findings.judged["step"])


def test_a_lean_reset_stamps_its_instant_or_a_later_claim() -> None:
    """The stamp is the tick's instant, or the latest claim after it; nothing else."""
    later = _lean(_charge(1, 0), _claim(1, 3.05), _charge(1, 3.05, now=3))
    elsewhere = _lean(_charge(1, 0), _claim(1, 2), _charge(1, 3.05, now=3))

    assert {} == _flagged(later)
    assert {"bad_stamp": 1} == _flagged(elsewhere)


def test_a_claim_logged_in_the_lean_footprint_is_a_phantom() -> None:
    """The lean footprint keeps no claim log: a row written or left there is a phantom."""
    findings = Record([_charge(1, 0), _claim(1, 0.5), _charge(1, 1, absorbs=(1,))], logged=False)

    assert {"phantom_write": 1} == _flagged(findings.check())
