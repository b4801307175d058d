"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

Inputs are the sweepers' journals (every charge each one got back from
``charge_due`` with the instant its tick decided at, every refund and its
compare-and-set result, every drained row), the ledger's own history (every
row write, with the row before and after it, the named todo and the progress
a reset kept included, recorded by a trigger on the ledger table with its
transaction's id, start and the instant of the write), the host's own record
of every claim and requeue it made (the todo, its ``claimed_at``, and
database-clock reads before the statement and after its commit), the
receiver's log (every request, its ``webhook-id`` and ``meta``) and the audit
sequence numbers drawn while the ledger table was dropped.
``tests/stress/test_soak_check.py`` feeds each check a planted violation next
to a clean twin, so a zero in the soak's last line means "looked and found none".

The ledger's history is what is judged: a tick whose connection died after
its commit charged pairs no sweeper acknowledged (nor journaled, nor woke),
and the next charge of such a pair is only legal after that one. The
journals must agree with the history: a journaled charge or refund the
history lacks, or a history write no sweep makes, is a ``phantom_write``.

Theory of operation
-------------------
Every write to the ledger happens behind the fleet's tick lock (a tick's
statement, a refund, the table's drop), so the history's order is commit
order. Each pair's history is replayed in it, holding the row the ledger
must hold (``charge_row`` after a charge, ``reset_row`` after a reset,
``refunded_row`` after a refund, nothing after a drain or a drop), and each
write is judged with the core's rule against that row and what the tick
that wrote it may have seen of the host.

A tick's snapshot lies between the instant it decided at (the journal's
``now``; for a charge no sweeper acknowledged, its transaction's start) and
the instant it wrote (the trigger's clock). A host statement committed before
the snapshot if its clock read after the commit (``ub``) is earlier than
``now``, and may have if its read before (``lb``) is earlier than the write;
one todo's claims and requeues happen in turn. From that the checker has the
least and the most the tick can have read: the pair's ``latest_claim``, and
whether the todo the row names ``has_departed``. ``made_progress`` on the
least is progress the tick surely saw; on the most, progress it may have
seen (the rule is monotone in both). The only latitude is a host statement's
own commit span, read off the database clock around it: nothing is widened
by a tolerance, and a write neither bound explains is flagged
(``tests/stress/test_soak_check.py`` plants claims on each side of the bounds).

- with no row, only nudge 1 is legal;
- a charge that surely saw progress is nudge 1 (``missed_reset`` otherwise);
- nudge 1 over a live row needs progress the tick may have seen
  (``reset_without_progress``; ``double_reset`` when the row it replaces was
  itself written by a reset: one claim or departure used twice);
- otherwise the row's count + 1, not past the cap, at or after
  ``next_due_at`` (a refunded nudge N leaves the row at N - 1 with its stamp,
  so its retry is nudge N again one step later): ``early``, ``over_cap``,
  ``out_of_sequence``;
- the stamp is ``charge_stamp`` of a ``latest_claim`` the tick may have read,
  at its instant (``bad_stamp``);
- a reset (count 0, progress kept: the tick did not charge a pair with
  progress) needs progress the tick may have seen, and keeps the row's stamp
  and named todo (``reset_row``);
- no two charges of a pair share a stamp, and a refund's compare-and-set
  matches the row the ledger holds (``unmatched_refund`` otherwise).

Each charge goes out as at most one message (one ``webhook-id``; retries
reuse it): every further one is a duplicate, and a stalled message naming
no recorded charge is unattributed.
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
    made_progress,
    next_due_at,
    refunded_row,
    reset_row,
)

__all__ = [
    "VIOLATIONS",
    "ChargeRecord",
    "Findings",
    "HostWrite",
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
    "reset_without_progress",  # nudge 1 (or a reset) on a live row with no progress to see
    "double_reset",  # the same, on a row a reset wrote: one claim or departure used twice
    "missed_reset",  # a charge that surely saw progress, yet was not nudge 1
    "early",  # nudge count + 1 before its due
    "over_cap",  # a step past the cap
    "out_of_sequence",  # any other number
    "bad_stamp",  # a stamp charge_stamp gives for no latest claim the tick may have read
    "unmatched_refund",  # a refund whose compare-and-set matched a row the ledger did not hold
    "phantom_write",  # the journals and the ledger's history disagree, or a write no rule makes
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
class HostWrite:
    """One claim or requeue the host made of a todo of the pair.

    ``claimed_at`` is the claim's stamp (a requeue keeps it). ``lb`` and ``ub``
    are database-clock reads before the statement began and after it
    committed; None when the host could not record them (a claim found only
    in the final table): such a write may have been seen by any tick, and
    surely by none.
    """

    op: str  # "claim" | "requeue"
    endpoint_id: str
    queue: str
    todo_id: str
    claimed_at: datetime
    lb: datetime | None = None
    ub: datetime | None = None

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class LedgerWrite:
    """One row write the ledger table's audit trigger recorded: the row before and after.

    ``op`` is INSERT, UPDATE or DELETE; ``xid`` is the writing transaction's
    id, ``xact_start`` its start and ``at`` the instant of the write, both on
    the database's clock; ``seq`` orders it among the history's writes.
    """

    seq: int
    op: str
    endpoint_id: str
    queue: str
    old: LedgerRow | None
    new: LedgerRow | None
    xid: int
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
    #: extra messages for one charge, plus every violation of the rules
    duplicates: int
    extra_messages: int
    #: the rules' violations, by kind (every key of VIOLATIONS)
    violations: Mapping[str, int]
    #: stalled messages whose (endpoint, queue, sent_at) matches no recorded charge
    unattributed: int
    #: the most counted charges of one pair between two resets (or drains, epochs)
    max_between_claims: int
    #: the legal writes by the rule that allowed them: first (no row), reset (nudge 1
    #: after progress), step (count + 1 at its due), retry (a refunded number again, one
    #: step later), kept (a reset that kept progress for a charge to come) and drain
    judged: Mapping[str, int] = attrs.field(factory=dict)
    #: what showed the progress of each reset and kept reset, where the clocks tell:
    #: by_claim (a claim stamped after the last nudge it surely saw), by_departure (only
    #: the named todo's departure), by_kept (progress an earlier reset kept)
    progress: Mapping[str, int] = attrs.field(factory=dict)
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
    charges: Iterable[ChargeRecord],
    messages: Iterable[MessageRecord],
    host: Iterable[HostWrite],
    drains: Mapping[PairKey, Sequence[datetime]],
    ledger_resets: Sequence[int],
    policy: PacingPolicy,
    refunds: Iterable[RefundRecord] = (),
) -> Findings:
    """Run every invariant over one soak's records.

    ``ledger`` is the history, ``host`` every claim and requeue the host made,
    and ``ledger_resets`` the sequence numbers drawn while the ledger table
    was dropped (under the tick lock): every row is gone there, so every pair
    starts over, as after a drain. The journals' ``charges``, ``refunds`` and
    ``drains`` are checked against the history, which is what is judged.
    """
    tally = _Tally()
    charges = list(charges)
    acknowledged = {c.id for c in charges}
    writes = _from_history(ledger, charges, list(refunds), drains, tally)
    by_pair: dict[PairKey, list[HostWrite]] = defaultdict(list)
    for event in host:
        by_pair[event.key].append(event)
    # A wake follows its journal line, so only an acknowledged charge has messages.
    extra, woken, unattributed = _messages(messages, acknowledged, tally)
    pairs: dict[PairKey, list[_Write]] = defaultdict(list)
    for w in writes:
        pairs[w.write.key].append(w)
    worst = 0
    for key, pair_writes in sorted(pairs.items()):
        seen = _Host(by_pair.get(key, []))
        worst = max(worst, _replay(key, pair_writes, ledger_resets, seen, policy, tally))
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
        progress=dict(tally.progress),
        unacknowledged=sum(1 for c in charged if not c.acknowledged),
        examples=tuple(tally.examples[:10]),
    )


@attrs.define
class _Tally:
    counts: Counter[str] = attrs.Factory(Counter)
    judged: Counter[str] = attrs.Factory(Counter)
    progress: Counter[str] = attrs.Factory(Counter)
    examples: list[str] = attrs.Factory(list)
    refunds: int = 0

    def flag(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        self.examples.append(f"{kind}: {example}")


@attrs.frozen
class _Write:
    """A ledger write, classified: a charge (``charge`` the one written), a reset, a
    refund (``charge`` the one refunded) or a drain."""

    write: LedgerWrite
    kind: str
    charge: ChargeRecord | None = None


def _is_reset(old: LedgerRow, new: LedgerRow) -> bool:
    """The write ``reset_row`` makes: count 0, progress kept, stamp and named todo as they were."""
    return (
        old.progressed_at is None
        and new.progressed_at is not None
        and new == reset_row(old, new.progressed_at)
    )


def _from_history(
    ledger: Iterable[LedgerWrite],
    charges: Sequence[ChargeRecord],
    refunds: Sequence[RefundRecord],
    drains: Mapping[PairKey, Sequence[datetime]],
    tally: _Tally,
) -> list[_Write]:
    """The charges, resets, refunds and drains of the history, checked against the journals."""
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
        old, new = w.old, w.new
        if w.op == "DELETE" and old is not None and new is None:
            deleted[w.key] += 1
            writes.append(_Write(w, "drain"))
        elif new is not None and (old is None or old.last_nudged_at != new.last_nudged_at):
            charge_id = (*w.key, new.nudges, new.last_nudged_at)
            written[charge_id] = journaled.get(charge_id) or _unacknowledged(w, new)
            writes.append(_Write(w, "charge", written[charge_id]))
        elif old is not None and new is not None and _is_reset(old, new):
            writes.append(_Write(w, "reset"))
        elif old is not None and new == attrs.evolve(old, nudges=old.nudges - 1):
            charge_id = (*w.key, old.nudges, old.last_nudged_at)
            refunded.add(charge_id)
            charge = written.get(charge_id) or journaled.get(charge_id) or _unacknowledged(w, old)
            writes.append(_Write(w, "refund", charge))
        else:
            tally.flag(
                "phantom_write",
                f"{w.key}: history write {_show_row(old)} -> {_show_row(new)} (#{w.seq})",
            )
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


def _unacknowledged(write: LedgerWrite, row: LedgerRow) -> ChargeRecord:
    """A charge only the history knows: it named the todo the history shows."""
    nudge = Nudge(
        endpoint_id=write.endpoint_id,
        queue=write.queue,
        todo=TodoRef(id=row.named_todo or "", created_at=row.last_nudged_at),
        number=row.nudges,
        charged_at=row.last_nudged_at,
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


@attrs.frozen
class _Seen:
    """The least and the most a tick can have read of a pair's claims and its named todo."""

    least_claim: datetime | None
    most_claim: datetime | None
    surely_departed: bool
    maybe_departed: bool
    #: the stamps of claims the tick may have read, at or after the least latest claim
    stamps: tuple[datetime, ...]

    def state(self, key: PairKey, *, most: bool) -> PairState:
        """The pair as the core reads it, on the most or the least the tick can have seen."""
        return PairState(
            endpoint_id=key[0],
            queue=key[1],
            oldest=None,
            endpoint_active=True,
            has_receiver=True,
            latest_claim=self.most_claim if most else self.least_claim,
            named_departed=self.maybe_departed if most else self.surely_departed,
        )


class _Host:
    """One pair's claims and requeues, and what a tick in a window may have read of them."""

    def __init__(self, events: Sequence[HostWrite]) -> None:
        self._by_todo: dict[str, list[HostWrite]] = defaultdict(list)
        for e in sorted(events, key=lambda e: (e.lb is None, e.lb or e.claimed_at)):
            self._by_todo[e.todo_id].append(e)

    @staticmethod
    def _prefixes(events: Sequence[HostWrite], lo: datetime, hi: datetime) -> range:
        """How many of one todo's writes (made in turn) a snapshot in [lo, hi] may hold."""
        surely = sum(1 for e in events if e.ub is not None and e.ub < lo)
        maybe = sum(1 for e in events if e.lb is None or e.lb < hi)
        return range(surely, max(surely, maybe) + 1)

    def seen(self, named: str | None, lo: datetime, hi: datetime) -> _Seen:
        least: datetime | None = None
        most: datetime | None = None
        stamps: list[datetime] = []
        for events in self._by_todo.values():
            claims = [e for e in events if e.op == "claim"]
            values = [
                claims[n - 1].claimed_at if n else None for n in self._prefixes(claims, lo, hi)
            ]
            known = [v for v in values if v is not None]
            if None not in values:
                low = min(known)
                least = low if least is None else max(least, low)
            if known:
                high = max(known)
                most = high if most is None else max(most, high)
            stamps += known
        departed: set[bool] = {False}
        if named is not None and named in self._by_todo:
            events = self._by_todo[named]
            departed = {
                n > 0 and events[n - 1].op == "claim" for n in self._prefixes(events, lo, hi)
            }
        return _Seen(
            least_claim=least,
            most_claim=most,
            surely_departed=all(departed),
            maybe_departed=any(departed),
            stamps=tuple(sorted(s for s in stamps if least is None or s >= least)),
        )


@attrs.define
class _Pair:
    """What the replay of one pair holds between two writes."""

    key: PairKey
    host: _Host
    #: the row the ledger holds
    row: LedgerRow | None = None
    #: whether that row was written by a reset (a nudge 1 after progress, or a kept reset)
    by_reset: bool = False
    last: ChargeRecord | None = None
    #: the number of the charge that wrote the row
    row_before: int = 0
    #: charges that count toward the cap since the last reset (or drain, epoch)
    counted: int = 0

    def follow(self, write: LedgerWrite, tally: _Tally) -> None:
        """The row before ``write`` must be the replay's; the replay follows the history."""
        if write.old == self.row:
            return
        tally.flag(
            "phantom_write",
            f"{self.key}: history #{write.seq} found {_show_row(write.old)}, "
            f"the replay holds {_show_row(self.row)}",
        )
        self.row = write.old


def _replay(
    key: PairKey,
    writes: Sequence[_Write],
    ledger_resets: Sequence[int],
    host: _Host,
    policy: PacingPolicy,
    tally: _Tally,
) -> int:
    """Replay one pair's history; return its most counted charges between resets."""
    pair = _Pair(key, host)
    worst = 0
    drops = sorted(ledger_resets)
    for w in writes:
        while drops and drops[0] < w.write.seq:
            drops.pop(0)
            pair.row, pair.counted, pair.by_reset = None, 0, False
        if w.kind == "refund":
            _refund(pair, w, tally)  # its compare-and-set is judged against the replay's row
            continue
        pair.follow(w.write, tally)
        if w.kind == "drain":
            tally.judged["drain"] += 1
            pair.row, pair.counted, pair.by_reset = None, 0, False
        elif w.kind == "reset":
            _reset(pair, w.write, policy, tally)
        else:
            _charge(pair, w, policy, tally)
            worst = max(worst, pair.counted)
    return worst


def _window(w: LedgerWrite, charge: ChargeRecord | None) -> tuple[datetime, datetime]:
    """When the writing tick's snapshot was taken: from its ``now`` (or its start) to the write."""
    lo = charge.now if charge is not None and charge.acknowledged else w.xact_start
    return lo, w.at


def _progress(pair: _Pair, seen: _Seen) -> tuple[bool, bool, str]:
    """Progress the tick surely saw, may have seen, and what showed it (where the clocks tell)."""
    row = pair.row
    surely = made_progress(seen.state(pair.key, most=False), row)
    maybe = made_progress(seen.state(pair.key, most=True), row)
    shown = ""
    if row is not None and surely:
        if row.progressed_at is not None:
            shown = "by_kept"
        elif seen.least_claim is not None and seen.least_claim > row.last_nudged_at:
            shown = "by_claim"
        elif seen.most_claim is None or seen.most_claim <= row.last_nudged_at:
            shown = "by_departure"
    return surely, maybe, shown


def _no_progress(pair: _Pair, what: str, tally: _Tally) -> None:
    kind = "double_reset" if pair.by_reset else "reset_without_progress"
    tally.flag(kind, f"{pair.key}: {what} after {_show_row(pair.row)}, which saw no progress")


def _reset(pair: _Pair, w: LedgerWrite, policy: PacingPolicy, tally: _Tally) -> None:
    """A reset keeps progress for a charge to come: the tick may have seen some."""
    assert w.new is not None  # _is_reset holds: a row ...
    assert w.new.progressed_at is not None  # ... that keeps progress
    seen = pair.host.seen(pair.row.named_todo if pair.row else None, w.xact_start, w.at)
    _, maybe, shown = _progress(pair, seen)
    if not maybe:
        _no_progress(pair, f"a reset (#{w.seq})", tally)
    elif not w.xact_start <= w.new.progressed_at <= w.at:
        tally.flag("bad_stamp", f"{pair.key}: reset #{w.seq} kept progress outside its tick")
    else:
        tally.judged["kept"] += 1
        if shown:
            tally.progress[shown] += 1
    pair.row, pair.counted, pair.by_reset = w.new, 0, True


def _refund(pair: _Pair, w: _Write, tally: _Tally) -> None:
    """A refund's compare-and-set must match the row the ledger holds (its charge's)."""
    assert w.charge is not None  # a refund names the charge it refunds
    refunded = refunded_row(pair.row, w.charge.nudge)
    if refunded is None:
        tally.flag(
            "unmatched_refund",
            f"{pair.key}: refund of {_show(w.charge)}, the row is {_show_row(pair.row)}",
        )
        pair.row = w.write.new
        return
    tally.refunds += 1
    pair.row = refunded
    pair.counted -= 1  # the refunded charge (the row's) does not count toward the cap


def _charge(pair: _Pair, w: _Write, policy: PacingPolicy, tally: _Tally) -> None:
    """Judge one charge against the row and the progress its tick may have seen."""
    cur = w.charge
    assert cur is not None  # a charge write carries its charge
    if pair.last is not None and pair.last.charged_at == cur.charged_at:
        tally.flag("duplicate_charges", f"{pair.key}: {_show(cur)} repeats {_show(pair.last)}")
        return
    pair.last = cur
    row = pair.row
    lo, hi = _window(w.write, cur)
    seen = pair.host.seen(row.named_todo if row else None, lo, hi)
    surely, maybe, shown = _progress(pair, seen)
    _check_stamp(pair.key, cur, w.write, seen, tally)
    reset = False
    if row is None:
        if cur.number == 1:
            tally.judged["first"] += 1
        else:
            tally.flag("out_of_sequence", f"{pair.key}: {_show(cur)} on a pair with no row")
    elif cur.number == 1 and maybe:
        reset = True
        tally.judged["reset"] += 1
        if shown:
            tally.progress[shown] += 1
    elif surely:
        tally.flag("missed_reset", f"{pair.key}: {_show(cur)} after {_show_row(row)}")
    elif cur.number == row.nudges + 1:
        due = next_due_at(row, policy)
        decided = cur.now if cur.acknowledged else w.write.at
        if due is None:
            tally.flag("over_cap", f"{pair.key}: {_show(cur)} after {_show_row(row)}")
        elif decided < due:
            tally.flag("early", f"{pair.key}: {_show(cur)} before its due {due.isoformat()}")
        else:
            tally.judged["retry" if row.nudges < pair.row_before else "step"] += 1
    elif cur.number == 1:
        _no_progress(pair, _show(cur), tally)
    else:
        tally.flag("out_of_sequence", f"{pair.key}: {_show(cur)} after {_show_row(row)}")
    if row is None or reset:
        pair.counted = 0
    pair.row_before = cur.number
    written = charge_row(cur.nudge)
    new = w.write.new
    if new is not None and (new.nudges, new.last_nudged_at) == (cur.number, cur.charged_at):
        written = new  # an unacknowledged charge's named todo is the history's
    if new != written:
        tally.flag("phantom_write", f"{pair.key}: {_show(cur)} wrote {_show_row(new)}")
    pair.row, pair.by_reset = written, reset
    pair.counted += 1


def _check_stamp(
    key: PairKey, cur: ChargeRecord, write: LedgerWrite, seen: _Seen, tally: _Tally
) -> None:
    """A charge stamps ``charge_stamp`` of a latest claim its tick may have read, at its instant.

    An unacknowledged charge's instant is unknown, but its tick read it in the
    writing transaction before the write: between ``xact_start`` and ``at``.
    """
    latest: list[datetime | None] = [seen.least_claim, *seen.stamps]
    stamp = cur.charged_at
    for claim in latest:
        state = PairState(
            endpoint_id=key[0],
            queue=key[1],
            oldest=None,
            endpoint_active=True,
            has_receiver=True,
            latest_claim=claim,
        )
        if cur.acknowledged:
            if stamp == charge_stamp(state, cur.now):
                return
        elif (write.xact_start <= stamp <= write.at and charge_stamp(state, stamp) == stamp) or (
            charge_stamp(state, write.xact_start) == stamp
        ):
            return
    tally.flag("bad_stamp", f"{key}: {_show(cur)} decided at {cur.now.isoformat()}")


def _show(charge: ChargeRecord) -> str:
    by = "unacknowledged" if charge.worker is None else f"w{charge.worker}"
    return f"nudge {charge.number} at {charge.charged_at.isoformat()} ({by})"


def _show_row(row: LedgerRow | None) -> str:
    if row is None:
        return "no row"
    kept = "" if row.progressed_at is None else f", kept {row.progressed_at.isoformat()}"
    return f"row ({row.nudges}, {row.last_nudged_at.isoformat()}, {row.named_todo}{kept})"
