"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

What is judged is the ledger's own history: every row write, the row before
and after, with its transaction's id and start and the instant of the write,
recorded by a trigger; and every write of the fleet's tick record (each
judging tick's ``now``, recorded by the tick in its own transaction; a
``migrate`` that clears it), recorded by a trigger in the same order. A tick
whose connection died after its commit charged pairs no sweeper journaled or
woke, and the next charge of such a pair is legal only after that one. The
sweepers' journals (each charge with the instant its tick decided at, each
refund and its result, each drain) must agree with the history: a journaled
write the history lacks, or a history write no sweep makes (no tick recorded
in its transaction), is a ``phantom_write``. ``test_soak_check.py`` plants
each violation beside a clean twin, so a zero means "looked and found none".

Every ledger write and tick record happens behind the fleet's tick lock, so
the history's order is commit order, and the tick record before a tick's own
is the one it read: the last judging tick's ``now`` (its claims window,
``claims_window``) and the claims that tick read. Each pair is replayed in
that order, holding the row the ledger must hold, and each write is judged
with the core's rule against that row and what its tick may have seen of the
host. A tick's snapshots lie between its ``now`` and its write (the last
tick's: between its ``now`` and its record); a host statement was surely in
one if the clock read after its commit (``ub``) precedes the lower end,
maybe if the read before it (``lb``) precedes the upper; one todo's claims
and requeues happen in turn. A claim is new to a tick when the tick reads it
(``claims_read``: left pending, stamped inside its window) and the last
judging tick did not (``latest_claim``). So each tick has a least and a most
latest new claim and named-todo departure: ``made_progress`` on the least is
progress it surely saw, on the most progress it may have seen (the rule is
monotone in both). That commit span is the only latitude; nothing is widened
by a tolerance.

- with no row, only nudge 1; a charge that surely saw progress is nudge 1
  (``missed_reset``);
- nudge 1 over a live row, or a reset (count 0, progress kept), needs
  progress the tick may have seen (``reset_without_progress``;
  ``double_reset`` when a reset wrote the row it replaces: one claim or
  departure used twice);
- otherwise the row's count + 1, within the cap, at or after ``next_due_at``
  (a refunded nudge N is retried as N one step later): ``early``,
  ``over_cap``, ``out_of_sequence``;
- a charge is stamped, and a reset keeps its progress, at its tick's ``now``
  (journaled by its sweeper, recorded by the tick, inside its transaction):
  ``bad_stamp``; no two charges of a pair share a stamp; a refund's
  compare-and-set matches the row the ledger holds (``unmatched_refund``);
- a judging tick that surely read a new claim of a pair whose row is live
  (a claim it read never counts again) wrote that row: a charge, a reset or
  a drain (``ignored_progress``).

Each charge goes out as at most one message (retries reuse its
``webhook-id``): every further one is a duplicate, and a stalled message
naming no recorded charge is unattributed.

``check_history`` reads the operators' history (``stall_nudge.history``)
back: every charge the audit or a journal holds has exactly one row, naming
its todo, with the outcome its sweeper booked (none when its booking failed
or never ran), which the receiver's answers and the refunds must bear out;
every action the soak took is kept once, and nothing else is.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import attrs

from stall_core import (
    CLAIMS_LOOKBACK,
    REACHED_NOBODY,
    HistoryEntry,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairState,
    charge_row,
    claims_read,
    claims_window,
    latest_claim,
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
    "bad_stamp",  # a charge (or a reset's progress) stamped other than its tick's now
    "unmatched_refund",  # a refund whose compare-and-set matched a row the ledger did not hold
    "ignored_progress",  # a tick surely read a new claim of a live row, and wrote nothing to it
    "phantom_write",  # the journals and the ledger's history disagree, or a write no rule makes
)


def _charge_id(n: Nudge) -> ChargeId:
    return (*n.key, n.number, n.charged_at)


@attrs.frozen(kw_only=True)
class ChargeRecord:
    """One charge, decided by a tick at ``now``.

    ``worker`` None: only the ledger's history knows it (its tick failed
    after the commit); ``now`` is then the one its tick recorded (its
    transaction's start when none did).
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
class TickWrite:
    """One write of the fleet's tick record the audit trigger recorded, in the history's order.

    ``now`` is the instant the judging tick decided at (the record's
    ``judged_to``), written last in its transaction ``xid``, at ``at``:
    every statement of the tick ran before it. None: a ``migrate`` cleared
    it (the next tick reads its window from its own ``now``; the claims the
    last tick read are kept).
    """

    seq: int
    xid: int
    xact_start: datetime
    at: datetime
    now: datetime | None


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
    #: what showed each reset's progress, where the clocks tell: by_claim (surely a new
    #: claim), by_departure (only the named todo's), by_kept (a reset's)
    progress: Mapping[str, int] = attrs.field(factory=dict)
    #: charges only the ledger's history knows: committed, never acknowledged nor woken
    unacknowledged: int = 0
    #: judging ticks the record holds (migrate's clearings not counted)
    ticks: int = 0
    #: ticks that surely read a new claim of a live row, and wrote it (``ignored_progress``
    #: looked at these)
    answered: int = 0
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
    ticks: Iterable[TickWrite],
    charges: Iterable[ChargeRecord],
    messages: Iterable[MessageRecord],
    host: Iterable[HostWrite],
    drains: Mapping[PairKey, Sequence[datetime]],
    ledger_resets: Sequence[int],
    policy: PacingPolicy,
    refunds: Iterable[RefundRecord] = (),
    lookback: timedelta = CLAIMS_LOOKBACK,
) -> Findings:
    """Run every invariant over one soak's records.

    ``ledger_resets`` are the sequence numbers drawn while the ledger table was
    dropped (under the tick lock): every pair starts over there, as after a drain.
    ``lookback`` is the sweepers' claims window's (``claims_window``).
    """
    tally = _Tally()
    record = _Record(ticks, lookback)
    charges = list(charges)
    writes = _from_history(ledger, record, charges, list(refunds), drains, tally)
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
        worst = max(worst, _replay(key, pair_writes, ledger_resets, seen, record, policy, tally))
        _ignored(key, pair_writes, ledger_resets, seen, record, tally)
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
        ticks=len(record.judging),
        answered=tally.answered,
        examples=tuple(tally.examples[:10]),
    )


@attrs.define
class _Tally:
    counts: Counter[str] = attrs.Factory(Counter)
    judged: Counter[str] = attrs.Factory(Counter)
    progress: Counter[str] = attrs.Factory(Counter)
    examples: list[str] = attrs.Factory(list)
    refunds: int = 0
    answered: int = 0

    def flag(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        self.examples.append(f"{kind}: {example}")


@attrs.frozen
class _Span:
    """Where a tick's snapshots lie (``lo`` to ``hi``), and its claims window's start."""

    lo: datetime
    hi: datetime
    since: datetime


class _Record:
    """The fleet's tick record in commit order: which record each tick read before its own."""

    def __init__(self, ticks: Iterable[TickWrite], lookback: timedelta) -> None:
        self._all = sorted(ticks, key=lambda t: t.seq)
        self._seqs = [t.seq for t in self._all]
        self._lookback = lookback
        #: the judging ticks (each recorded its now), in commit order
        self.judging = [t for t in self._all if t.now is not None]
        self._by_xid = {t.xid: t for t in self.judging}
        #: per position in the record, the last judging tick before it: whose claims it holds
        self._source: list[TickWrite | None] = []
        last: TickWrite | None = None
        for t in self._all:
            self._source.append(last)
            last = t if t.now is not None else last
        self._source.append(last)
        self._nows = [t.now for t in self.judging if t.now is not None]
        self._in_order = all(a <= b for a, b in zip(self._nows, self._nows[1:], strict=False))

    def of(self, xid: int) -> TickWrite | None:
        """The judging tick whose transaction ``xid`` is, if it recorded itself."""
        return self._by_xid.get(xid)

    def _read(self, seq: int) -> tuple[datetime | None, TickWrite | None]:
        """The record as a tick whose own comes at ``seq`` read it: its ``now`` (None: none, or
        cleared) and the judging tick whose claims it holds."""
        i = bisect.bisect_left(self._seqs, seq)
        return (self._all[i - 1].now if i else None), self._source[i]

    def spans(self, now: datetime, hi: datetime, seq: int) -> tuple[_Span, _Span | None]:
        """A tick that decided at ``now``, its record at ``seq``, its snapshots before ``hi``:
        its span, and the span of the last judging tick (None: there was none)."""
        judged_at, last = self._read(seq)
        span = _Span(now, max(now, hi), claims_window(judged_at, now, self._lookback))
        if last is None or last.now is None:
            return span, None
        before, _ = self._read(last.seq)
        window = claims_window(before, last.now, self._lookback)
        return span, _Span(last.now, max(last.now, last.at), window)

    def first_after(self, at: datetime) -> TickWrite | None:
        """The first judging tick (in commit order) that decided after ``at``."""
        if self._in_order:
            i = bisect.bisect_right(self._nows, at)
            return self.judging[i] if i < len(self.judging) else None
        return next((t for t in self.judging if t.now is not None and t.now > at), None)


@attrs.frozen
class _Write:
    """A history write as a charge (``charge`` the one written), reset, refund (``charge`` the
    one refunded) or drain."""

    write: LedgerWrite
    kind: str
    charge: ChargeRecord | None = None


def _from_history(
    ledger: Iterable[LedgerWrite],
    record: _Record,
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
            written[charge_id] = journaled.get(charge_id) or _unacknowledged(w, new, record)
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
            charge = (
                written.get(charge_id)
                or journaled.get(charge_id)
                or _unacknowledged(w, old, record)
            )
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


def _unacknowledged(write: LedgerWrite, row: LedgerRow, record: _Record) -> ChargeRecord:
    """A charge only the history knows: it named the todo the history shows, and its tick
    decided at the instant it recorded."""
    n = nudge(write.endpoint_id, write.queue, row.nudges, row.last_nudged_at, row.named_todo or "")
    tick = record.of(write.xid)
    now = write.xact_start if tick is None or tick.now is None else tick.now
    return ChargeRecord(worker=None, now=now, nudge=n)


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
    """The least and the most a tick can have found of a pair's new claims and its named todo."""

    least_claim: datetime | None
    most_claim: datetime | None
    surely_departed: bool
    maybe_departed: bool


#: One todo as a snapshot shows it, as the core reads todos: (id, state, claimed_at).
_View = tuple[str, str, datetime | None]


class _Host:
    """One pair's claims and requeues, and what a tick in a span may have read of them."""

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

    @staticmethod
    def _view(todo_id: str, events: Sequence[HostWrite], n: int) -> _View:
        """The todo as a snapshot holding its first ``n`` writes shows it."""
        if not n:
            return (todo_id, "pending", None)  # not claimed yet (or not created)
        e = events[n - 1]
        return (todo_id, "claimed" if e.op == "claim" else "pending", e.claimed_at)

    def claims(self) -> Iterable[tuple[str, HostWrite]]:
        """Each claim whose commit the clocks bound, with its todo."""
        for todo_id, events in self._by_todo.items():
            yield from ((todo_id, e) for e in events if e.op == "claim" and e.ub is not None)

    def new_claims(self, todo_id: str, tick: _Span, last: _Span | None) -> list[datetime | None]:
        """One todo's latest new claim to ``tick`` (``latest_claim``), in each world the clocks
        allow: what its snapshot holds, against what the last judging tick read
        (``claims_read``; a snapshot of its no later than the tick's)."""
        events = self._by_todo.get(todo_id, [])
        here = self._prefixes(events, tick.lo, tick.hi)
        if last is None:
            return [latest_claim([self._view(todo_id, events, n)], tick.since, ()) for n in here]
        there = self._prefixes(events, last.lo, last.hi)
        worlds = [(m, n) for n in here for m in there if m <= n]
        return [
            latest_claim(
                [self._view(todo_id, events, n)],
                tick.since,
                claims_read([self._view(todo_id, events, m)], last.since),
            )
            for m, n in worlds or [(m, n) for n in here for m in there]
        ]

    def seen(self, named: str | None, tick: _Span, last: _Span | None) -> _Seen:
        least: datetime | None = None
        most: datetime | None = None
        for todo_id in self._by_todo:
            values = self.new_claims(todo_id, tick, last)
            known = [v for v in values if v is not None]
            if known and len(known) == len(values):
                least = min(known) if least is None else max(least, min(known))
            if known:
                most = max(known) if most is None else max(most, max(known))
        departed: set[bool] = {False}
        if named is not None and named in self._by_todo:
            events = self._by_todo[named]
            departed = {
                n > 0 and events[n - 1].op == "claim"
                for n in self._prefixes(events, tick.lo, tick.hi)
            }
        return _Seen(
            least_claim=least,
            most_claim=most,
            surely_departed=all(departed),
            maybe_departed=any(departed),
        )


@attrs.define
class _Pair:
    """What the replay of one pair holds between two writes."""

    key: PairKey
    host: _Host
    record: _Record
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

    def progress(self, now: datetime, w: LedgerWrite, seq: int) -> tuple[bool, bool, str]:
        """Progress the tick that decided at ``now`` (its record at ``seq``) and wrote ``w``
        surely saw, may have seen, and what showed it (where the clocks tell)."""
        row = self.row
        tick, last = self.record.spans(now, w.at, seq)
        seen = self.host.seen(row.named_todo if row else None, tick, last)
        surely = made_progress(_state(self.key, seen.least_claim, seen.surely_departed), row)
        maybe = made_progress(_state(self.key, seen.most_claim, seen.maybe_departed), row)
        shown = ""
        if row is not None and surely:
            if row.progressed_at is not None:
                shown = "by_kept"
            elif seen.least_claim is not None:
                shown = "by_claim"
            elif seen.most_claim is None:
                shown = "by_departure"
        return surely, maybe, shown


def _replay(
    key: PairKey,
    writes: Sequence[_Write],
    ledger_resets: Sequence[int],
    host: _Host,
    record: _Record,
    policy: PacingPolicy,
    tally: _Tally,
) -> int:
    """Replay one pair's history; return its most counted charges between resets."""
    pair = _Pair(key, host, record)
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
        tick = record.of(w.write.xid)
        if tick is None:
            tally.flag("phantom_write", f"{key}: history #{w.write.seq} written by no tick")
        if w.kind == "drain":
            tally.judged["drain"] += 1
            pair.start_over()
        elif w.kind == "reset":
            _reset(pair, w.write, tick, tally)
        else:
            _charge(pair, w, tick, policy, tally)
            worst = max(worst, pair.counted)
    return worst


def _ignored(
    key: PairKey,
    writes: Sequence[_Write],
    ledger_resets: Sequence[int],
    host: _Host,
    record: _Record,
    tally: _Tally,
) -> None:
    """A tick that surely read a new claim of a pair whose row is live wrote that row.

    A claim a tick read is never new again: were such a tick to write
    nothing, its progress would be lost unseen. Only the first judging tick
    after a claim's commit can surely read it as new (the next one finds it
    read); the row it judged is the history's last before its own writes.
    """
    timeline = sorted(
        [(w.write.seq, w.write.xid, w.write.new) for w in writes]
        + [(seq, None, None) for seq in ledger_resets]
    )
    seqs = [seq for seq, _, _ in timeline]
    looked: set[int] = set()
    for todo_id, claim in host.claims():
        assert claim.ub is not None  # host.claims() yields only bounded claims
        tick = record.first_after(claim.ub)
        if tick is None or tick.now is None or tick.seq in looked:
            continue
        span, last = record.spans(tick.now, tick.at, tick.seq)
        if None in host.new_claims(todo_id, span, last):
            continue  # not surely a new claim to that tick
        looked.add(tick.seq)
        before = timeline[: bisect.bisect_left(seqs, tick.seq)]
        prior = [row for _, xid, row in before if xid != tick.xid]
        row = prior[-1] if prior else None
        if row is None or row.progressed_at is not None:
            continue  # no live row: nothing to answer
        if any(xid == tick.xid for _, xid, _ in before):
            tally.answered += 1  # the tick wrote the row
        else:
            tally.flag(
                "ignored_progress",
                f"{key}: the tick at {tick.now.isoformat()} read {todo_id}'s claim at "
                f"{claim.claimed_at.isoformat()} (new) and left {show_row(row)}",
            )


def _no_progress(pair: _Pair, what: str, tally: _Tally) -> None:
    kind = "double_reset" if pair.by_reset else "reset_without_progress"
    tally.flag(kind, f"{pair.key}: {what} after {show_row(pair.row)}, which saw no progress")


def _reset(pair: _Pair, w: LedgerWrite, tick: TickWrite | None, tally: _Tally) -> None:
    """A reset keeps progress for a charge to come, at its tick's now: the tick may have seen
    some."""
    assert w.new is not None  # a row ...
    assert w.new.progressed_at is not None  # ... keeping progress
    now = w.xact_start if tick is None or tick.now is None else tick.now
    _, maybe, shown = pair.progress(now, w, w.seq if tick is None else tick.seq)
    if not maybe:
        _no_progress(pair, f"a reset (#{w.seq})", tally)
    elif tick is not None and w.new.progressed_at != tick.now:
        tally.flag(
            "bad_stamp",
            f"{pair.key}: reset #{w.seq} kept progress at {w.new.progressed_at.isoformat()},"
            f" its tick decided at {now.isoformat()}",
        )
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


def _charge(
    pair: _Pair, w: _Write, tick: TickWrite | None, policy: PacingPolicy, tally: _Tally
) -> None:
    """Judge one charge against the row and the progress its tick may have seen."""
    cur = w.charge
    assert cur is not None  # a charge write carries its charge
    if pair.last is not None and pair.last.nudge.charged_at == cur.nudge.charged_at:
        tally.flag("duplicate_charges", f"{pair.key}: {_show(cur)} repeats {_show(pair.last)}")
        return
    pair.last = cur
    row, number = pair.row, cur.nudge.number
    # The instant the tick decided at: the one it recorded (else its sweeper's, or for an
    # unacknowledged charge its transaction's start); its snapshot lies from there to the write.
    if tick is not None and tick.now is not None:
        now, seq = tick.now, tick.seq
    else:
        now, seq = (cur.now if cur.acknowledged else w.write.xact_start), w.write.seq
    surely, maybe, shown = pair.progress(now, w.write, seq)
    _check_stamp(pair.key, cur, tick, w.write, tally)
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
        if due is None:
            tally.flag("over_cap", f"{pair.key}: {_show(cur)} after {show_row(row)}")
        elif now < due:
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
    key: PairKey, cur: ChargeRecord, tick: TickWrite | None, write: LedgerWrite, tally: _Tally
) -> None:
    """A charge is stamped with its tick's now: the instant it decided at.

    That is the ``now`` its sweeper journaled and its tick recorded, read in
    the writing transaction before the write. With neither (an unacknowledged
    charge of no recorded tick, itself a phantom) there is nothing to hold it to.
    """
    stamp = cur.nudge.charged_at
    instants = {cur.now} if cur.acknowledged else set()
    if tick is not None and tick.now is not None:
        instants.add(tick.now)
    if not instants or (instants == {stamp} and write.xact_start <= stamp <= write.at):
        return
    said = ", ".join(sorted(at.isoformat() for at in instants))
    tally.flag("bad_stamp", f"{key}: {_show(cur)}, its tick decided at {said}")


def _show(charge: ChargeRecord) -> str:
    by = "unacknowledged" if charge.worker is None else f"w{charge.worker}"
    return f"nudge {charge.nudge.number} at {charge.nudge.charged_at.isoformat()} ({by})"


# -- the history: every outcome of the soak, none missing, none twice -----------------------

#: Every way ``stall_nudge.history`` can disagree with the soak's records; each must be 0.
HISTORY_FAULTS = (
    "missing",  # a charge the ledger or a journal holds, with no history row
    "twice",  # a charge with more than one history row
    "unexplained",  # a charged row of no charge the ledger or a journal holds
    "wrong_outcome",  # an outcome other than booked, or one the receiver and refunds belie
    "missing_action",  # an operator action the soak took, not kept
    "action_twice",  # an operator action kept more than once
    "unexplained_action",  # an action row of no action the soak took
)


@attrs.frozen(kw_only=True)
class BookingRecord:
    """A sweeper booked a charge's outcome; ``booked`` None when the call failed or never
    returned (its commit unknown)."""

    nudge: Nudge
    outcome: str
    booked: bool | None


@attrs.frozen(kw_only=True)
class ActionRecord:
    """An operator action the soak took, told apart by its ``reason``.

    ``kept``: True when the call returned and the history must hold it, False
    when it was refused or changed nothing (an unsilence of no silence), None
    when the call failed (its commit unknown).
    """

    action: str
    endpoint_id: str
    queue: str | None
    reason: str
    by: str
    kept: bool | None


@attrs.frozen(kw_only=True)
class HistoryFindings:
    """What the history check found: ``faults`` by kind (every key of HISTORY_FAULTS)."""

    charges: int
    #: charged rows by outcome ("none": not booked)
    outcomes: Mapping[str, int]
    actions: int
    faults: Mapping[str, int]
    examples: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return not any(self.faults.values())


def check_history(
    *,
    history: Iterable[HistoryEntry],
    ledger: Iterable[LedgerWrite],
    charges: Iterable[ChargeRecord],
    bookings: Iterable[BookingRecord],
    refunds: Iterable[RefundRecord],
    messages: Iterable[MessageRecord],
    actions: Iterable[ActionRecord] = (),
) -> HistoryFindings:
    """Every charge of the soak is in the history once, with its outcome; so is every action.

    A charge is one the ledger's audit shows written or a sweeper journaled
    (the other checks make those agree). Its row's outcome is the one a
    sweeper booked (none when none did; either when the booking's commit is
    unknown), and it agrees with what the soak saw: ``delivered`` only for a
    charge a message of which the receiver answered 2xx and nobody refunded,
    any other only for a charge a sweeper asked to refund.
    """
    counts: Counter[str] = Counter()
    examples: list[str] = []

    def flag(kind: str, example: str) -> None:
        counts[kind] += 1
        if len(examples) < 10:
            examples.append(f"{kind}: {example}")

    named: dict[ChargeId, str | None] = {}
    for w in ledger:
        old, new = w.old, w.new
        if new is not None and (old is None or old.last_nudged_at != new.last_nudged_at):
            named[(*w.key, new.nudges, new.last_nudged_at)] = new.named_todo
    for c in charges:
        named.setdefault(c.id, c.nudge.todo.id)
    rows: dict[ChargeId, list[HistoryEntry]] = defaultdict(list)
    kept: list[HistoryEntry] = []
    for row in history:
        if row.event != "charged":
            kept.append(row)
        elif row.queue is None or row.nudge is None:
            flag("unexplained", f"a charged row with no queue or number: {row}")
        else:
            rows[row.endpoint_id, row.queue, row.nudge, row.at].append(row)
    for charge_id in rows.keys() - named.keys():
        flag("unexplained", f"{charge_id}: a charged row of no charge")
    booked: dict[ChargeId, list[BookingRecord]] = defaultdict(list)
    for b in bookings:
        booked[_charge_id(b.nudge)].append(b)
    asked = {_charge_id(r.nudge) for r in refunds}
    answered = {
        (m.endpoint_id, m.queue, m.sent_at)
        for m in messages
        if m.reason == "stalled" and 200 <= m.answered < 300
    }
    outcomes: Counter[str] = Counter()
    for charge_id, todo in sorted(named.items(), key=lambda item: item[0][3]):
        found = rows.get(charge_id, [])
        if not found:
            flag("missing", f"{charge_id}: no history row")
            continue
        if len(found) > 1:
            flag("twice", f"{charge_id}: {len(found)} history rows")
        row = found[0]
        outcomes[row.outcome or "none"] += 1
        said = _outcome_said(charge_id, row, todo, booked.get(charge_id, []), asked, answered)
        if said:
            flag("wrong_outcome", said)
    _check_actions(kept, list(actions), flag)
    return HistoryFindings(
        charges=len(named),
        outcomes=dict(outcomes),
        actions=len(kept),
        faults={kind: counts[kind] for kind in HISTORY_FAULTS},
        examples=tuple(examples),
    )


def _outcome_said(
    charge_id: ChargeId,
    row: HistoryEntry,
    todo: str | None,
    bookings: Sequence[BookingRecord],
    asked: set[ChargeId],
    answered: set[tuple[str, str, datetime]],
) -> str:
    """Why the row's todo or outcome is wrong for this charge; empty when it is right."""
    if todo is not None and row.todo_id != todo:
        return f"{charge_id}: the row names todo {row.todo_id!r}, the charge {todo!r}"
    sure = [b.outcome for b in bookings if b.booked]
    maybe = {b.outcome for b in bookings if b.booked is None}
    allowed = {sure[0]} if sure else {None} | maybe
    if row.outcome not in allowed:
        return f"{charge_id}: outcome {row.outcome!r}, booked {sorted(map(str, allowed))}"
    if row.outcome == "delivered" and (charge_id[:2] + charge_id[3:] not in answered):
        return f"{charge_id}: delivered, yet no message of it was answered 2xx"
    if row.outcome == "delivered" and charge_id in asked:
        return f"{charge_id}: delivered, yet its refund was asked for"
    if row.outcome in REACHED_NOBODY and charge_id not in asked:
        return f"{charge_id}: {row.outcome}, yet no refund was asked for"
    return ""


#: An action as the history keeps it: what, the endpoint, the queue (None: all), why, by whom.
_ActionKey = tuple[str, str, str | None, str, str | None]


def _check_actions(
    kept: Sequence[HistoryEntry], actions: Sequence[ActionRecord], flag: Callable[[str, str], None]
) -> None:
    """Each action the soak took is kept once (a failed call's at most once), none else."""
    by_reason: dict[_ActionKey, list[HistoryEntry]] = defaultdict(list)
    for row in kept:
        by_reason[row.event, row.endpoint_id, row.queue, row.detail or "", row.by].append(row)
    taken: set[_ActionKey] = set()
    for a in actions:
        key: _ActionKey = (a.action, a.endpoint_id, a.queue, a.reason, a.by)
        taken.add(key)
        found = by_reason.get(key, [])
        if len(found) > 1:
            flag("action_twice", f"{key}: kept {len(found)} times")
        elif a.kept and not found:
            flag("missing_action", f"{key}: not kept")
        elif a.kept is False and found:
            flag("unexplained_action", f"{key}: kept, yet it changed nothing")
    for key in by_reason.keys() - taken:
        flag("unexplained_action", f"{key}: an action the soak did not take")
