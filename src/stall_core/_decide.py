"""The sweep's rules: pure functions of (pair, ledger row, now, policy), each SPEC-0038 rule once.

Theory of operation
-------------------
Every rule that decides whether a pair is nudged is one function here; the
memory board and the simulator call them. The Postgres statements
(adapters/postgres/tick.sql) restate those the query must hold, each naming
the function it mirrors, and tests/postgres/test_rules_differential.py holds
each restatement to its function on random rows. The rules, in the order a
tick applies them:

===============  =======================================================================
rule             statement
===============  =======================================================================
readable         an instant every reader judges alike: strictly inside a Python
                 datetime's range; a host value outside it (an infinity, a year BC or
                 past 9999, NULL) is never work nor progress
passes_gate      no delivery, or a delivery row that exists and is verified (SPEC-0011)
is_quarantine    the quarantine queue holds deliveries back: its todos are never work
names_fit        endpoint id (as text) and queue together fit NAMES_MAX_BYTES of UTF-8
work_of          the pair's oldest pending todo that passes the gate and was created at
                 a readable instant (ties broken by id); none in the quarantine queue,
                 none for names that do not fit: our indexes hold only pairs whose names
                 fit, so no host write fails because of us
endpoint_active  the endpoint's row exists and its state is 'active'
covers           the hook is the endpoint's; its queue filter is NULL or holds the queue
is_receiver      an enabled hook that covers the pair (``has_receiver``: one hook is)
is_candidate     work older than the threshold (strictly), an active endpoint, a
                 receiver
silenced         a candidate an operator's silence covers (``silences_pair``) is
                 neither charged nor counted against the tick limit: ``Idle``, or
                 ``Reset`` with progress; its ledger row and count stay
latest_claim     the pair's latest new claim: a todo that left pending with a readable
                 claim stamp, stamped inside the claims window (``claims_window``: from
                 a lookback before the last tick), that the last tick did not read
                 (``claims_read``): every claim counts once, in commit order, in the
                 pair a tick first read it in, whatever its stamp says
made_progress    a ledger row, and: progress a reset kept, or the todo the row names has
                 departed (``has_departed``), or a new claim
capped           ``cap`` nudges spent without progress: silent until progress
is_due           a candidate with no row or progress (nudge 1, at once), or not capped
                 with its backoff step over (``next_due_at``)
charge_order     least nudged (``effective_nudges``), oldest work, then endpoint_id and
                 queue by code point
tick limit       the first ``tick_limit`` due pairs in that order are charged
                 (``plan_tick``)
charge_row       nudge ``effective + 1`` names the work, stamped now
reset_row        progress no charge answered: the row keeps it (count 0)
clear            a row whose pair has no work is deleted (``Clear``)
===============  =======================================================================

``decide`` classifies one pair; ``plan_tick`` turns a whole board into the
charges, clears and resets of one tick. Nothing here reads a clock or
touches IO: the sweeper and the ledger adapters gather the inputs and
apply the outputs.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime, timedelta

import attrs

from ._policy import PacingPolicy
from ._values import QUARANTINE_QUEUE, LedgerRow, Nudge, PairKey, PairState, TodoRef, aware

__all__ = [
    "CLAIMS_LOOKBACK",
    "FIRST_INSTANT",
    "FULL_PASS_INTERVAL",
    "HELD_RETRY_FRACTION",
    "LAST_INSTANT",
    "NAMES_MAX_BYTES",
    "Capped",
    "Charge",
    "Claim",
    "Clear",
    "Decision",
    "Idle",
    "IdleReason",
    "Reset",
    "TickPlan",
    "Wait",
    "capped",
    "charge_order",
    "charge_row",
    "claims_read",
    "claims_window",
    "covers",
    "decide",
    "effective_nudges",
    "endpoint_active",
    "full_pass_due",
    "has_departed",
    "has_receiver",
    "is_candidate",
    "is_due",
    "is_quarantine",
    "is_receiver",
    "later",
    "latest_claim",
    "made_progress",
    "names_fit",
    "next_due_at",
    "next_sweep_in",
    "passes_gate",
    "plan_tick",
    "readable",
    "refunded_row",
    "reset_row",
    "starts_over",
    "swept_recently",
    "work_of",
]


class IdleReason(enum.Enum):
    """Why a pair with no ledger business this tick is left alone."""

    NO_WORK = "no-work"  # work_of found none
    ENDPOINT_INACTIVE = "endpoint-inactive"
    NO_RECEIVER = "no-receiver"
    FRESH = "fresh"  # its oldest gate-passing todo is within the threshold
    SILENCED = "silenced"  # a candidate an operator's silence covers (``silences_pair``)


@attrs.frozen(kw_only=True)
class Charge:
    """Charge the pair now: this will be nudge ``number`` since progress."""

    number: int
    todo: TodoRef


@attrs.frozen(kw_only=True)
class Wait:
    """A candidate backing off: the next nudge is due at ``due_at``."""

    due_at: datetime


@attrs.frozen(kw_only=True)
class Capped:
    """A candidate that spent ``cap`` nudges without progress: silence."""

    nudges: int


@attrs.frozen(kw_only=True)
class Clear:
    """A ledger row whose pair has no work left: delete it."""


@attrs.frozen(kw_only=True)
class Idle:
    """Not a candidate; its ledger row (if any) stays as it is."""

    reason: IdleReason


@attrs.frozen(kw_only=True)
class Reset:
    """Progress, but no nudge now (not a candidate, for ``reason``): the row keeps it.

    The row's count goes to 0 and it remembers the progress (``reset_row``),
    so the pair's next nudge is a first one, due at once, even after the
    claim or departure that showed it is gone from the host's rows.
    """

    reason: IdleReason


Decision = Charge | Wait | Capped | Clear | Reset | Idle


def _candidacy(pair: PairState, now: datetime, policy: PacingPolicy) -> TodoRef | IdleReason:
    work = pair.oldest
    if work is None:
        return IdleReason.NO_WORK
    if not pair.endpoint_active:
        return IdleReason.ENDPOINT_INACTIVE
    if not pair.has_receiver:
        return IdleReason.NO_RECEIVER
    if not work.created_at < now - policy.threshold:
        return IdleReason.FRESH
    if pair.silenced_until is not None and now < pair.silenced_until:
        return IdleReason.SILENCED
    return work


#: The ends of a Python datetime's range, in UTC. asyncpg writes each as PostgreSQL's
#: -infinity and infinity (and reads those back as naive datetimes), so neither is an
#: instant: ``readable`` excludes both, as the Postgres judge does.
FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def readable(at: datetime) -> bool:
    """True for an instant every reader judges alike: strictly between the ends of the range.

    A host's timestamptz also holds -infinity, infinity, years BC and years
    past 9999; PostgreSQL reads those as not readable (rule ``readable``),
    and the Python ends stand for the infinities. A todo created at an
    instant that is not readable is not work, and a claim stamped with one
    is not progress: both stay on the board, and ``status`` shows them.
    """
    return FIRST_INSTANT < at < LAST_INSTANT


def later(at: datetime, delta: timedelta) -> datetime:
    """``at + delta`` for a ``delta`` of 0 or more, or ``LAST_INSTANT`` past the range's end."""
    return LAST_INSTANT if at > LAST_INSTANT - delta else at + delta


def passes_gate(delivery_id: object | None, verified: bool | None) -> bool:
    """SPEC-0011's sender gate: True for a todo with no delivery, or a verified one.

    ``verified`` is the delivery row's flag, None when that row is missing:
    the gate fails closed, so a todo whose delivery vanished is never sent.
    """
    return delivery_id is None or verified is True


def is_quarantine(queue: str) -> bool:
    """True for the queue that holds deliveries back (SPEC-0038: never pending work)."""
    return queue == QUARANTINE_QUEUE


#: The most bytes of UTF-8 a pair's endpoint id (as text) and queue take together. A
#: btree entry stops near 2.7 kB; our indexes hold only pairs whose names fit, so no
#: host write ever fails because of a name's length.
NAMES_MAX_BYTES = 2000


def names_fit(endpoint_id: str, queue: str) -> bool:
    """True when the pair's names together take at most ``NAMES_MAX_BYTES`` of UTF-8.

    A pair whose names do not fit is never work (``work_of``), and status
    shows it (``Verdict.NAMES_TOO_LONG``): it is never skipped silently.
    """
    size = len(endpoint_id.encode("utf-8", "surrogatepass"))
    return size + len(queue.encode("utf-8", "surrogatepass")) <= NAMES_MAX_BYTES


def work_of(pending: Iterable[TodoRef], *, endpoint_id: str, queue: str) -> TodoRef | None:
    """The pair's work among its pending todos that pass the sender gate: the oldest readable.

    Ties go by id in code point order, so every reader names the same todo.
    A todo created at an instant that is not ``readable`` is not work; nor
    is any todo of the quarantine queue, or of a pair whose names do not fit.
    """
    if is_quarantine(queue) or not names_fit(endpoint_id, queue):
        return None
    work = (t for t in pending if readable(t.created_at))
    return min(work, key=lambda t: (t.created_at, t.id), default=None)


def endpoint_active(state: str | None) -> bool:
    """True when the endpoint's state (None: no such endpoint row) lets its queues be nudged."""
    return state == "active"


def covers(
    hook_endpoint: str, hook_queues: Collection[str] | None, endpoint_id: str, queue: str
) -> bool:
    """True when the hook is the pair's endpoint's and its queue filter (None: all) holds it."""
    return hook_endpoint == endpoint_id and (hook_queues is None or queue in hook_queues)


def is_receiver(
    enabled: bool,
    hook_endpoint: str,
    hook_queues: Collection[str] | None,
    endpoint_id: str,
    queue: str,
) -> bool:
    """True when the hook receives the pair's wakes: enabled, and it ``covers`` the pair."""
    return enabled and covers(hook_endpoint, hook_queues, endpoint_id, queue)


def has_receiver(
    hooks: Iterable[tuple[bool, str, Collection[str] | None]], endpoint_id: str, queue: str
) -> bool:
    """True when one of ``hooks`` (each: enabled, endpoint_id, queues) ``is_receiver``."""
    return any(is_receiver(*hook, endpoint_id, queue) for hook in hooks)


def is_candidate(pair: PairState, now: datetime, policy: PacingPolicy) -> bool:
    """True when the pair is stalled: work past the threshold, an active endpoint, a receiver."""
    return isinstance(_candidacy(pair, now, policy), TodoRef)


#: How long before the last judging tick a claim's stamp may be and the claim still be new
#: to the sweep: a claim committed up to this long after it was stamped (its transaction
#: open that long, or a host clock that far behind the ledger's) still counts once.
CLAIMS_LOOKBACK = timedelta(minutes=1)


def claims_window(
    judged_at: datetime | None, now: datetime, lookback: timedelta = CLAIMS_LOOKBACK
) -> datetime:
    """Where the claims a tick at ``now`` reads start: ``lookback`` before the last judging tick.

    Every claim committed since that tick is stamped after this (within the
    lookback); every claim stamped before it was read by an earlier tick, in
    the pair it was made in. With no earlier tick (or one later than ``now``:
    a clock gone back) the window starts a lookback before ``now``. It never
    starts before the range's second instant, so PostgreSQL reads it as an
    instant too (a driver writes the first as -infinity).
    """
    aware("now", now)
    base = now if judged_at is None or judged_at > now else judged_at
    earliest = FIRST_INSTANT + timedelta(microseconds=1)
    return earliest if base - earliest <= lookback else base - lookback


#: A claim: (todo id, claimed_at), as the sweep reads it.
Claim = tuple[str, datetime]


def claims_read(todos: Iterable[tuple[str, str, datetime | None]], since: datetime) -> set[Claim]:
    """The claims a tick reads among todos (each: id, state, claimed_at): those in its window.

    A todo is claimed when it has left pending with a ``readable`` claim
    stamp: one requeued (pending again), or stamped with an instant that is
    not readable, is not read (the departure of the todo a nudge named still
    shows it). ``since`` is the ``claims_window``; the ledger keeps what its
    last judging tick read, so the next one knows which claims are new.
    """
    return {
        (todo_id, at)
        for todo_id, state, at in todos
        if state != "pending" and at is not None and readable(at) and at > since
    }


def latest_claim(
    todos: Iterable[tuple[str, str, datetime | None]], since: datetime, read: Collection[Claim]
) -> datetime | None:
    """The latest new claim among a pair's todos: read now (``claims_read``), not by the last tick.

    A claim committed after the last tick is new whatever its stamp says (a
    host clock behind, a claim's transaction open across the tick), as long
    as it is stamped inside the window. One the last tick read is not: it
    was progress then, in the pair it was in (a todo claimed, then moved to
    another pair, brings no claim there), or a charge answered it.
    """
    new = (at for todo_id, at in claims_read(todos, since) if (todo_id, at) not in read)
    return max(new, default=None)


def has_departed(row: LedgerRow | None, pending: Collection[str]) -> bool:
    """True when the todo ``row`` names is not among the pair's ``pending`` todo ids.

    Departed means claimed, finished, deleted or moved to another pair: the
    row is gone or no longer pending in this pair. A change of its gate is
    not a departure (the todo is still pending here). A row an older build
    charged names no todo, and never departs.
    """
    return row is not None and row.named_todo is not None and row.named_todo not in pending


def made_progress(pair: PairState, row: LedgerRow | None) -> bool:
    """SPEC-0038 "a claim on any todo in that pair after the last nudge", read two ways.

    A new claim in the pair (``latest_claim``: one the last tick did not
    read), or the departure of the todo the last nudge named, whichever
    shows first. "After" is commit order: a claim the charge's tick did not
    read is later, whatever its stamp says against the ledger's clock; one
    it read never counts again (a host clock ahead, a claimed todo completed
    or moved later). Progress a reset kept counts until a charge answers it.
    """
    if row is None:
        return False
    return row.progressed_at is not None or pair.named_departed or pair.latest_claim is not None


def starts_over(pair: PairState, row: LedgerRow | None) -> bool:
    """True when the pair's next nudge is nudge 1, due at once: no row, or progress."""
    return row is None or made_progress(pair, row)


def effective_nudges(pair: PairState, row: LedgerRow | None) -> int:
    """Nudges spent since progress: 0 with no row or after progress."""
    if starts_over(pair, row):
        return 0
    assert row is not None  # starts_over is True without a row
    return row.nudges


def capped(nudges: int, policy: PacingPolicy) -> bool:
    """True when ``nudges`` spent without progress reach the cap: no nudge until progress."""
    return nudges >= policy.cap


def next_due_at(row: LedgerRow, policy: PacingPolicy) -> datetime | None:
    """When the nudge after ``row.nudges`` may fire, absent progress; None once ``capped``."""
    if capped(row.nudges, policy):
        return None
    return later(row.last_nudged_at, policy.delay_before(row.nudges + 1))


def is_due(pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy) -> bool:
    """True when the pair would be charged now but for the tick limit."""
    return isinstance(decide(pair, row, now, policy), Charge)


def charge_order(
    spent: int, oldest: TodoRef, endpoint_id: str, queue: str
) -> tuple[int, datetime, str, str]:
    """The key due pairs are charged by, smallest first (``str`` compares by code point)."""
    return (spent, oldest.created_at, endpoint_id, queue)


def charge_row(nudge: Nudge) -> LedgerRow:
    """The ledger row a committed charge leaves behind: the progress it answered is consumed."""
    return LedgerRow(
        endpoint_id=nudge.endpoint_id,
        queue=nudge.queue,
        nudges=nudge.number,
        last_nudged_at=nudge.charged_at,
        named_todo=nudge.todo.id,
    )


def reset_row(row: LedgerRow, now: datetime) -> LedgerRow:
    """The row after progress no charge answered this tick: count 0, the progress kept.

    The stamp and the named todo stay, so a refund of an earlier nudge no
    longer matches, and the progress outlives the claim or departure that
    showed it.
    """
    kept = row.progressed_at if row.progressed_at is not None else now
    return attrs.evolve(row, nudges=0, progressed_at=kept)


def refunded_row(row: LedgerRow | None, nudge: Nudge) -> LedgerRow | None:
    """The row after refunding ``nudge``, which reached no receiver; None when nothing to refund.

    Compare-and-set: only the row that nudge's own charge wrote (same count,
    stamp and named todo) is refunded, so a refund can never undo a later
    charge, a reset or a clear. The stamp stays: the retry waits one step.
    """
    written = (row.nudges, row.last_nudged_at, row.named_todo) if row is not None else None
    if written != (nudge.number, nudge.charged_at, nudge.todo.id):
        return None
    assert row is not None  # it matched
    return attrs.evolve(row, nudges=row.nudges - 1)


def decide(pair: PairState, row: LedgerRow | None, now: datetime, policy: PacingPolicy) -> Decision:
    """Classify one pair at ``now``: charge, wait, capped, clear, reset or idle."""
    aware("now", now)
    if row is not None and row.key != pair.key:
        raise ValueError(f"ledger row {row.key!r} does not belong to pair {pair.key!r}")
    work = _candidacy(pair, now, policy)
    if work is IdleReason.NO_WORK and row is not None:
        return Clear()
    if isinstance(work, IdleReason):
        return Reset(reason=work) if made_progress(pair, row) else Idle(reason=work)
    if starts_over(pair, row):
        return Charge(number=1, todo=work)
    assert row is not None  # starts_over is True without a row
    due_at = next_due_at(row, policy)
    if due_at is None:
        return Capped(nudges=row.nudges)
    if now >= due_at:
        return Charge(number=row.nudges + 1, todo=work)
    return Wait(due_at=due_at)


@attrs.frozen(kw_only=True)
class TickPlan:
    """One tick's work: nudges to charge (at most tick_limit), rows to clear and to reset."""

    charges: tuple[Nudge, ...]
    cleared: tuple[PairKey, ...]
    #: Pairs that were due but held back by the tick limit.
    held_back: int = 0
    #: Rows with progress this tick does not charge (``Reset``, or held back): ``reset_row``.
    reset: tuple[PairKey, ...] = ()


def plan_tick(
    pairs: Iterable[PairState],
    ledger_rows: Mapping[PairKey, LedgerRow],
    now: datetime,
    policy: PacingPolicy,
) -> TickPlan:
    """Decide one tick over a whole board.

    Due pairs are charged in ``charge_order``, at most ``tick_limit`` of
    them, so every ledger picks the same four. A row whose pair is absent
    from ``pairs`` has no pending work: cleared. A row with progress that is
    not charged (a ``Reset``, or held back by the tick limit) is reset.
    """
    due: list[tuple[tuple[int, datetime, str, str], Nudge]] = []
    cleared: list[PairKey] = []
    reset: list[PairKey] = []
    progressed: set[PairKey] = set()
    seen: set[PairKey] = set()
    for pair in pairs:
        if pair.key in seen:
            raise ValueError(f"pair {pair.key!r} appears twice")
        seen.add(pair.key)
        row = ledger_rows.get(pair.key)
        decision = decide(pair, row, now, policy)
        if isinstance(decision, Clear):
            cleared.append(pair.key)
        elif isinstance(decision, Reset):
            reset.append(pair.key)
        elif isinstance(decision, Charge):
            if made_progress(pair, row):
                progressed.add(pair.key)
            nudge = Nudge(
                endpoint_id=pair.endpoint_id,
                queue=pair.queue,
                todo=decision.todo,
                number=decision.number,
                charged_at=now,
            )
            order = charge_order(decision.number - 1, decision.todo, *pair.key)
            due.append((order, nudge))
    cleared.extend(key for key in ledger_rows if key not in seen)
    due.sort(key=lambda item: item[0])
    charges = tuple(nudge for _, nudge in due[: policy.tick_limit])
    reset.extend(n.key for _, n in due[policy.tick_limit :] if n.key in progressed)
    return TickPlan(
        charges=charges,
        cleared=tuple(sorted(cleared)),
        held_back=max(0, len(due) - policy.tick_limit),
        reset=tuple(sorted(reset)),
    )


#: The longest a ledger that judges only what changed may go without judging every
#: pair: the bound on how late a change no timestamp shows (a hook re-enabled, a
#: delivery verified later, a todo deleted) is seen.
FULL_PASS_INTERVAL = timedelta(minutes=5)


def full_pass_due(
    last_full_pass_at: datetime | None, now: datetime, interval: timedelta = FULL_PASS_INTERVAL
) -> bool:
    """True when this tick must judge every pair: none yet, or ``interval`` has passed.

    A clock that went back (a moved test clock, a restored database) also
    asks for one: a full pass is never wrong, only dearer.
    """
    aware("now", now)
    if not interval > timedelta(0):
        raise ValueError(f"the full-pass interval must be positive, got {interval!r}")
    if last_full_pass_at is None:
        return True
    aware("last_full_pass_at", last_full_pass_at)
    return not last_full_pass_at <= now < last_full_pass_at + interval


def swept_recently(swept_at: datetime | None, now: datetime, every: timedelta | None) -> bool:
    """True when a looping instance skips: the fleet swept less than ``every`` before ``now``.

    A record from the future (a moved test clock, a restored database) does
    not hold a tick back: skipping is for pacing, and a stale record must
    never stop the sweep.
    """
    aware("now", now)
    if every is None or swept_at is None:
        return False
    return swept_at <= now < swept_at + every


#: A tick skipped while its fleet's record says a sweep is due met another instance
#: holding the tick (sweeping, or refunding); it looks again after this part of an
#: interval, not at once: the holder's record commits only when it is done.
HELD_RETRY_FRACTION = 10


def next_sweep_in(
    swept_at: datetime | None, now: datetime, every: timedelta, *, skipped: bool = False
) -> timedelta:
    """How long a looping instance waits after a tick at ``now``: to ``every`` past the last sweep.

    The fleet's record, not this instance's own phase, sets the pace, so N
    instances on any phases sweep once an interval between them. Never more
    than ``every`` (a record from the future, a moved clock), never less than
    nothing; without a record, a whole interval. A ``skipped`` tick that
    found a sweep due found the tick held by another instance, whose record
    is not committed yet: it looks again after ``every / HELD_RETRY_FRACTION``
    (looking again at once would query the database in a loop until then).
    """
    aware("now", now)
    if swept_at is None:
        return every
    wait = min(max(swept_at + every - now, timedelta(0)), every)
    if skipped and not wait:
        return every / HELD_RETRY_FRACTION
    return wait
