"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

What is judged is the ledger's own history: every row write, the row before
and after, with its transaction's id and start and the instant of the write,
recorded by a trigger. A tick whose connection died after its commit charged
pairs no sweeper journaled or woke, and the next charge of such a pair is
legal only after that one. The sweepers' journals (each charge with the
instant its tick decided at, each refund and its result, each drain) must
agree with the history: a journaled write the history lacks, or a history
write no sweep makes, is a ``phantom_write``. ``test_soak_check.py`` plants
each violation beside a clean twin, so a zero means "looked and found none".

Every ledger write happens behind the fleet's tick lock, so the history's
order is commit order. Each pair is replayed in it, holding the row the
ledger must hold, and each write is judged with the core's rule against that
row and what its tick may have seen of the host. A tick's snapshot lies
between the instant it decided at (for an unacknowledged charge, its
transaction's start) and its write; a host statement was surely in it if the
clock read after its commit (``ub``) precedes ``now``, maybe if the read
before it (``lb``) precedes the write; one todo's claims and requeues happen
in turn. So each tick has a least and a most ``latest_claim`` and named-todo
departure: ``made_progress`` on the least is progress it surely saw, on the
most progress it may have seen (the rule is monotone in both). That commit
span is the only latitude; nothing is widened by a tolerance.

- with no row, only nudge 1; a charge that surely saw progress is nudge 1
  (``missed_reset``);
- nudge 1 over a live row, or a reset (count 0, progress kept), needs
  progress the tick may have seen (``reset_without_progress``;
  ``double_reset`` when a reset wrote the row it replaces: one claim or
  departure used twice);
- otherwise the row's count + 1, within the cap, at or after ``next_due_at``
  (a refunded nudge N is retried as N one step later): ``early``,
  ``over_cap``, ``out_of_sequence``;
- the stamp is ``charge_stamp`` of a latest claim the tick may have read
  (``bad_stamp``); no two charges of a pair share one; a refund's
  compare-and-set matches the row the ledger holds (``unmatched_refund``).

Each charge goes out as at most one message (retries reuse its
``webhook-id``): every further one is a duplicate, and a stalled message
naming no recorded charge is unattributed.
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
    charge_row,
    charge_stamp,
    made_progress,
    next_due_at,
    refunded_row,
    reset_row,
)
from tests.stress.shared import nudge, show_row

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


def _charge_id(n: Nudge) -> ChargeId:
    return (*n.key, n.number, n.charged_at)


@attrs.frozen(kw_only=True)
class ChargeRecord:
    """One charge, decided by a tick at ``now``.

    ``worker`` None: only the ledger's history knows it (its tick failed
    after the commit); ``now`` is then its transaction's start, no later than
    the instant the tick decided at.
    """

    worker: int | None
    now: datetime
    nudge: Nudge

    @property
    def acknowledged(self) -> bool:
        return self.worker is not None

    @property
    def id(self) -> ChargeId:
        return _charge_id(self.nudge)


@attrs.frozen(kw_only=True)
class RefundRecord:
    """One refund a sweeper asked for; ``refunded`` is None when its outcome is unknown."""

    worker: int | None
    nudge: Nudge
    refunded: bool | None


@attrs.frozen(kw_only=True)
class HostWrite:
    """One claim or requeue the host made; ``claimed_at`` is the claim's stamp (a requeue keeps it).

    ``lb``/``ub``: database-clock reads before the statement and after its
    commit; None for a claim found only in the final table, which any tick
    may have seen and none surely.
    """

    op: str  # "claim" | "requeue"
    endpoint_id: str
    queue: str
    todo_id: str
    claimed_at: datetime
    lb: datetime | None = None
    ub: datetime | None = None


@attrs.frozen(kw_only=True)
class LedgerWrite:
    """One row write the audit trigger recorded: ``seq`` orders the history, ``xid`` is its
    transaction, ``xact_start`` that transaction's start and ``at`` the write (database clock)."""

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
    #: legal writes by the rule that allowed them: first, reset, step, retry (a refunded
    #: number again), kept (a reset keeping progress) and drain
    judged: Mapping[str, int] = attrs.field(factory=dict)
    #: what showed each reset's progress, where the clocks tell: by_claim (a claim stamped
    #: after the last nudge), by_departure (only the named todo's), by_kept (a reset's)
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

    ``ledger_resets`` are the sequence numbers drawn while the ledger table was
    dropped (under the tick lock): every pair starts over there, as after a drain.
    """
    tally = _Tally()
    charges = list(charges)
    writes = _from_history(ledger, charges, list(refunds), drains, tally)
    by_pair: dict[PairKey, list[HostWrite]] = defaultdict(list)
    for event in host:
        by_pair[event.endpoint_id, event.queue].append(event)
    # A wake follows its journal line, so only an acknowledged charge has messages.
    extra, woken, unattributed = _messages(messages, {c.id for c in charges}, tally)
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
    """A history write as a charge (``charge`` the one written), reset, refund (``charge`` the
    one refunded) or drain."""

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
    """The charges, resets, refunds and drains of the history, checked against the journals."""
    journaled: dict[ChargeId, ChargeRecord] = {}
    for charge in charges:
        if charge.id in journaled:  # two sweepers were handed one charge
            tally.flag("duplicate_charges", f"{charge.nudge.key}: {_show(charge)} journaled twice")
        journaled[charge.id] = charge
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
        elif (
            old is not None
            and new is not None
            and old.progressed_at is None
            and new.progressed_at is not None
            and new == reset_row(old, new.progressed_at)
        ):
            writes.append(_Write(w, "reset"))
        elif old is not None and new == attrs.evolve(old, nudges=old.nudges - 1):
            charge_id = (*w.key, old.nudges, old.last_nudged_at)
            refunded.add(charge_id)
            charge = written.get(charge_id) or journaled.get(charge_id) or _unacknowledged(w, old)
            writes.append(_Write(w, "refund", charge))
        else:
            history = f"{show_row(old)} -> {show_row(new)} (#{w.seq})"
            tally.flag("phantom_write", f"{w.key}: history write {history}")
    for charge_id, charge in journaled.items():
        if charge_id not in written:
            tally.flag(
                "phantom_write", f"{charge.nudge.key}: journaled {_show(charge)} never written"
            )
    asked: dict[ChargeId, set[bool | None]] = defaultdict(set)
    for refund in refunds:
        asked[_charge_id(refund.nudge)].add(refund.refunded)
    for charge_id, outcomes in asked.items():
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
    n = nudge(write.endpoint_id, write.queue, row.nudges, row.last_nudged_at, row.named_todo or "")
    return ChargeRecord(worker=None, now=write.xact_start, nudge=n)


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


def _state(key: PairKey, claim: datetime | None, departed: bool = False) -> PairState:
    """The pair as the core reads it, for the ledger's rule alone (its work is not judged)."""
    return PairState(
        endpoint_id=key[0],
        queue=key[1],
        oldest=None,
        endpoint_active=True,
        has_receiver=True,
        latest_claim=claim,
        named_departed=departed,
    )


@attrs.frozen
class _Seen:
    """The least and the most a tick can have read of a pair's claims and its named todo."""

    least_claim: datetime | None
    most_claim: datetime | None
    surely_departed: bool
    maybe_departed: bool
    #: the stamps of claims the tick may have read, at or after the least latest claim
    stamps: tuple[datetime, ...]


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
                least = min(known) if least is None else max(least, min(known))
            if known:
                most = max(known) if most is None else max(most, max(known))
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

    def start_over(self, row: LedgerRow | None = None, *, by_reset: bool = False) -> None:
        self.row, self.counted, self.by_reset = row, 0, by_reset

    def progress(self, lo: datetime, hi: datetime) -> tuple[_Seen, bool, bool, str]:
        """What the tick may have seen in [lo, hi]; progress it surely saw, may have seen,
        and what showed it (where the clocks tell)."""
        row = self.row
        seen = self.host.seen(row.named_todo if row else None, lo, hi)
        surely = made_progress(_state(self.key, seen.least_claim, seen.surely_departed), row)
        maybe = made_progress(_state(self.key, seen.most_claim, seen.maybe_departed), row)
        shown = ""
        if row is not None and surely:
            if row.progressed_at is not None:
                shown = "by_kept"
            elif seen.least_claim is not None and seen.least_claim > row.last_nudged_at:
                shown = "by_claim"
            elif seen.most_claim is None or seen.most_claim <= row.last_nudged_at:
                shown = "by_departure"
        return seen, surely, maybe, shown


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
            pair.start_over()
        if w.kind == "refund":
            _refund(pair, w, tally)  # its compare-and-set is judged against the replay's row
            continue
        if w.write.old != pair.row:  # the row before the write must be the replay's
            tally.flag(
                "phantom_write",
                f"{key}: history #{w.write.seq} found {show_row(w.write.old)}, "
                f"the replay holds {show_row(pair.row)}",
            )
            pair.row = w.write.old  # the replay follows the history
        if w.kind == "drain":
            tally.judged["drain"] += 1
            pair.start_over()
        elif w.kind == "reset":
            _reset(pair, w.write, tally)
        else:
            _charge(pair, w, policy, tally)
            worst = max(worst, pair.counted)
    return worst


def _no_progress(pair: _Pair, what: str, tally: _Tally) -> None:
    kind = "double_reset" if pair.by_reset else "reset_without_progress"
    tally.flag(kind, f"{pair.key}: {what} after {show_row(pair.row)}, which saw no progress")


def _reset(pair: _Pair, w: LedgerWrite, tally: _Tally) -> None:
    """A reset keeps progress for a charge to come: the tick may have seen some."""
    assert w.new is not None  # a row ...
    assert w.new.progressed_at is not None  # ... keeping progress
    _, _, maybe, shown = pair.progress(w.xact_start, w.at)
    if not maybe:
        _no_progress(pair, f"a reset (#{w.seq})", tally)
    elif not w.xact_start <= w.new.progressed_at <= w.at:
        tally.flag("bad_stamp", f"{pair.key}: reset #{w.seq} kept progress outside its tick")
    else:
        tally.judged["kept"] += 1
        if shown:
            tally.progress[shown] += 1
    pair.start_over(w.new, by_reset=True)


def _refund(pair: _Pair, w: _Write, tally: _Tally) -> None:
    """A refund's compare-and-set must match the row the ledger holds (its charge's)."""
    assert w.charge is not None  # a refund names the charge it refunds
    refunded = refunded_row(pair.row, w.charge.nudge)
    if refunded is None:
        tally.flag(
            "unmatched_refund",
            f"{pair.key}: refund of {_show(w.charge)}, the row is {show_row(pair.row)}",
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
    if pair.last is not None and pair.last.nudge.charged_at == cur.nudge.charged_at:
        tally.flag("duplicate_charges", f"{pair.key}: {_show(cur)} repeats {_show(pair.last)}")
        return
    pair.last = cur
    row, number = pair.row, cur.nudge.number
    # The tick's snapshot: from its now (an unacknowledged charge's transaction start) to its write.
    seen, surely, maybe, shown = pair.progress(
        cur.now if cur.acknowledged else w.write.xact_start, w.write.at
    )
    _check_stamp(pair.key, cur, w.write, seen, tally)
    reset = False
    if row is None:
        if number == 1:
            tally.judged["first"] += 1
        else:
            tally.flag("out_of_sequence", f"{pair.key}: {_show(cur)} on a pair with no row")
    elif number == 1 and maybe:
        reset = True
        tally.judged["reset"] += 1
        if shown:
            tally.progress[shown] += 1
    elif surely:
        tally.flag("missed_reset", f"{pair.key}: {_show(cur)} after {show_row(row)}")
    elif number == row.nudges + 1:
        due = next_due_at(row, policy)
        decided = cur.now if cur.acknowledged else w.write.at
        if due is None:
            tally.flag("over_cap", f"{pair.key}: {_show(cur)} after {show_row(row)}")
        elif decided < due:
            tally.flag("early", f"{pair.key}: {_show(cur)} before its due {due.isoformat()}")
        else:
            tally.judged["retry" if row.nudges < pair.row_before else "step"] += 1
    elif number == 1:
        _no_progress(pair, _show(cur), tally)
    else:
        tally.flag("out_of_sequence", f"{pair.key}: {_show(cur)} after {show_row(row)}")
    if row is None or reset:
        pair.counted = 0
    pair.row_before = number
    written = charge_row(cur.nudge)
    new = w.write.new
    if new is not None and (new.nudges, new.last_nudged_at) == (number, cur.nudge.charged_at):
        written = new  # an unacknowledged charge's named todo is the history's
    if new != written:
        tally.flag("phantom_write", f"{pair.key}: {_show(cur)} wrote {show_row(new)}")
    pair.row, pair.by_reset = written, reset
    pair.counted += 1


def _check_stamp(
    key: PairKey, cur: ChargeRecord, write: LedgerWrite, seen: _Seen, tally: _Tally
) -> None:
    """A charge stamps ``charge_stamp`` of a latest claim its tick may have read, at its instant.

    An unacknowledged charge's instant is unknown, but its tick read it in the
    writing transaction before the write: between ``xact_start`` and ``at``.
    """
    stamp = cur.nudge.charged_at
    for claim in (seen.least_claim, *seen.stamps):
        state = _state(key, claim)
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
    return f"nudge {charge.nudge.number} at {charge.nudge.charged_at.isoformat()} ({by})"
