"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

Inputs are the sweepers' journals (every charge each one got back from
``charge_due`` with the instant its tick decided at, every refund and its
compare-and-set result, every drained row), the ledger's own history (every
row write, recorded by a trigger on the ledger table), the receiver's log
(every request, its ``webhook-id`` and ``meta``), every claim the consumers
made (its ``claimed_at`` and an instant by which it had certainly committed)
and the instants the ledger table was dropped. ``tests/soak/test_check.py``
feeds each check a planted violation, so a zero in the soak's last line
means "looked and found none".

The ledger's history is what is judged: a tick whose connection died after
its commit charged pairs no sweeper acknowledged (nor journaled, nor woke),
and the next charge of such a pair is only legal after that one. The
journals must agree with the history: a journaled charge or refund the
history lacks, or a history write no sweep makes, is a ``phantom_write``.

Theory of operation
-------------------
Each pair's history is replayed in time order on the database's clock, the
one clock every recorded instant is on. The replay keeps the row the ledger
must hold (``charge_row`` after a charge, ``refunded_row`` after a refund
whose compare-and-set succeeded, nothing after a drain or a ledger drop) and
judges every charge against it with no slack:

- with no row, only nudge 1 is legal;
- nudge 1 is a reset, legal when a claim lies in (stamp, charged_at]; one
  claim explains at most one reset, since the reset's stamp covers it (a
  reset whose latest claim already explained one is a ``double_reset``);
- otherwise the charge is the row's count + 1, not past the cap, at or after
  ``next_due_at`` (stamp + ``delay_before(count + 1)``; a refunded nudge N
  leaves the row at N - 1 with its stamp, so its retry is nudge N again one
  step later), with no claim in (stamp, charged_at] the charge can be proven
  to have seen (such a claim makes it a missed reset);
- its stamp is the tick's instant, or a claim it absorbed that is later;
- no two charges of a pair share a stamp, and a successful refund names a
  recorded charge.

Each charge goes out as at most one message (one ``webhook-id``; retries
reuse it): every further one is a duplicate, and a stalled message naming
no recorded charge is unattributed.

A claim is proven seen when it had committed before the tick read its
instant (``ClaimRecord.seen_by``), or when the charge absorbed it. A claim
that committed after the charge's snapshot is never progress, yet its
``claimed_at`` may be older than the stamp (docs/reliability.md, "Known
limits"); such claims are counted in ``unseen_claims``, never forgiven
otherwise.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import attrs

from stall_core import (
    LedgerRow,
    Nudge,
    PacingPolicy,
    TodoRef,
    charge_row,
    next_due_at,
    refunded_row,
)

__all__ = [
    "VIOLATIONS",
    "ChargeRecord",
    "ClaimRecord",
    "Findings",
    "LedgerWrite",
    "MessageRecord",
    "RefundRecord",
    "check",
]

PairKey = tuple[str, str]
#: The identity of one charge: its pair, number and stamp (what a refund compares).
ChargeId = tuple[str, str, int, datetime]

#: Every way a charge can break the ledger's rule; each count must be 0.
VIOLATIONS = (
    "duplicate_charges",  # the pair charged twice with one stamp
    "reset_without_claim",  # nudge 1 on a live row, no claim since its stamp
    "double_reset",  # ... where the latest claim had already explained a reset
    "missed_reset",  # a step although a claim it saw came after the stamp
    "early",  # nudge count + 1 before its due
    "over_cap",  # a step past the cap
    "out_of_sequence",  # any other number
    "bad_stamp",  # a stamp that is neither the tick's instant nor a later claim
    "unmatched_refund",  # a refund that succeeded for a charge nobody recorded
    "phantom_write",  # the journals and the ledger's own history disagree
)


@attrs.frozen(kw_only=True)
class ChargeRecord:
    """One charge: ``nudge``, decided by a tick at ``now``.

    ``worker`` is None for a charge only the ledger's history knows (its tick
    failed after the commit); ``now`` is then its transaction's start, which is
    no later than the instant the tick decided at.
    """

    worker: int | None
    now: datetime
    nudge: Nudge

    @property
    def acknowledged(self) -> bool:
        return self.worker is not None

    @property
    def key(self) -> PairKey:
        return self.nudge.key

    @property
    def number(self) -> int:
        return self.nudge.number

    @property
    def charged_at(self) -> datetime:
        return self.nudge.charged_at

    @property
    def id(self) -> ChargeId:
        return (*self.nudge.key, self.nudge.number, self.nudge.charged_at)


@attrs.frozen(kw_only=True)
class RefundRecord:
    """One refund a sweeper asked for; ``refunded`` is None when its outcome is unknown."""

    worker: int | None
    nudge: Nudge
    refunded: bool | None

    @property
    def id(self) -> ChargeId:
        return (*self.nudge.key, self.nudge.number, self.nudge.charged_at)


@attrs.frozen(kw_only=True)
class ClaimRecord:
    """One claim: its ``claimed_at``, and an instant it had surely committed by (None: unknown)."""

    endpoint_id: str
    queue: str
    claimed_at: datetime
    seen_by: datetime | None = None

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class LedgerWrite:
    """One row write the ledger table's audit trigger recorded: (nudges, stamp) before and after.

    ``op`` is INSERT, UPDATE or DELETE; ``xact_start`` is its transaction's
    start and ``at`` the instant of the write, both on the database's clock.
    """

    seq: int
    op: str
    endpoint_id: str
    queue: str
    old: tuple[int, datetime] | None
    new: tuple[int, datetime] | None
    xact_start: datetime
    at: datetime

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class MessageRecord:
    """One request the receiver got: a stalled message carries its charge's stamp as sent_at."""

    webhook_id: str
    endpoint_id: str
    queue: str
    reason: str
    sent_at: datetime
    answered: int  # the status the receiver answered, 0 when it reset or hung


@attrs.frozen(kw_only=True)
class Findings:
    """What the checks found; see ``clean`` for the counts that must be 0."""

    charges: int
    #: stalled messages (distinct webhook-ids) a consumer was woken by (answered 2xx)
    wakes: int
    #: refunds whose compare-and-set succeeded
    refunds: int
    #: extra messages for one charge, plus every charge the rules did not allow
    duplicates: int
    extra_messages: int
    #: charges the rules did not allow, by kind (every key of VIOLATIONS)
    violations: Mapping[str, int]
    #: stalled messages whose (endpoint, queue, sent_at) matches no recorded charge
    unattributed: int
    #: the most counted charges of one pair between two of its claims (or drains, epochs)
    max_between_claims: int
    #: claims after a stamp that the next charge cannot be proven to have seen
    unseen_claims: int
    #: the legal charges by the rule that allowed them: first (no row), reset (a claim),
    #: step (count + 1 at its due) and retry (a refunded number again, one step later)
    judged: Mapping[str, int] = attrs.field(factory=dict)
    #: charges only the ledger's history knows: committed, never acknowledged nor woken
    unacknowledged: int = 0
    examples: tuple[str, ...] = ()

    @property
    def pacing_violations(self) -> int:
        return sum(self.violations.values())

    @property
    def double_resets(self) -> int:
        return self.violations["double_reset"]

    @property
    def clean(self) -> bool:
        return self.duplicates == 0 and self.unattributed == 0


def check(
    *,
    charges: Iterable[ChargeRecord],
    messages: Iterable[MessageRecord],
    claims: Iterable[ClaimRecord],
    drains: Mapping[PairKey, Sequence[datetime]],
    ledger_resets: Sequence[datetime],
    policy: PacingPolicy,
    refunds: Iterable[RefundRecord] = (),
    ledger: Iterable[LedgerWrite] | None = None,
) -> Findings:
    """Run every invariant over one soak's records.

    ``ledger_resets`` are the instants the ledger table was dropped: every
    row is gone there, so every pair starts over, as after a drain. With
    ``ledger`` (its history), the charges, refunds and drains judged are the
    history's, checked against the journals; without it, the journals'.
    """
    tally = _Tally()
    charges, refunds = list(charges), list(refunds)
    acknowledged = {c.id for c in charges}
    unacknowledged = 0
    if ledger is not None:
        charges, refunds, drains = _from_history(ledger, charges, refunds, drains, tally)
        unacknowledged = sum(1 for c in charges if not c.acknowledged)
    by_pair: dict[PairKey, list[ChargeRecord]] = defaultdict(list)
    for charge in charges:
        by_pair[charge.key].append(charge)
    claims_by_pair: dict[PairKey, list[ClaimRecord]] = defaultdict(list)
    for claim in claims:
        claims_by_pair[claim.key].append(claim)
    refunds_by_charge: dict[ChargeId, list[RefundRecord]] = defaultdict(list)
    for refund in refunds:
        refunds_by_charge[refund.id].append(refund)

    charge_ids = {c.id for cs in by_pair.values() for c in cs}
    for charge_id, records in refunds_by_charge.items():
        if charge_id not in charge_ids and any(r.refunded for r in records):
            tally.flag("unmatched_refund", f"refund of {charge_id} matches no recorded charge")

    # A wake follows its journal line, so only an acknowledged charge has messages.
    extra, woken, unattributed = _messages(messages, acknowledged, tally)

    worst = 0
    resets = sorted(ledger_resets)
    for key in sorted(by_pair.keys() | drains.keys()):
        worst = max(
            worst,
            _replay(
                key,
                by_pair.get(key, []),
                sorted(claims_by_pair.get(key, []), key=lambda c: c.claimed_at),
                [*drains.get(key, ()), *resets],
                refunds_by_charge,
                policy,
                tally,
            ),
        )
    violations = {kind: tally.counts[kind] for kind in VIOLATIONS}
    return Findings(
        charges=len(charge_ids),
        wakes=len(woken),
        refunds=tally.refunds,
        duplicates=extra + sum(violations.values()),
        extra_messages=extra,
        violations=violations,
        unattributed=len(unattributed),
        max_between_claims=worst,
        unseen_claims=tally.unseen,
        judged=dict(tally.judged),
        unacknowledged=unacknowledged,
        examples=tuple(tally.examples[:10]),
    )


@attrs.define
class _Tally:
    counts: Counter[str] = attrs.Factory(Counter)
    judged: Counter[str] = attrs.Factory(Counter)
    examples: list[str] = attrs.Factory(list)
    refunds: int = 0
    unseen: int = 0

    def flag(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        self.examples.append(f"{kind}: {example}")


def _from_history(
    ledger: Iterable[LedgerWrite],
    charges: Sequence[ChargeRecord],
    refunds: Sequence[RefundRecord],
    drains: Mapping[PairKey, Sequence[datetime]],
    tally: _Tally,
) -> tuple[list[ChargeRecord], list[RefundRecord], dict[PairKey, list[datetime]]]:
    """The charges, refunds and drains of the ledger's history, checked against the journals."""
    journaled: dict[ChargeId, ChargeRecord] = {}
    for charge in charges:
        if charge.id in journaled:  # two sweepers were handed one charge
            tally.flag("duplicate_charges", f"{charge.key}: {_show(charge)} journaled twice")
        journaled[charge.id] = charge
    asked: dict[ChargeId, list[RefundRecord]] = defaultdict(list)
    for refund in refunds:
        asked[refund.id].append(refund)
    written: dict[ChargeId, ChargeRecord] = {}
    refunded: list[RefundRecord] = []
    deleted: dict[PairKey, list[datetime]] = defaultdict(list)
    for w in sorted(ledger, key=lambda w: w.seq):
        if w.op == "DELETE":
            deleted[w.key].append(w.at)
        elif w.new is not None and (w.old is None or w.old[1] != w.new[1]):
            charge_id = (*w.key, *w.new)
            written[charge_id] = journaled.get(charge_id) or _unacknowledged(w, w.new)
        elif w.old is not None and w.new == (w.old[0] - 1, w.old[1]):
            charge_id = (*w.key, *w.old)
            by = asked.get(charge_id, [])
            charge = written.get(charge_id) or journaled.get(charge_id) or _unacknowledged(w, w.old)
            refunded.append(
                RefundRecord(worker=by[0].worker if by else None, nudge=charge.nudge, refunded=True)
            )
        else:
            tally.flag("phantom_write", f"{w.key}: history write {w.old} -> {w.new} (#{w.seq})")
    done = {r.id for r in refunded}
    for charge_id, charge in journaled.items():
        if charge_id not in written:
            tally.flag("phantom_write", f"{charge.key}: journaled {_show(charge)} never written")
    for charge_id, records in asked.items():
        outcomes = {r.refunded for r in records}
        if (True in outcomes) != (charge_id in done) and outcomes != {None}:
            tally.flag(
                "phantom_write", f"refund of {charge_id} journaled {outcomes}, history differs"
            )
    for key, at in drains.items():
        if len(at) > len(deleted.get(key, ())):
            tally.flag("phantom_write", f"{key}: {len(at)} drains journaled, fewer written")
    return list(written.values()), refunded, deleted


def _unacknowledged(write: LedgerWrite, row: tuple[int, datetime]) -> ChargeRecord:
    """A charge only the history knows: which todo it named was never seen by anyone."""
    nudges, stamp = row
    nudge = Nudge(
        endpoint_id=write.endpoint_id,
        queue=write.queue,
        todo=TodoRef(id="", created_at=stamp),
        number=nudges,
        charged_at=stamp,
    )
    return ChargeRecord(worker=None, now=write.xact_start, nudge=nudge)


def _messages(
    messages: Iterable[MessageRecord], charge_ids: set[ChargeId], tally: _Tally
) -> tuple[int, set[str], set[str]]:
    """One charge, one message: count distinct webhook-ids per (endpoint, queue, sent_at)."""
    stamps = {(endpoint_id, queue, at) for endpoint_id, queue, _, at in charge_ids}
    ids_per_charge: dict[tuple[str, str, datetime], set[str]] = defaultdict(set)
    woken: set[str] = set()
    unattributed: set[str] = set()
    for m in messages:
        if m.reason != "stalled":
            continue
        stamp = (m.endpoint_id, m.queue, m.sent_at)
        if stamp not in stamps:
            unattributed.add(m.webhook_id)
            continue
        ids_per_charge[stamp].add(m.webhook_id)
        if 200 <= m.answered < 300:
            woken.add(m.webhook_id)
    extra = 0
    for stamp, ids in ids_per_charge.items():
        if len(ids) > 1:
            extra += len(ids) - 1
            tally.examples.append(f"extra_messages: charge {stamp} sent as {len(ids)} messages")
    return extra, woken, unattributed


#: Event kinds in the order they apply at one instant: a boundary or a claim first.
_STARTS_OVER, _CLAIM, _CHARGE = 0, 1, 2


def _replay(
    key: PairKey,
    charges: Sequence[ChargeRecord],
    claims: Sequence[ClaimRecord],
    starts_over: Sequence[datetime],
    refunds: Mapping[ChargeId, Sequence[RefundRecord]],
    policy: PacingPolicy,
    tally: _Tally,
) -> int:
    """Replay one pair's ledger row through its charges; return its most counted charges."""
    claim_times = [c.claimed_at for c in claims]
    events: list[tuple[datetime, int, int]] = [(at, _STARTS_OVER, 0) for at in starts_over]
    events += [(c.claimed_at, _CLAIM, i) for i, c in enumerate(claims)]
    events += [(c.charged_at, _CHARGE, i) for i, c in enumerate(charges)]
    events.sort()
    # The rows the ledger may hold: one, or two while a refund's outcome is unknown
    # (the charge's own row, then the refunded one).
    rows: tuple[LedgerRow | None, ...] = (None,)
    explained: set[datetime] = set()  # claims that explained a reset
    last: ChargeRecord | None = None
    row_before = 0  # the number of the charge that wrote the row
    counted = worst = 0  # charges that count toward the cap since the last claim
    for _, kind, index in events:
        if kind == _STARTS_OVER:
            rows, counted = (None,), 0
            continue
        if kind == _CLAIM:
            counted = 0
            continue
        cur = charges[index]
        if last is not None and last.charged_at == cur.charged_at:
            tally.flag("duplicate_charges", f"{key}: {_show(cur)} repeats {_show(last)}")
            continue
        last = cur
        _check_stamp(key, cur, claim_times, tally)
        verdicts = [_judge(row, cur, claims, explained, policy) for row in rows]
        legal = [i for i, verdict in enumerate(verdicts) if verdict is None]
        if legal == [1]:
            counted -= 1  # only the refunded row allows this charge: that refund happened
        row = rows[legal[0] if legal else 0]
        window = _window(row, cur, claims)
        if not legal:
            found, why = verdicts[0] or ("", "")
            tally.flag(found, f"{key}: {_show(cur)} {why}")
        elif row is None:
            tally.judged["first"] += 1
        elif cur.number == 1 and window:
            tally.judged["reset"] += 1
            explained.update(c.claimed_at for c in window)  # a reset consumes its claims
        else:
            tally.judged["retry" if row.nudges < row_before else "step"] += 1
            tally.unseen += len(window)  # a step over claims it cannot have seen
        row_before = cur.number
        rows = _after(cur, refunds.get(cur.id, ()), tally)
        counted += 1
        if rows[0] is not None and rows[0].nudges < cur.number:
            counted -= 1  # refunded: it does not count toward the cap
        worst = max(worst, counted)
    return worst


def _after(
    cur: ChargeRecord, refunds: Sequence[RefundRecord], tally: _Tally
) -> tuple[LedgerRow | None, ...]:
    """The rows possible after ``cur``'s charge and its refund (if any)."""
    row = charge_row(cur.nudge)
    outcomes = {r.refunded for r in refunds}
    if True in outcomes:
        tally.refunds += 1
        return (refunded_row(row, cur.nudge),)
    if None in outcomes:
        return (row, refunded_row(row, cur.nudge))
    return (row,)


def _window(
    row: LedgerRow | None, cur: ChargeRecord, claims: Sequence[ClaimRecord]
) -> list[ClaimRecord]:
    """The claims after the row's stamp, up to the charge's stamp: progress for this charge."""
    if row is None:
        return []
    return [c for c in claims if row.last_nudged_at < c.claimed_at <= cur.charged_at]


def _seen(claim: ClaimRecord, cur: ChargeRecord) -> bool:
    """True when ``cur`` surely saw ``claim``: committed before its tick's instant, or absorbed."""
    committed_before = claim.seen_by is not None and claim.seen_by <= cur.now
    absorbed = cur.now < cur.charged_at == claim.claimed_at
    return committed_before or absorbed


def _judge(
    row: LedgerRow | None,
    cur: ChargeRecord,
    claims: Sequence[ClaimRecord],
    explained: set[datetime],
    policy: PacingPolicy,
) -> tuple[str, str] | None:
    """Why the ledger holding ``row`` must not have written ``cur``; None when it was legal."""
    if row is None:
        if cur.number == 1:
            return None
        return ("out_of_sequence", "on a pair with no ledger row")
    window = _window(row, cur, claims)
    if cur.number == 1 and window:
        return None  # progress: a reset
    seen = [c for c in window if _seen(c, cur)]
    if seen:
        return (
            "missed_reset",
            f"after {_show_row(row)}, though it saw the claim at {seen[0].claimed_at.isoformat()}",
        )
    if cur.number == row.nudges + 1:
        due = next_due_at(row, policy)
        if due is None:
            return ("over_cap", f"after {_show_row(row)}, past the cap of {policy.cap}")
        if cur.charged_at < due:
            return ("early", f"after {_show_row(row)}, before its due {due.isoformat()}")
        return None
    if cur.number == 1:
        before = [c.claimed_at for c in claims if c.claimed_at <= cur.charged_at]
        if before and before[-1] in explained:
            return (
                "double_reset",
                f"after {_show_row(row)}: its only claim, at {before[-1].isoformat()}, "
                "already explained a reset",
            )
        return ("reset_without_claim", f"after {_show_row(row)} with no claim since")
    return ("out_of_sequence", f"after {_show_row(row)}")


def _check_stamp(
    key: PairKey, cur: ChargeRecord, claim_times: Sequence[datetime], tally: _Tally
) -> None:
    """A charge stamps the tick's instant, or the pair's latest claim when that is later."""
    if cur.charged_at == cur.now or (not cur.acknowledged and cur.charged_at >= cur.now):
        return  # an unacknowledged charge's instant is only known not to precede ``now``
    i = bisect.bisect_left(claim_times, cur.charged_at)
    if cur.charged_at > cur.now and i < len(claim_times) and claim_times[i] == cur.charged_at:
        return
    tally.flag("bad_stamp", f"{key}: {_show(cur)} decided at {cur.now.isoformat()}")


def _show(charge: ChargeRecord) -> str:
    by = "unacknowledged" if charge.worker is None else f"w{charge.worker}"
    return f"nudge {charge.number} at {charge.charged_at.isoformat()} ({by})"


def _show_row(row: LedgerRow) -> str:
    return f"row ({row.nudges}, {row.last_nudged_at.isoformat()})"
