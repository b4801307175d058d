"""The status verdicts: the sweep's own decision, worded for `stall-nudge status`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stall_core import (
    LedgerRow,
    PacingPolicy,
    PairState,
    TodoRef,
    Unreadable,
    Verdict,
    pair_status,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
COUNTS = {"pending_gated": 1, "pending_ungated": 0}


def pair(
    queue: str = "lane",
    *,
    oldest_at: datetime | None = T0,
    active: bool = True,
    receiver: bool = True,
    claimed: datetime | None = None,
    departed: bool = False,
) -> PairState:
    """A stalled pair of endpoint ep; ``claimed`` is its latest claim."""
    return PairState(
        endpoint_id="ep",
        queue=queue,
        oldest=None if oldest_at is None else TodoRef(id="t", created_at=oldest_at),
        endpoint_active=active,
        has_receiver=receiver,
        latest_claim=claimed,
        named_departed=departed,
    )


def row(
    nudges: int, at: datetime, *, named: str | None = "t", progressed_at: datetime | None = None
) -> LedgerRow:
    """A ledger row of ep/lane naming todo t (None: a row an older build charged)."""
    return LedgerRow(
        endpoint_id="ep",
        queue="lane",
        nudges=nudges,
        last_nudged_at=at,
        named_todo=named,
        progressed_at=progressed_at,
    )


@pytest.mark.parametrize(
    ("state", "ledger", "now", "verdict"),
    [
        (pair(), None, T0 + minutes(1), Verdict.FRESH),
        (pair(), None, T0 + minutes(3), Verdict.DUE),
        (pair(), row(1, T0 + minutes(3)), T0 + minutes(4), Verdict.BACKING_OFF),
        (pair(), row(POLICY.cap, T0 + minutes(3)), T0 + timedelta(days=3), Verdict.CAPPED),
        (pair(receiver=False), None, T0 + minutes(3), Verdict.NO_RECEIVER),
        (pair(active=False), None, T0 + minutes(3), Verdict.ENDPOINT_INACTIVE),
        (pair("quarantine"), None, T0 + minutes(3), Verdict.QUARANTINE),
        (pair(oldest_at=None), row(2, T0), T0 + minutes(3), Verdict.DRAINED),
    ],
)
def test_each_verdict(
    state: PairState, ledger: LedgerRow | None, now: datetime, verdict: Verdict
) -> None:
    """Each kind of pair gets the verdict its sweep decision implies."""
    assert (
        verdict
        == pair_status(
            state, ledger, pending_gated=1, pending_ungated=0, now=now, policy=POLICY
        ).verdict
    )


def test_only_unverified_work_is_ungated() -> None:
    """A pair whose pending todos all failed the sender gate reads 'ungated'."""
    status = pair_status(
        pair(oldest_at=None), None, pending_gated=0, pending_ungated=3, now=T0, policy=POLICY
    )

    assert (Verdict.UNGATED, 3) == (status.verdict, status.pending_ungated)


def test_nudges_count_since_progress() -> None:
    """After a claim stamped after its last nudge, a capped pair shows 0 spent and is due now."""
    nudged = T0 + minutes(3)
    now = T0 + timedelta(hours=9)
    status = pair_status(
        pair(claimed=now - minutes(1)),
        row(POLICY.cap, nudged),
        pending_gated=2,
        pending_ungated=0,
        now=now,
        policy=POLICY,
    )

    assert (Verdict.DUE, 0, now, nudged) == (
        status.verdict,
        status.effective_nudges,
        status.next_due_at,
        status.last_nudged_at,
    )


@pytest.mark.parametrize(
    ("departed", "verdict", "spent"),
    [(True, Verdict.DUE, 0), (False, Verdict.BACKING_OFF, 2)],
    ids=["named todo departed", "named todo pending"],
)
def test_a_claim_stamped_before_the_nudge_counts_only_as_a_departure(
    departed: bool, verdict: Verdict, spent: int
) -> None:
    """A claim stamped before the last nudge is progress only if the named todo departed."""
    nudged = T0 + minutes(3)
    now = nudged + minutes(1)
    status = pair_status(
        pair(claimed=nudged - minutes(1), departed=departed),
        row(2, nudged),
        pending_gated=1,
        pending_ungated=0,
        now=now,
        policy=POLICY,
    )

    assert (verdict, spent) == (status.verdict, status.effective_nudges)


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        (pair(), Verdict.DUE),
        (pair(active=False), Verdict.ENDPOINT_INACTIVE),
        (pair(receiver=False), Verdict.NO_RECEIVER),
    ],
    ids=["candidate", "endpoint paused", "no receiver"],
)
def test_a_reset_row_shows_none_spent_and_its_pairs_reason(
    state: PairState, verdict: Verdict
) -> None:
    """A row keeping progress shows 0 spent: due when a candidate, else the pair's own reason."""
    now = T0 + timedelta(hours=2)
    status = pair_status(
        state,
        row(0, T0 + minutes(3), progressed_at=T0 + minutes(30)),
        pending_gated=1,
        pending_ungated=0,
        now=now,
        policy=POLICY,
    )

    assert (verdict, 0) == (status.verdict, status.effective_nudges)


def test_fresh_work_after_progress_is_due_at_the_threshold() -> None:
    """Fresh work on a pair that made progress is due once past the threshold, not the backoff."""
    status = pair_status(
        pair(oldest_at=T0 + minutes(9), departed=True),
        row(1, T0 + minutes(8)),
        pending_gated=1,
        pending_ungated=0,
        now=T0 + minutes(10),
        policy=POLICY,
    )

    assert (Verdict.FRESH, T0 + minutes(9) + POLICY.threshold) == (
        status.verdict,
        status.next_due_at,
    )


@pytest.mark.parametrize("named", ["t", None], ids=["named", "old build"])
def test_the_status_names_the_todo_the_last_nudge_named(named: str | None) -> None:
    """A pair's status carries its row's named todo: None for an old-build row or no row."""
    with_row = pair_status(
        pair(), row(1, T0 + minutes(3), named=named), **COUNTS, now=T0 + minutes(4), policy=POLICY
    )
    without = pair_status(pair(), None, **COUNTS, now=T0 + minutes(4), policy=POLICY)

    assert (named, None) == (with_row.named_todo, without.named_todo)


def test_a_refunded_first_nudge_backs_off_with_none_spent() -> None:
    """A refunded nudge 1 shows 0 nudges spent, backing off until its stamp + backoff[0]."""
    nudged = T0 + minutes(3)
    status = pair_status(
        pair(),
        row(0, nudged),
        pending_gated=1,
        pending_ungated=0,
        now=nudged + minutes(1),
        policy=POLICY,
    )

    assert (Verdict.BACKING_OFF, 0, nudged + POLICY.backoff[0], nudged) == (
        status.verdict,
        status.effective_nudges,
        status.next_due_at,
        status.last_nudged_at,
    )


def test_a_refunded_first_nudge_is_due_after_the_first_step() -> None:
    """At its stamp + backoff[0] a refunded pair reads due again."""
    nudged = T0 + minutes(3)
    status = pair_status(
        pair(),
        row(0, nudged),
        pending_gated=1,
        pending_ungated=0,
        now=nudged + POLICY.backoff[0],
        policy=POLICY,
    )

    assert Verdict.DUE == status.verdict


def test_backing_off_says_when_next() -> None:
    """A backing-off pair's next due time is its last nudge plus the next backoff step."""
    status = pair_status(
        pair(),
        row(2, T0 + minutes(3)),
        pending_gated=1,
        pending_ungated=0,
        now=T0 + minutes(10),
        policy=POLICY,
    )

    assert T0 + minutes(3) + POLICY.backoff[1] == status.next_due_at
    assert minutes(10) == status.oldest_age


def test_fresh_work_behind_a_backoff_is_due_at_the_later_time() -> None:
    """Fresh work on a pair still backing off is not due before its backoff ends."""
    status = pair_status(
        pair(oldest_at=T0 + minutes(9)),
        row(1, T0 + minutes(8)),
        pending_gated=1,
        pending_ungated=0,
        now=T0 + minutes(10),
        policy=POLICY,
    )

    assert (Verdict.FRESH, T0 + minutes(13)) == (status.verdict, status.next_due_at)


ODD = Unreadable(todo_id="t9", column="created_at", value="-infinity")


@pytest.mark.parametrize("ledger", [None, row(2, T0)])
def test_sendable_work_none_of_it_readable_is_unreadable(ledger: LedgerRow | None) -> None:
    """Sendable todos with no work among them and a value the sweep cannot read: 'unreadable'."""
    status = pair_status(
        pair(oldest_at=None), ledger, **COUNTS, now=T0, policy=POLICY, unreadable=ODD
    )

    assert (Verdict.UNREADABLE, ODD) == (status.verdict, status.unreadable)


def test_an_unreadable_value_beside_readable_work_keeps_the_verdict() -> None:
    """A pair with readable work is judged on it; the value it cannot read is shown beside."""
    status = pair_status(pair(), None, **COUNTS, now=T0 + minutes(3), policy=POLICY, unreadable=ODD)

    assert (Verdict.DUE, ODD) == (status.verdict, status.unreadable)


def test_fresh_work_at_the_end_of_the_range_is_due_at_its_last_instant() -> None:
    """Work created just before year 10000 is fresh, due at the range's last instant."""
    late = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    status = pair_status(pair(oldest_at=late), None, **COUNTS, now=T0, policy=POLICY)

    assert (Verdict.FRESH, datetime.max.replace(tzinfo=UTC)) == (
        status.verdict,
        status.next_due_at,
    )
