"""The soak's invariants as pure functions of what was recorded (no IO, no clock).

Inputs are the sweepers' journals (every charge each one got back from
``charge_due``, and every drained row), the receiver's log (every request,
its ``webhook-id`` and ``meta``) and the todos' final claim times from the
database. ``tests/soak/test_check.py`` feeds each check a planted violation,
so a zero in the soak's last line means "looked and found none".
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import attrs

from stall_core import PacingPolicy

__all__ = [
    "ChargeRecord",
    "Findings",
    "MessageRecord",
    "check",
]

PairKey = tuple[str, str]

#: A claim this long after a number-1 charge still explains it: the sweeper read
#: ``now`` before the consumer's claim committed, then saw the claim.
CLAIM_SLACK = timedelta(seconds=5)


@attrs.frozen(kw_only=True)
class ChargeRecord:
    """One charge a sweeper got back: nudge ``number`` of the pair, charged at ``at``."""

    worker: int
    endpoint_id: str
    queue: str
    number: int
    at: datetime

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.frozen(kw_only=True)
class MessageRecord:
    """One request the receiver got: a stalled message carries its charge's instant as sent_at."""

    webhook_id: str
    endpoint_id: str
    queue: str
    reason: str
    sent_at: datetime
    answered: int  # the status the receiver answered, 0 when it reset or hung


@attrs.frozen(kw_only=True)
class Findings:
    """What the checks found; every count but ``charges`` and ``wakes`` must be 0."""

    charges: int
    #: stalled messages (distinct webhook-ids) a consumer was woken by (answered 2xx)
    wakes: int
    #: messages beyond the first for one charge, plus charges that broke pacing
    duplicates: int
    extra_messages: int
    pacing_violations: int
    #: stalled messages whose (endpoint, queue, sent_at) matches no recorded charge
    unattributed: int
    #: the most charges of one pair between two of its claims, within one ledger epoch
    max_between_claims: int
    examples: tuple[str, ...] = ()


def _epoch(at: datetime, boundaries: Sequence[datetime]) -> int:
    return sum(1 for b in boundaries if b <= at)


def check(
    *,
    charges: Iterable[ChargeRecord],
    messages: Iterable[MessageRecord],
    claims: Mapping[PairKey, Sequence[datetime]],
    drains: Mapping[PairKey, Sequence[datetime]],
    ledger_resets: Sequence[datetime],
    policy: PacingPolicy,
) -> Findings:
    """Run every invariant over one soak's records.

    ``ledger_resets`` are the instants the ledger table was dropped: pacing
    legitimately starts over there, so each check runs within one epoch.
    """
    examples: list[str] = []
    by_pair: dict[PairKey, list[ChargeRecord]] = defaultdict(list)
    for charge in charges:
        by_pair[charge.key].append(charge)
    charge_ids = {(c.endpoint_id, c.queue, c.at) for cs in by_pair.values() for c in cs}

    # One charge, one message: count distinct webhook-ids per charge.
    ids_per_charge: dict[tuple[str, str, datetime], set[str]] = defaultdict(set)
    woken: set[str] = set()
    unattributed: set[str] = set()
    for m in messages:
        if m.reason != "stalled":
            continue
        charge_id = (m.endpoint_id, m.queue, m.sent_at)
        if charge_id not in charge_ids:
            unattributed.add(m.webhook_id)
            continue
        ids_per_charge[charge_id].add(m.webhook_id)
        if 200 <= m.answered < 300:
            woken.add(m.webhook_id)
    extra = 0
    for charge_id, ids in ids_per_charge.items():
        if len(ids) > 1:
            extra += len(ids) - 1
            examples.append(f"charge {charge_id} sent as {len(ids)} messages")

    # Pacing: each pair's charges in time order must follow the policy.
    violations = 0
    worst = 0
    resets = sorted(ledger_resets)
    for key, pair_charges in by_pair.items():
        pair_charges.sort(key=lambda c: c.at)
        pair_claims = sorted(claims.get(key, ()))
        pair_drains = sorted(drains.get(key, ()))
        for prev, cur in itertools.pairwise(pair_charges):
            if _epoch(prev.at, resets) != _epoch(cur.at, resets):
                continue
            problem = _pacing_problem(prev, cur, pair_claims, pair_drains, policy)
            if problem:
                violations += 1
                examples.append(f"{key}: {problem}")
        worst = max(worst, _most_between_claims(pair_charges, pair_claims, resets))
    return Findings(
        charges=sum(len(cs) for cs in by_pair.values()),
        wakes=len(woken),
        duplicates=extra + violations,
        extra_messages=extra,
        pacing_violations=violations,
        unattributed=len(unattributed),
        max_between_claims=worst,
        examples=tuple(examples[:10]),
    )


def _pacing_problem(
    prev: ChargeRecord,
    cur: ChargeRecord,
    claims: Sequence[datetime],
    drains: Sequence[datetime],
    policy: PacingPolicy,
) -> str | None:
    """Why ``cur`` should not have been charged after ``prev``, or None when it was due."""
    if cur.number == 1:
        # A fresh start needs progress (a claim after prev) or a drained row in between.
        explained = any(prev.at < c <= cur.at + CLAIM_SLACK for c in claims) or any(
            prev.at < d <= cur.at for d in drains
        )
        if explained:
            return None
        return (
            f"nudge 1 at {cur.at.isoformat()} (w{cur.worker}) only "
            f"{(cur.at - prev.at).total_seconds():.3f}s after nudge {prev.number} "
            f"(w{prev.worker}) with no claim or drain between"
        )
    if cur.number != prev.number + 1:
        return f"nudge {cur.number} (w{cur.worker}) follows nudge {prev.number} (w{prev.worker})"
    due = prev.at + policy.delay_before(cur.number)
    if cur.at < due:
        return (
            f"nudge {cur.number} (w{cur.worker}) at {cur.at.isoformat()} before its due "
            f"{due.isoformat()} (nudge {prev.number} by w{prev.worker})"
        )
    return None


def _most_between_claims(
    charges: Sequence[ChargeRecord], claims: Sequence[datetime], resets: Sequence[datetime]
) -> int:
    """The most charges of one pair falling between two consecutive claims, in one epoch."""
    marks = sorted([*claims, *resets])
    counts: Counter[int] = Counter()
    for charge in charges:
        counts[sum(1 for m in marks if m <= charge.at)] += 1
    return max(counts.values(), default=0)
