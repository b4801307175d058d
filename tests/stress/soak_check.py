"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

Inputs are the sweepers' journals (every charge each one got back from
``charge_due`` with the instant its tick decided at, every refund and its
compare-and-set result, every drained row), the ledger's own history (every
row write, recorded by a trigger on the ledger table with its transaction
id), the claim log's own history (every row inserted into and deleted from
``stall_nudge.claims``, with the row's identity and the transaction id,
recorded by a trigger on that table), the rows the claim log still holds at
the end, the receiver's log (every request, its ``webhook-id`` and ``meta``),
every claim the host made (the consumers' records and the final ``todos``)
and the audit sequence numbers drawn while the ledger table was dropped.
``tests/stress/test_soak_check.py`` feeds each check a planted violation, so a zero
in the soak's last line means "looked and found none".

The histories are what is judged: a tick whose connection died after its
commit charged pairs no sweeper acknowledged (nor journaled, nor woke), and
the next charge of such a pair is only legal after that one. The journals
must agree with the ledger's history, and the host's claims with the claim
log: a journaled charge or refund the history lacks, or a history write no
sweep makes, is a ``phantom_write``; a claim the log never recorded is an
``unlogged_claim``.

Theory of operation
-------------------
Both histories draw their sequence numbers from one sequence, and every
ledger write and every claim deletion happens behind the fleet's tick lock
(a tick's charging statement, a refund, the ledger's drop), so their order
is the order those transactions committed in. (A claim's log row is written
by the claiming transaction, outside the lock: its number only says it was
written before any tick that deletes it.) A tick's ledger writes and the
claim rows it deleted carry the same transaction id: the claims it absorbed
(of a pair it charged, drained or reset, or of a pair with no ledger row) or
compacted (all but the latest claim of a pair that keeps its row). A row
deleted by a tick is a drain (journaled) or a reset (a row with progress the
tick did not charge, ``stall_core.Reset``; not journaled): the replay treats
both alike, the pair starts over.

Each pair's history is replayed in that order. The replay keeps the row the
ledger must hold (``charge_row`` after a charge, ``refunded_row`` after a
refund, nothing after a drain or a ledger drop) and the pair's unabsorbed
claims (logged, not yet deleted), and judges every charge against them with
no slack; progress is what the charge's own transaction absorbed, never a
comparison of timestamps:

- with no row, only nudge 1 is legal (it may absorb claims);
- on a live row, a charge that absorbed a claim nobody had absorbed before
  is a reset: only nudge 1 is legal (``missed_reset`` otherwise);
- on a live row, a charge that absorbed none is the row's count + 1, not
  past the cap, at or after ``next_due_at`` (a refunded nudge N leaves the
  row at N - 1 with its stamp, so its retry is nudge N again one step
  later); nudge 1 there otherwise is a ``reset_without_claim``;
- a claim is absorbed at most once (a ``double_reset`` otherwise);
- a compaction keeps the pair's latest claim, so after it the pair still
  holds a claim logged before it and at or after every one it removed, and
  every later tick sees that claim: the pair's next absorption (its next
  charge, its drain, or a tick that finds it with no row) takes one of those
  claims (``compacted_last_claim`` otherwise);
- every logged claim is absorbed once or still in the log at the end
  (``lost_claim`` otherwise);
- a charge's stamp is ``charge_stamp`` of the latest claim it absorbed at
  its tick's instant (``bad_stamp`` otherwise);
- no two charges of a pair share a stamp, and a refund's compare-and-set
  matches the row the ledger holds (``unmatched_refund`` otherwise).

Each charge goes out as at most one message (one ``webhook-id``; retries
reuse it): every further one is a duplicate, and a stalled message naming
no recorded charge is unattributed.

What the log cannot say is whether a claim still unabsorbed at a charge had
committed before that charge looked (its log row may be written long before
its commit), so a charge that absorbed nothing is never blamed for a claim it
may not have seen; only after a compaction is one proven seen by every later
tick. A charge that did see a claim absorbs it, so a missed reset shows as a
step that absorbed one.

In the lean footprint no claim log is kept (``check(logged=False)``): it
must stay empty, and progress is the host's claims by ``claimed_at``. A
reset on a live row needs a claim after the row's stamp, at or before the
charge's (so one claim explains one reset: the reset's stamp is at or after
it); its stamp is the tick's instant or such a claim. An increment is never
blamed for a claim, for the same reason as above.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import attrs

from stall_core import (
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    TodoRef,
    charge_row,
    charge_stamp,
    next_due_at,
    refunded_row,
)

__all__ = [
    "VIOLATIONS",
    "ChargeRecord",
    "ClaimRecord",
    "ClaimWrite",
    "Findings",
    "LedgerWrite",
    "MessageRecord",
    "RefundRecord",
    "check",
]

PairKey = tuple[str, str]
#: The identity of one charge: its pair, number and stamp (what a refund compares).
ChargeId = tuple[str, str, int, datetime]

#: Every way the records can break the ledger's rule; each count must be 0.
VIOLATIONS = (
    "duplicate_charges",  # the pair charged twice with one stamp, or one charge journaled twice
    "reset_without_claim",  # nudge 1 on a live row whose transaction absorbed no claim
    "double_reset",  # a transaction absorbed a claim an earlier one had absorbed
    "missed_reset",  # a charge on a live row absorbed a claim, yet was not nudge 1
    "compacted_last_claim",  # a compaction removed the pair's last unabsorbed claim
    "lost_claim",  # a logged claim neither absorbed nor left in the log at the end
    "unlogged_claim",  # a claim the host made that the claim log never recorded
    "early",  # nudge count + 1 before its due
    "over_cap",  # a step past the cap
    "out_of_sequence",  # any other number
    "bad_stamp",  # a stamp other than charge_stamp(latest absorbed claim, tick's instant)
    "unmatched_refund",  # a refund whose compare-and-set matched a row the ledger did not hold
    "phantom_write",  # the journals, the host's claims and the two histories disagree
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
    """One claim the host made: its pair and ``claimed_at`` (the claim log must hold it)."""

    endpoint_id: str
    queue: str
    claimed_at: datetime

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class LedgerWrite:
    """One row write the ledger table's audit trigger recorded: (nudges, stamp) before and after.

    ``op`` is INSERT, UPDATE or DELETE; ``xid`` is the writing transaction's
    id, ``xact_start`` its start and ``at`` the instant of the write, both on
    the database's clock; ``seq`` orders it among both histories' writes.
    """

    seq: int
    op: str
    endpoint_id: str
    queue: str
    old: tuple[int, datetime] | None
    new: tuple[int, datetime] | None
    xid: int
    xact_start: datetime
    at: datetime

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class ClaimWrite:
    """One row write the claim log's audit trigger recorded.

    ``op`` is INSERT (a claim logged, in the claiming transaction) or DELETE
    (absorbed or compacted by the tick whose transaction is ``xid``);
    ``claim_id`` identifies the log's row, ``seq`` orders it among both
    histories' writes.
    """

    seq: int
    op: str
    claim_id: int
    endpoint_id: str
    queue: str
    claimed_at: datetime
    xid: int
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
    #: extra messages for one charge, plus every violation of the rules
    duplicates: int
    extra_messages: int
    #: the rules' violations, by kind (every key of VIOLATIONS)
    violations: Mapping[str, int]
    #: stalled messages whose (endpoint, queue, sent_at) matches no recorded charge
    unattributed: int
    #: the most counted charges of one pair between two resets (or drains, epochs)
    max_between_claims: int
    #: the legal charges by the rule that allowed them: first (no row), reset (it
    #: absorbed a claim), step (count + 1 at its due) and retry (a refunded number
    #: again, one step later)
    judged: Mapping[str, int] = attrs.field(factory=dict)
    #: the claim log's rows: logged, absorbed (by a charge, a drain or a tick that
    #: found no row), compacted, and left in the log at the end; "late": claims a
    #: charge or drain of a live row absorbed that are stamped at or before the row's
    #: stamp (they committed after the charge that wrote the row looked); and
    #: "late_resets": resets whose every absorbed claim is late
    claims: Mapping[str, int] = attrs.field(factory=dict)
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
    ledger: Iterable[LedgerWrite],
    claim_log: Iterable[ClaimWrite],
    claims_left: Iterable[int],
    charges: Iterable[ChargeRecord],
    messages: Iterable[MessageRecord],
    claims: Iterable[ClaimRecord],
    drains: Mapping[PairKey, Sequence[datetime]],
    ledger_resets: Sequence[int],
    policy: PacingPolicy,
    refunds: Iterable[RefundRecord] = (),
    logged: bool = True,
) -> Findings:
    """Run every invariant over one soak's records.

    ``ledger`` and ``claim_log`` are the two histories (their ``seq`` drawn
    from one sequence), ``claims_left`` the ids of the claim log's rows at
    the end, ``claims`` every claim the host made, and ``ledger_resets`` the
    sequence numbers drawn while the ledger table was dropped (under the tick
    lock): every row is gone there, so every pair starts over, as after a
    drain. The journals' ``charges``, ``refunds`` and ``drains`` are checked
    against the ledger's history, which is what is judged.

    ``logged`` False (the lean footprint): no claim log is kept, so it must
    stay empty, and progress is the host's claims by timestamp: a reset on a
    live row needs a claim after the row's stamp, at or before the charge's.
    """
    tally = _Tally()
    charges = list(charges)
    acknowledged = {c.id for c in charges}
    writes = _from_history(ledger, charges, list(refunds), drains, tally)
    log = sorted(claim_log, key=lambda c: c.seq)
    claims = list(claims)
    if logged:
        left = _check_log(log, claims, claims_left, tally)
    else:
        left = len(list(claims_left))
        for c in log[:1]:
            tally.flag("phantom_write", f"{c.key}: the lean footprint logged claim #{c.claim_id}")
        if left:
            tally.flag("phantom_write", f"the lean footprint's claim log holds {left} rows")
    by_pair: dict[PairKey, list[datetime]] = defaultdict(list)
    for claim in claims:
        by_pair[claim.key].append(claim.claimed_at)
    # A wake follows its journal line, so only an acknowledged charge has messages.
    extra, woken, unattributed = _messages(messages, acknowledged, tally)
    worst = 0
    for key, events in sorted(_events(writes, log, ledger_resets, tally).items()):
        host = None if logged else sorted(by_pair.get(key, ()))
        worst = max(worst, _replay(key, events, policy, tally, host))
    violations = {kind: tally.counts[kind] for kind in VIOLATIONS}
    charged = [w.charge for w in writes if w.kind == "charge" and w.charge is not None]
    return Findings(
        charges=len(charged),
        wakes=len(woken),
        refunds=tally.refunds,
        duplicates=extra + sum(violations.values()),
        extra_messages=extra,
        violations=violations,
        unattributed=len(unattributed),
        max_between_claims=worst,
        judged=dict(tally.judged),
        claims={
            "logged": sum(1 for c in log if c.op == "INSERT"),
            "absorbed": tally.claims["absorbed"],
            "compacted": tally.claims["compacted"],
            "left": left,
            "late": tally.claims["late"],
            "late_resets": tally.claims["late_resets"],
        },
        unacknowledged=sum(1 for c in charged if not c.acknowledged),
        examples=tuple(tally.examples[:10]),
    )


@attrs.define
class _Tally:
    counts: Counter[str] = attrs.Factory(Counter)
    judged: Counter[str] = attrs.Factory(Counter)
    claims: Counter[str] = attrs.Factory(Counter)
    examples: list[str] = attrs.Factory(list)
    refunds: int = 0

    def flag(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        self.examples.append(f"{kind}: {example}")


@attrs.frozen
class _Write:
    """A ledger write, classified: a charge (``charge`` the one written), a refund
    (``charge`` the one refunded) or a drain."""

    write: LedgerWrite
    kind: str
    charge: ChargeRecord | None = None


def _from_history(
    ledger: Iterable[LedgerWrite],
    charges: Sequence[ChargeRecord],
    refunds: Sequence[RefundRecord],
    drains: Mapping[PairKey, Sequence[datetime]],
    tally: _Tally,
) -> list[_Write]:
    """The charges, refunds and drains of the ledger's history, checked against the journals."""
    journaled: dict[ChargeId, ChargeRecord] = {}
    for charge in charges:
        if charge.id in journaled:  # two sweepers were handed one charge
            tally.flag("duplicate_charges", f"{charge.key}: {_show(charge)} journaled twice")
        journaled[charge.id] = charge
    asked: dict[ChargeId, list[RefundRecord]] = defaultdict(list)
    for refund in refunds:
        asked[refund.id].append(refund)
    writes: list[_Write] = []
    written: dict[ChargeId, ChargeRecord] = {}
    refunded: set[ChargeId] = set()
    deleted: Counter[PairKey] = Counter()
    for w in sorted(ledger, key=lambda w: w.seq):
        if w.op == "DELETE" and w.old is not None and w.new is None:
            deleted[w.key] += 1
            writes.append(_Write(w, "drain"))
        elif w.new is not None and (w.old is None or w.old[1] != w.new[1]):
            charge_id = (*w.key, *w.new)
            written[charge_id] = journaled.get(charge_id) or _unacknowledged(w, w.new)
            writes.append(_Write(w, "charge", written[charge_id]))
        elif w.old is not None and w.new == (w.old[0] - 1, w.old[1]):
            charge_id = (*w.key, *w.old)
            refunded.add(charge_id)
            charge = written.get(charge_id) or journaled.get(charge_id) or _unacknowledged(w, w.old)
            writes.append(_Write(w, "refund", charge))
        else:
            tally.flag("phantom_write", f"{w.key}: history write {w.old} -> {w.new} (#{w.seq})")
    for charge_id, charge in journaled.items():
        if charge_id not in written:
            tally.flag("phantom_write", f"{charge.key}: journaled {_show(charge)} never written")
    for charge_id, records in asked.items():
        outcomes = {r.refunded for r in records}
        if (True in outcomes) != (charge_id in refunded) and outcomes != {None}:
            tally.flag(
                "phantom_write", f"refund of {charge_id} journaled {outcomes}, history differs"
            )
    for key, at in drains.items():
        if len(at) > deleted[key]:
            tally.flag("phantom_write", f"{key}: {len(at)} drains journaled, fewer written")
    return writes


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


def _check_log(
    log: Sequence[ClaimWrite],
    claims: Iterable[ClaimRecord],
    claims_left: Iterable[int],
    tally: _Tally,
) -> int:
    """The claim log against itself, its final rows and the host's claims; returns rows left.

    Every logged claim is deleted or still in the log at the end, never both;
    the log is only ever inserted into (once per row) and deleted from (after
    the insert); and it logged exactly the claims the host made. A row
    deleted twice is the replay's (``double_reset``).
    """
    inserted: dict[int, ClaimWrite] = {}
    deleted: set[int] = set()
    for c in log:
        if c.op == "INSERT":
            if c.claim_id in inserted:
                tally.flag("phantom_write", f"{c.key}: claim #{c.claim_id} logged twice")
            inserted[c.claim_id] = c
        elif c.op == "DELETE":
            if c.claim_id not in inserted:
                tally.flag("phantom_write", f"{c.key}: claim #{c.claim_id} deleted, never logged")
            deleted.add(c.claim_id)
        else:
            tally.flag("phantom_write", f"{c.key}: claim #{c.claim_id} written by {c.op}")
    left = set(claims_left)
    for claim_id, c in inserted.items():
        if claim_id in deleted and claim_id in left:
            tally.flag("phantom_write", f"{c.key}: claim #{claim_id} deleted, yet left in the log")
        elif claim_id not in deleted and claim_id not in left:
            tally.flag(
                "lost_claim",
                f"{c.key}: claim #{claim_id} at {c.claimed_at.isoformat()} "
                "neither absorbed nor left in the log",
            )
    for claim_id in sorted(left - inserted.keys()):
        tally.flag("phantom_write", f"claim #{claim_id} left in the log, never logged")
    made = Counter((c.key, c.claimed_at) for c in claims)
    logged = Counter((c.key, c.claimed_at) for c in inserted.values())
    for (key, at), missing in sorted((made - logged).items()):
        for _ in range(missing):
            tally.flag("unlogged_claim", f"{key}: the claim at {at.isoformat()} was never logged")
    for (key, at), extra in sorted((logged - made).items()):
        tally.flag(
            "phantom_write", f"{key}: {extra} logged claim(s) at {at.isoformat()} never made"
        )
    return len(left)


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


#: A pair's events: the ledger dropped, a claim logged, one transaction's writes.
_DROPPED, _LOGGED, _TRANSACTION = 0, 1, 2


@attrs.frozen
class _Event:
    """One step of a pair's history, at ``seq``.

    A transaction holds the pair's ledger write (if any) and the pair's claim
    rows it deleted; a logged claim holds its INSERT.
    """

    seq: int
    kind: int
    write: _Write | None = None
    claims: tuple[ClaimWrite, ...] = ()


def _events(
    writes: Sequence[_Write],
    log: Sequence[ClaimWrite],
    ledger_resets: Sequence[int],
    tally: _Tally,
) -> dict[PairKey, list[_Event]]:
    """Each pair's history in commit order: its writes grouped by transaction."""
    by_xact: dict[tuple[PairKey, int], tuple[list[_Write], list[ClaimWrite]]] = defaultdict(
        lambda: ([], [])
    )
    events: dict[PairKey, list[_Event]] = defaultdict(list)
    for w in writes:
        by_xact[w.write.key, w.write.xid][0].append(w)
    for c in log:
        if c.op == "INSERT":
            events[c.key].append(_Event(c.seq, _LOGGED, claims=(c,)))
        elif c.op == "DELETE":
            by_xact[c.key, c.xid][1].append(c)
    for (key, xid), (ledger_writes, deletions) in by_xact.items():
        for w in ledger_writes[1:]:
            tally.flag(
                "phantom_write", f"{key}: transaction {xid} wrote the row again (#{w.write.seq})"
            )
        seq = min([w.write.seq for w in ledger_writes[:1]] + [c.seq for c in deletions])
        first = ledger_writes[0] if ledger_writes else None
        events[key].append(_Event(seq, _TRANSACTION, write=first, claims=tuple(deletions)))
    for pair_events in events.values():
        pair_events += [_Event(seq, _DROPPED) for seq in ledger_resets]
        pair_events.sort(key=lambda e: (e.seq, e.kind))
    return events


@attrs.define
class _Pair:
    """What the replay of one pair holds between two events."""

    key: PairKey
    #: the row the ledger holds
    row: LedgerRow | None = None
    #: logged claims no transaction deleted yet, by id
    unabsorbed: dict[int, datetime] = attrs.Factory(dict)
    #: claims a transaction deleted
    absorbed: set[int] = attrs.Factory(set)
    #: after a compaction: the claims the one it kept is among (those logged before it,
    #: still unabsorbed, at or after every claim it and earlier ones removed); the
    #: pair's next absorption must take one of them, and every tick after the
    #: compaction sees the one kept
    kept: frozenset[int] | None = None
    #: the latest claim the compactions since the last absorption removed
    removed_up_to: datetime | None = None
    last: ChargeRecord | None = None
    #: the number of the charge that wrote the row
    row_before: int = 0
    #: charges that count toward the cap since the last reset (or drain, epoch)
    counted: int = 0

    def take(
        self, deletions: Sequence[ClaimWrite], tally: _Tally
    ) -> tuple[list[ClaimWrite], list[ClaimWrite]]:
        """Delete ``deletions`` from the log; return those nobody had absorbed, and the others."""
        fresh = [c for c in deletions if c.claim_id in self.unabsorbed]
        again = [c for c in deletions if c.claim_id in self.absorbed]
        for c in fresh:
            del self.unabsorbed[c.claim_id]
            self.absorbed.add(c.claim_id)
        if again:
            tally.flag(
                "double_reset",
                f"{self.key}: claim #{again[0].claim_id} at {again[0].claimed_at.isoformat()} "
                f"absorbed again by transaction {again[0].xid}",
            )
        return fresh, again

    def absorb(self, fresh: Sequence[ClaimWrite], by: str, tally: _Tally) -> None:
        """An absorption: it must take the claim the last compaction kept."""
        if self.row is not None:
            # Stamped at or before the row's stamp: the claim committed after the charge
            # that wrote the row looked (its transaction began before that charge read the
            # time), so it is progress now, for this charge or drain.
            stamp = self.row.last_nudged_at
            tally.claims["late"] += sum(1 for c in fresh if c.claimed_at <= stamp)
        if self.kept is not None and not self.kept & {c.claim_id for c in fresh}:
            tally.flag(
                "compacted_last_claim",
                f"{self.key}: {by} absorbed none of the claims {sorted(self.kept)}, "
                "one of which a compaction kept",
            )
        self.kept = self.removed_up_to = None
        tally.claims["absorbed"] += len(fresh)

    def compact(self, fresh: Sequence[ClaimWrite], tally: _Tally) -> None:
        """A compaction keeps the pair's latest claim: one at or after every one it removed."""
        if not fresh:
            return  # it deleted only claims absorbed before: a double reset, flagged
        tally.claims["compacted"] += len(fresh)
        removed = max(c.claimed_at for c in fresh)
        if self.removed_up_to is not None:
            removed = max(removed, self.removed_up_to)
        kept = frozenset(i for i, at in self.unabsorbed.items() if at >= removed)
        if kept:
            self.kept, self.removed_up_to = kept, removed
            return
        tally.flag(
            "compacted_last_claim",
            f"{self.key}: a compaction (transaction {fresh[0].xid}) left no claim at or "
            f"after {removed.isoformat()}",
        )
        self.kept = self.removed_up_to = None

    def follow(self, write: LedgerWrite, tally: _Tally) -> None:
        """The row before ``write`` must be the replay's; the replay follows the history."""
        if write.old == _tuple(self.row):
            return
        tally.flag(
            "phantom_write",
            f"{self.key}: history #{write.seq} found {write.old}, "
            f"the replay holds {_tuple(self.row)}",
        )
        self.row = _row(self.key, write.old)


def _replay(
    key: PairKey,
    events: Sequence[_Event],
    policy: PacingPolicy,
    tally: _Tally,
    host: Sequence[datetime] | None = None,
) -> int:
    """Replay one pair's history; return its most counted charges between resets.

    ``host``: the pair's claims by timestamp, where no claim log is kept (lean).
    """
    pair = _Pair(key)
    worst = 0
    for event in events:
        if event.kind == _DROPPED:
            pair.row, pair.counted = None, 0
            continue
        if event.kind == _LOGGED:
            (claim,) = event.claims
            pair.unabsorbed[claim.claim_id] = claim.claimed_at
            continue
        fresh, again = pair.take(event.claims, tally)
        w = event.write
        if w is None:  # a tick that neither charged nor drained the pair
            if pair.row is None:
                pair.absorb(fresh, f"a tick with no row (transaction {event.claims[0].xid})", tally)
            else:
                pair.compact(fresh, tally)
        elif w.kind == "drain":
            pair.follow(w.write, tally)
            pair.absorb(fresh, f"the drain #{w.write.seq}", tally)
            pair.row, pair.counted = None, 0
        elif w.kind == "refund":
            _refund(pair, w, fresh, tally)
        else:
            _charge(pair, w, event.claims, fresh, bool(again), policy, tally, host)
            worst = max(worst, pair.counted)
    if pair.kept is not None and not pair.kept & pair.unabsorbed.keys():
        tally.flag(
            "compacted_last_claim",
            f"{key}: none of the claims {sorted(pair.kept)} a compaction kept one of is left",
        )
    return worst


def _refund(pair: _Pair, w: _Write, fresh: Sequence[ClaimWrite], tally: _Tally) -> None:
    """A refund's compare-and-set must match the row the ledger holds (its charge's)."""
    assert w.charge is not None  # a refund names the charge it refunds
    if fresh:
        tally.flag("phantom_write", f"{pair.key}: refund #{w.write.seq} absorbed claims")
    refunded = refunded_row(pair.row, w.charge.nudge)
    if refunded is None:
        tally.flag(
            "unmatched_refund",
            f"{pair.key}: refund of {_show(w.charge)}, the row is {_tuple(pair.row)}",
        )
        pair.row = _row(pair.key, w.write.new)
        return
    tally.refunds += 1
    pair.row = refunded
    pair.counted -= 1  # the refunded charge (the row's) does not count toward the cap


def _charge(
    pair: _Pair,
    w: _Write,
    deletions: Sequence[ClaimWrite],
    fresh: Sequence[ClaimWrite],
    again: bool,
    policy: PacingPolicy,
    tally: _Tally,
    host: Sequence[datetime] | None = None,
) -> None:
    """Judge one charge against the row and its progress: the claims its transaction
    absorbed, or (``host``, lean) the claims after the row's stamp up to the charge's."""
    cur = w.charge
    assert cur is not None  # a charge write carries its charge
    if pair.last is not None and pair.last.charged_at == cur.charged_at:
        tally.flag("duplicate_charges", f"{pair.key}: {_show(cur)} repeats {_show(pair.last)}")
        return
    pair.last = cur
    pair.follow(w.write, tally)
    row = pair.row
    if host is None:
        progress = [c.claimed_at for c in fresh]
        stamped = [c.claimed_at for c in deletions]
    else:
        # Whether a claim at or before the tick's instant was visible to it is unknown,
        # so only a reset is judged by them: it needs one after the row's stamp.
        after = row.last_nudged_at if row is not None else cur.charged_at
        stamped = [at for at in host if after < at <= cur.charged_at]
        progress = stamped if cur.number == 1 else []
    _check_stamp(pair.key, cur, w.write, stamped, tally)
    verdict = _judge(row, cur, progress, policy)
    if verdict is not None:
        found, why = verdict
        if not (again and found == "reset_without_claim"):  # flagged: a double reset
            tally.flag(found, f"{pair.key}: {_show(cur)} {why}")
    elif row is None:
        tally.judged["first"] += 1
    elif progress:
        tally.judged["reset"] += 1
        # Every claim it absorbed is stamped at or before the row's stamp: a reset that
        # timestamps alone ("a claim after the last nudge") would call unexplained.
        tally.claims["late_resets"] += all(at <= row.last_nudged_at for at in progress)
    else:
        tally.judged["retry" if row.nudges < pair.row_before else "step"] += 1
    pair.absorb(fresh, _show(cur), tally)
    if row is None or progress:
        pair.counted = 0
    pair.row_before = cur.number
    pair.row = charge_row(cur.nudge)
    pair.counted += 1


def _judge(
    row: LedgerRow | None,
    cur: ChargeRecord,
    fresh: Sequence[datetime],
    policy: PacingPolicy,
) -> tuple[str, str] | None:
    """Why the ledger holding ``row`` must not have written ``cur``; None when it was legal."""
    if row is None:
        if cur.number == 1:
            return None
        return ("out_of_sequence", "on a pair with no ledger row")
    if fresh:
        if cur.number == 1:
            return None  # progress: a reset
        return (
            "missed_reset",
            f"after {_show_row(row)}, though it absorbed the claim at {fresh[0].isoformat()}",
        )
    if cur.number == row.nudges + 1:
        due = next_due_at(row, policy)
        if due is None:
            return ("over_cap", f"after {_show_row(row)}, past the cap of {policy.cap}")
        if cur.charged_at < due:
            return ("early", f"after {_show_row(row)}, before its due {due.isoformat()}")
        return None
    if cur.number == 1:
        return ("reset_without_claim", f"after {_show_row(row)}: it absorbed no claim")
    return ("out_of_sequence", f"after {_show_row(row)}")


def _check_stamp(
    key: PairKey,
    cur: ChargeRecord,
    write: LedgerWrite,
    absorbed: Sequence[datetime],
    tally: _Tally,
) -> None:
    """A charge stamps ``charge_stamp`` of the latest claim it absorbed, at its tick's instant.

    An unacknowledged charge's instant is unknown, but its tick read it in the
    writing transaction before the write: between ``xact_start`` and ``at``.
    """
    state = PairState(
        endpoint_id=key[0],
        queue=key[1],
        oldest=None,
        endpoint_active=True,
        has_receiver=True,
        progress_at=max(absorbed, default=None),
    )
    stamp = cur.charged_at
    if cur.acknowledged:
        if stamp == charge_stamp(state, cur.now):
            return
    elif (write.xact_start <= stamp <= write.at and charge_stamp(state, stamp) == stamp) or (
        charge_stamp(state, write.xact_start) == stamp
    ):
        return
    tally.flag("bad_stamp", f"{key}: {_show(cur)} decided at {cur.now.isoformat()}")


def _tuple(row: LedgerRow | None) -> tuple[int, datetime] | None:
    return None if row is None else (row.nudges, row.last_nudged_at)


def _row(key: PairKey, values: tuple[int, datetime] | None) -> LedgerRow | None:
    if values is None:
        return None
    return LedgerRow(endpoint_id=key[0], queue=key[1], nudges=values[0], last_nudged_at=values[1])


def _show(charge: ChargeRecord) -> str:
    by = "unacknowledged" if charge.worker is None else f"w{charge.worker}"
    return f"nudge {charge.number} at {charge.charged_at.isoformat()} ({by})"


def _show_row(row: LedgerRow) -> str:
    return f"row ({row.nudges}, {row.last_nudged_at.isoformat()})"
