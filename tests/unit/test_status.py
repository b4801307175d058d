"""The status verdicts: the sweep's own decision, worded for `stall-nudge status`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from stall_core import (
    NEXT_STEPS,
    QUARANTINE_QUEUE,
    HistoryEntry,
    LedgerRow,
    PacingPolicy,
    PairState,
    PairStatus,
    Receiver,
    Silence,
    TodoRef,
    Unreadable,
    Verdict,
    next_step,
    pair_status,
    receiver_health,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
LONG = "q" * 2000  # with endpoint "ep", two bytes past names_fit
ODD = Unreadable(todo_id="t9", column="created_at", value="-infinity")


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


def status(
    state: PairState,
    ledger: LedgerRow | None,
    now: datetime,
    *,
    sendable: int = 1,
    held_by_gate: int = 0,
    unreadable: Unreadable | None = None,
) -> PairStatus:
    """The pair's status at ``now`` under the default policy."""
    return pair_status(
        state,
        ledger,
        sendable=sendable,
        held_by_gate=held_by_gate,
        now=now,
        policy=POLICY,
        unreadable=unreadable,
    )


@pytest.mark.parametrize(
    ("state", "ledger", "now", "counts", "verdict"),
    [
        (pair(), None, T0 + minutes(1), (1, 0), Verdict.FRESH),
        (pair(), None, T0 + minutes(3), (1, 0), Verdict.DUE),
        (pair(), row(1, T0 + minutes(3)), T0 + minutes(4), (1, 0), Verdict.BACKING_OFF),
        (pair(), row(POLICY.cap, T0 + minutes(3)), T0 + timedelta(days=3), (1, 0), Verdict.CAPPED),
        (pair(receiver=False), None, T0 + minutes(3), (1, 0), Verdict.NO_RECEIVER),
        (pair(active=False), None, T0 + minutes(3), (1, 0), Verdict.ENDPOINT_INACTIVE),
        (pair(QUARANTINE_QUEUE, oldest_at=None), None, T0, (1, 2), Verdict.QUARANTINE),
        (pair(oldest_at=None), None, T0, (0, 3), Verdict.HELD_BY_GATE),
        (pair(oldest_at=None), row(2, T0), T0, (0, 3), Verdict.HELD_BY_GATE),
        (pair(LONG, oldest_at=None), None, T0, (1, 0), Verdict.NAMES_TOO_LONG),
        (pair(LONG, oldest_at=None), None, T0, (0, 1), Verdict.NAMES_TOO_LONG),
        (pair(LONG, oldest_at=None), None, T0, (0, 0), Verdict.DRAINED),
        (pair(oldest_at=None), row(2, T0), T0 + minutes(3), (0, 0), Verdict.DRAINED),
    ],
    ids=[
        "fresh",
        "due",
        "backing off",
        "capped",
        "no receiver",
        "endpoint inactive",
        "quarantine",
        "held by gate",
        "held by gate, leftover row",
        "long names, sendable",
        "long names, held",
        "long names, nothing pending",
        "drained, leftover row",
    ],
)
def test_each_verdict(
    state: PairState,
    ledger: LedgerRow | None,
    now: datetime,
    counts: tuple[int, int],
    verdict: Verdict,
) -> None:
    """Each kind of pair gets the verdict its sweep decision implies, with its counts."""
    sendable, held = counts
    shown = status(state, ledger, now, sendable=sendable, held_by_gate=held)

    assert (verdict, sendable, held) == (shown.verdict, shown.sendable, shown.held_by_gate)


@pytest.mark.parametrize(
    ("state", "ledger", "now", "shown"),
    [
        # A capped pair claimed after its last nudge: none spent, due now.
        (
            pair(claimed=T0 + timedelta(hours=9) - minutes(1)),
            row(POLICY.cap, T0 + minutes(3)),
            T0 + timedelta(hours=9),
            (Verdict.DUE, 0, T0 + timedelta(hours=9)),
        ),
        # With no new claim, the named todo departed is progress; still there, it is not.
        (
            pair(departed=True),
            row(2, T0 + minutes(3)),
            T0 + minutes(4),
            (Verdict.DUE, 0, T0 + minutes(4)),
        ),
        (
            pair(),
            row(2, T0 + minutes(3)),
            T0 + minutes(4),
            (Verdict.BACKING_OFF, 2, T0 + minutes(3) + POLICY.backoff[1]),
        ),
        # A refunded nudge 1 spends none, backing off until its stamp + backoff[0].
        (
            pair(),
            row(0, T0 + minutes(3)),
            T0 + minutes(4),
            (Verdict.BACKING_OFF, 0, T0 + minutes(3) + POLICY.backoff[0]),
        ),
        # A row keeping progress shows none spent; not a candidate, the pair's own reason.
        (
            pair(active=False),
            row(0, T0 + minutes(3), progressed_at=T0 + minutes(30)),
            T0 + timedelta(hours=2),
            (Verdict.ENDPOINT_INACTIVE, 0, None),
        ),
        # Fresh work after progress is due past the threshold; still backing off, after it.
        (
            pair(oldest_at=T0 + minutes(9), departed=True),
            row(1, T0 + minutes(8)),
            T0 + minutes(10),
            (Verdict.FRESH, 0, T0 + minutes(9) + POLICY.threshold),
        ),
        (
            pair(oldest_at=T0 + minutes(9)),
            row(1, T0 + minutes(8)),
            T0 + minutes(10),
            (Verdict.FRESH, 1, T0 + minutes(13)),
        ),
        # Work created just before year 10000 is fresh, due at the range's last instant.
        (
            pair(oldest_at=datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
            None,
            T0,
            (Verdict.FRESH, None, datetime.max.replace(tzinfo=UTC)),
        ),
    ],
    ids=[
        "progress",
        "departed",
        "no new claim",
        "refunded",
        "kept",
        "fresh after progress",
        "fresh in backoff",
        "fresh at the end",
    ],
)
def test_nudges_spent_and_next_due_follow_the_decision(
    state: PairState,
    ledger: LedgerRow | None,
    now: datetime,
    shown: tuple[Verdict, int | None, datetime | None],
) -> None:
    """The status shows the count since progress and when the next nudge is due, as decided."""
    got = status(state, ledger, now)

    assert shown == (got.verdict, got.effective_nudges, got.next_due_at)


def test_the_status_shows_the_row_and_the_oldest_age() -> None:
    """A pair's status carries its row's stamp and named todo, and how old its work is."""
    with_row = status(pair(), row(1, T0 + minutes(3), named=None), T0 + minutes(4))
    without = status(pair(), None, T0 + minutes(4))

    assert (T0 + minutes(3), None, minutes(4)) == (
        with_row.last_nudged_at,
        with_row.named_todo,
        with_row.oldest_age,
    )
    assert ("t", None, None) == (
        status(pair(), row(1, T0 + minutes(3)), T0 + minutes(4)).named_todo,
        without.named_todo,
        without.last_nudged_at,
    )


@pytest.mark.parametrize("ledger", [None, row(2, T0)])
def test_sendable_work_none_of_it_readable_is_unreadable(ledger: LedgerRow | None) -> None:
    """Sendable todos with no work among them and a value the sweep cannot read: 'unreadable'."""
    shown = status(pair(oldest_at=None), ledger, T0, unreadable=ODD)

    assert (Verdict.UNREADABLE, ODD) == (shown.verdict, shown.unreadable)


def test_an_unreadable_value_beside_readable_work_keeps_the_verdict() -> None:
    """A pair with readable work is judged on it; the value it cannot read is shown beside."""
    shown = status(pair(), None, T0 + minutes(3), unreadable=ODD)

    assert (Verdict.DUE, ODD) == (shown.verdict, shown.unreadable)


def test_verdicts_read_with_hyphens() -> None:
    """Every verdict's word is lower case with hyphens, as `status` prints it."""
    assert "held-by-gate" == Verdict.HELD_BY_GATE.value
    assert "names-too-long" == Verdict.NAMES_TOO_LONG.value
    assert all(v.value == v.name.lower().replace("_", "-") for v in Verdict)


def test_a_pair_no_enabled_hook_covers_has_no_receiver_whatever_its_verdict() -> None:
    """Drained or fresh, a pair with no enabled covering hook reads "none", never "ok"."""
    drained = status(pair(oldest_at=None, receiver=False), None, T0, sendable=0)
    fresh = status(pair(oldest_at=T0, receiver=False), None, T0 + minutes(1))
    covered = status(pair(oldest_at=None), None, T0, sendable=0)

    assert (Verdict.DRAINED, Receiver.NONE) == (drained.verdict, receiver_health(drained))
    assert Receiver.NONE is receiver_health(fresh)
    assert Receiver.OK is receiver_health(covered)


def test_a_receiver_is_failing_then_recovered_until_a_nudge_is_delivered() -> None:
    """Failures in a row: failing. None in a row, the pair's latest settled nudge having found
    no receiver answering: a success reset them since, so the receiver answers again. A later
    delivered nudge, or a last nudge our own dispatcher refused, is plain ok."""
    failed_at = T0 - minutes(30)

    def charge(at: datetime, outcome: str | None) -> HistoryEntry:
        return HistoryEntry(at=at, endpoint_id="ep-1", queue="lane-l", event="charged",
                            nudge=1, todo_id="t1", outcome=outcome)  # fmt: skip

    failing = pair_status(
        pair(), None, sendable=1, held_by_gate=0, now=T0, policy=POLICY, hook_failures=2,
        last_failure_at=failed_at, last_outcomes=[charge(failed_at, "gave-up")],
    )  # fmt: skip
    answered = attrs.evolve(failing, hook_failures=0)
    under_way = attrs.evolve(answered, last_outcomes=(charge(T0, None), *answered.last_outcomes))
    delivered = attrs.evolve(answered, last_outcomes=(charge(T0, "delivered"),))
    refused = attrs.evolve(answered, last_outcomes=(charge(T0, "refused"),))

    assert Receiver.FAILING is receiver_health(failing)
    assert (Receiver.RECOVERED, failed_at) == (receiver_health(answered), answered.last_failure_at)
    assert Receiver.RECOVERED is receiver_health(under_way)
    assert (Receiver.OK, Receiver.OK) == (receiver_health(delivered), receiver_health(refused))


PROBLEMS = {
    Verdict.CAPPED,
    Verdict.NO_RECEIVER,
    Verdict.ENDPOINT_INACTIVE,
    Verdict.HELD_BY_GATE,
    Verdict.UNREADABLE,
    Verdict.NAMES_TOO_LONG,
}


@pytest.mark.parametrize("verdict", list(Verdict), ids=lambda v: v.value)
def test_each_problem_verdict_has_one_next_step_and_the_others_none(verdict: Verdict) -> None:
    """A person's verdicts say what to do in one line naming the pair; the sweep's own (due,
    backing off, fresh, drained, quarantine by design) need nothing."""
    judged = PairStatus(
        endpoint_id="ep-1",
        queue="lane-m",
        sendable=1,
        held_by_gate=0,
        oldest_age=minutes(30),
        effective_nudges=5,
        last_nudged_at=None,
        next_due_at=None,
        verdict=verdict,
    )

    step = next_step(judged)

    assert (verdict in PROBLEMS) is (step is not None)
    assert step is None or ("\n" not in step and ("lane-m" in step or "ep-1" in step))
    assert set(NEXT_STEPS) == PROBLEMS


def test_the_next_step_reads_as_the_issue_asks_and_escapes_names() -> None:
    """The wording for a queue no hook covers; a name's control characters are escaped."""
    uncovered = status(pair("lane-m", receiver=False), None, T0 + minutes(30))
    hostile = status(pair("lane\x1b[2J", receiver=False), None, T0 + minutes(30))

    assert (
        "no enabled hook covers lane-m: enable one, or this queue is drained by pull only"
        == next_step(uncovered)
    )
    assert "lane\\x1b[2J" in (next_step(hostile) or "")


@pytest.mark.parametrize(
    ("verdict", "failing_step"),
    [
        (Verdict.DUE, True),
        (Verdict.BACKING_OFF, True),
        (Verdict.CAPPED, True),
        (Verdict.DRAINED, False),
        (Verdict.HELD_BY_GATE, False),
    ],
)
def test_a_failing_receiver_is_the_next_step_of_a_pair_the_sweep_nudges(
    verdict: Verdict, failing_step: bool
) -> None:
    """Due, backing off or capped with a hook failing every attempt: fix the receiver first."""
    judged = attrs.evolve(status(pair(), None, T0 + minutes(30)), verdict=verdict, hook_failures=3)

    step = next_step(judged) or ""

    assert failing_step is step.startswith("ep's hook fails every attempt")


def silence(queue: str | None, ends_at: datetime, *, by: str = "ann") -> Silence:
    """An operator's silence on endpoint ep (``queue`` None: every queue), set at T0."""
    return Silence(
        endpoint_id="ep", queue=queue, starts_at=T0, ends_at=ends_at, by=by, reason="deploy"
    )


def silenced(
    state: PairState, ledger: LedgerRow | None, now: datetime, *silences: Silence
) -> PairStatus:
    """The pair's status with ``silences`` not ended yet, as a ledger reads them."""
    ends = [s.ends_at for s in silences if s.queue in (None, state.queue) and now < s.ends_at]
    return pair_status(
        attrs.evolve(state, silenced_until=max(ends, default=None)),
        ledger,
        sendable=1,
        held_by_gate=0,
        now=now,
        policy=POLICY,
        silences=silences,
    )


@pytest.mark.parametrize(
    ("ledger", "due", "count"),
    [
        (None, T0 + timedelta(hours=2), None),
        (row(1, T0 + minutes(3)), T0 + timedelta(hours=2), 1),
        (row(4, T0 + minutes(3)), T0 + minutes(3) + POLICY.backoff[3], 4),
        (row(4, T0 + minutes(3), progressed_at=T0 + minutes(4)), T0 + timedelta(hours=2), 0),
        (row(POLICY.cap, T0 + minutes(3)), None, POLICY.cap),
    ],
    ids=["no row", "backoff over first", "backoff later", "progress kept", "capped"],
)
def test_a_silenced_candidate_reads_silenced_and_is_due_when_it_ends(
    ledger: LedgerRow | None, due: datetime | None, count: int | None
) -> None:
    """Silenced, with the silence shown and its count kept; next due when the silence ends, or
    when its backoff does if later; never, once capped. No step: an operator's choice."""
    cover = silence(None, T0 + timedelta(hours=2))

    shown = silenced(pair(), ledger, T0 + minutes(30), cover)

    assert (Verdict.SILENCED, due, count) == (
        shown.verdict,
        shown.next_due_at,
        shown.effective_nudges,
    )
    assert (T0 + timedelta(hours=2), cover) == (shown.silenced_until, shown.silence)
    assert next_step(shown) is None


def test_the_silence_shown_is_the_one_covering_the_pair_that_ends_last() -> None:
    """An endpoint's silence and the pair's own: the later end; another queue's, or one
    ended, never."""
    now = T0 + minutes(30)
    own, whole = silence("lane", T0 + timedelta(hours=1)), silence(None, T0 + timedelta(hours=3))
    other, ended = silence("lane-x", T0 + timedelta(hours=9)), silence("lane", now)

    assert whole == silenced(pair(), None, now, own, whole, other, ended).silence
    assert own == silenced(pair(), None, now, own, other, ended).silence
    assert None is silenced(pair(), None, now, other, ended).silence


def test_a_silence_is_shown_on_a_pair_that_is_not_a_candidate_and_keeps_its_verdict() -> None:
    """Fresh work, or none: the pair is judged as ever, and carries the silence beside it."""
    cover = silence(None, T0 + timedelta(hours=2))
    fresh = silenced(pair(), None, T0 + minutes(1), cover)
    drained = silenced(pair(oldest_at=None), row(2, T0), T0 + minutes(1), cover)

    assert (Verdict.FRESH, cover) == (fresh.verdict, fresh.silence)
    assert (Verdict.DRAINED, cover) == (drained.verdict, drained.silence)
