"""The exact SPEC-0038 schedule, driven through plan_tick alone with a plain-values loop.

The loop plays the ledger: it keeps the rows and the progress log (claims not
yet absorbed), fills each pair's ``progress_at`` from it, and after
each tick absorbs the claims of charged, drained and row-less pairs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta

import attrs
import pytest

from stall_core import (
    FULL_PASS_INTERVAL,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    TodoRef,
    Wait,
    charge_row,
    decide,
    full_pass_due,
    plan_tick,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
KEY = ("ep", "lane")
STEP = timedelta(seconds=15)


def stalled(created_at: datetime = T0, todo_id: str = "t1") -> PairState:
    """The one pair of these tests: active, reachable, with gated pending work."""
    return PairState(
        endpoint_id="ep",
        queue="lane",
        oldest=TodoRef(id=todo_id, created_at=created_at),
        endpoint_active=True,
        has_receiver=True,
    )


class Loop:
    """Ticks plan_tick over a board and applies its plan to ledger rows and a claim log."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.rows: dict[PairKey, LedgerRow] = {}
        #: The progress log: per pair, the claims no tick has absorbed yet.
        self.claims: dict[PairKey, list[datetime]] = {}
        self.fired: list[tuple[timedelta, int]] = []
        self.drained: list[tuple[timedelta, PairKey]] = []

    def claim(self, at: datetime, key: PairKey = KEY) -> None:
        """Log a claim on a todo of the pair, made now (in program order), stamped ``at``."""
        self.claims.setdefault(key, []).append(at)

    def tick(self, board: list[PairState]) -> tuple[Nudge, ...]:
        """Plan one tick at ``now`` and apply it as a ledger would, absorbing claims."""
        board = [
            attrs.evolve(p, progress_at=max(self.claims.get(p.key, ()), default=None))
            for p in board
        ]
        plan = plan_tick(board, self.rows, self.now, POLICY)
        absorbed = {n.key for n in plan.charges} | set(plan.drained)
        absorbed |= self.claims.keys() - self.rows.keys()
        for key in absorbed:
            self.claims.pop(key, None)
        for key in plan.drained:
            del self.rows[key]
            self.drained.append((self.now - T0, key))
        for nudge in plan.charges:
            self.rows[nudge.key] = charge_row(nudge)
            self.fired.append((self.now - T0, nudge.number))
        return plan.charges

    def run_until(self, end: datetime, board: Callable[[], list[PairState]]) -> None:
        """Tick every STEP from now until ``end`` (exclusive)."""
        while self.now < end:
            self.tick(board())
            self.now += STEP


def test_first_nudge_at_the_first_tick_past_the_threshold() -> None:
    """Nudge 1 fires on the first tick strictly past the two-minute threshold."""
    loop = Loop(T0)

    loop.run_until(T0 + minutes(4), lambda: [stalled()])

    assert (minutes(2) + STEP, 1) == loop.fired[0]


def test_the_exact_schedule() -> None:
    """Nudges 2..5 follow 5 min, 20 min, 1 h and 6 h after the previous one."""
    loop = Loop(T0)

    loop.run_until(T0 + timedelta(hours=9), lambda: [stalled()])

    first = minutes(2) + STEP
    assert [
        (first, 1),
        (first + minutes(5), 2),
        (first + minutes(25), 3),
        (first + minutes(85), 4),
        (first + minutes(445), 5),
    ] == loop.fired


def test_one_tick_before_each_step_is_a_wait() -> None:
    """One tick before each backoff step ends, decide says Wait with the step's due time."""
    loop = Loop(T0)
    loop.run_until(T0 + timedelta(hours=9), lambda: [stalled()])
    first = T0 + minutes(2) + STEP
    fired_at = [T0 + offset for offset, _ in loop.fired]

    for number, (previous, due) in enumerate(itertools.pairwise(fired_at), start=1):
        row = LedgerRow(endpoint_id="ep", queue="lane", nudges=number, last_nudged_at=previous)
        assert due - previous == POLICY.delay_before(number + 1)
        assert Wait(due_at=due) == decide(stalled(), row, due - STEP, POLICY)
        assert () == plan_tick([stalled()], {KEY: row}, due - STEP, POLICY).charges
    assert first == fired_at[0]


def test_a_stalled_queue_backs_off_and_stops() -> None:
    """A stalled queue backs off and stops: nothing after nudge 5 for days without progress."""
    loop = Loop(T0)

    loop.run_until(T0 + timedelta(days=4), lambda: [stalled()])

    assert [1, 2, 3, 4, 5] == [number for _, number in loop.fired]
    assert 5 == loop.rows[KEY].nudges
    assert [] == loop.drained


def test_progress_keeps_the_short_cadence() -> None:
    """Progress keeps the short cadence: a claim at count 4 makes the pair due at once, at 1."""
    loop = Loop(T0)
    loop.run_until(T0 + timedelta(hours=2), lambda: [stalled()])
    assert 4 == loop.rows[KEY].nudges

    loop.claim(loop.now)
    loop.now += STEP
    charges = loop.tick([stalled(created_at=T0 + timedelta(seconds=1))])

    assert [(1, loop.now)] == [(n.number, n.charged_at) for n in charges]
    assert 1 == loop.rows[KEY].nudges


def test_after_progress_the_schedule_restarts() -> None:
    """After a progress charge, nudge 2 again waits 5 minutes, then 20, and so on."""
    loop = Loop(T0)
    loop.run_until(T0 + timedelta(hours=2), lambda: [stalled()])
    loop.claim(loop.now)
    restart = loop.now + STEP
    loop.now = restart
    loop.fired.clear()

    # The claim is logged once; the restart charge absorbs it, so it resets only that one.
    loop.run_until(restart + timedelta(hours=1), lambda: [stalled(T0)])

    assert [
        (restart - T0, 1),
        (restart - T0 + minutes(5), 2),
        (restart - T0 + minutes(25), 3),
    ] == loop.fired


def test_a_claim_after_the_cap_restarts_the_pair() -> None:
    """A capped pair whose consumer finally claims is due at once with count 1."""
    loop = Loop(T0)
    loop.run_until(T0 + timedelta(days=1), lambda: [stalled()])
    assert 5 == loop.rows[KEY].nudges

    loop.claim(loop.now - STEP)
    charges = loop.tick([stalled()])

    assert [1] == [n.number for n in charges]


def test_a_drained_queue_does_not_ring() -> None:
    """A drained queue does not ring: its row is deleted and the next backlog starts at 1."""
    loop = Loop(T0)
    loop.run_until(T0 + minutes(10), lambda: [stalled()])
    assert 2 == loop.rows[KEY].nudges

    # The consumer claims the last todo: the pair has no work left.
    loop.claim(loop.now)
    drained = PairState(
        endpoint_id="ep",
        queue="lane",
        oldest=None,
        endpoint_active=True,
        has_receiver=True,
    )
    loop.now += STEP
    assert () == loop.tick([drained])
    assert {} == loop.rows
    assert [(loop.now - T0, KEY)] == loop.drained
    # The drain absorbed that claim: it cannot count for the next backlog.
    assert {} == loop.claims

    # The drained pair then leaves the board entirely; the next backlog arrives later.
    loop.now += timedelta(hours=3)
    new_at = loop.now
    loop.fired.clear()
    loop.run_until(new_at + minutes(10), lambda: [stalled(created_at=new_at)])

    assert [(new_at - T0 + minutes(2) + STEP, 1), (new_at - T0 + minutes(7) + STEP, 2)] == (
        loop.fired
    )


def test_consumer_woken_each_time_claims_one_and_drains_the_queue() -> None:
    """A one-todo-per-wake consumer is re-woken at the short cadence until the queue empties."""
    pending = [T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)]

    def board() -> list[PairState]:
        if not pending:
            return []
        return [stalled(created_at=pending[0], todo_id=f"t{3 - len(pending)}")]

    loop = Loop(T0)
    while loop.now < T0 + timedelta(hours=1):
        for _ in loop.tick(board()):
            pending.pop(0)
            loop.claim(loop.now + timedelta(seconds=1))
        loop.now += STEP

    assert [1, 1, 1] == [number for _, number in loop.fired]
    # Each nudge after the first comes one tick after the claim the previous one caused.
    assert [minutes(2) + STEP, minutes(2) + 2 * STEP, minutes(2) + 3 * STEP] == [
        at for at, _ in loop.fired
    ]
    assert {} == loop.rows


def test_the_first_tick_is_a_full_pass() -> None:
    """With no full pass on record, a tick judges every pair."""
    assert full_pass_due(None, T0)


def test_a_full_pass_comes_round_once_per_interval() -> None:
    """Within the interval a tick judges what changed; at its end, every pair again."""
    interval = timedelta(minutes=5)
    assert [False, False, True, True] == [
        full_pass_due(T0, at, interval)
        for at in (T0, T0 + interval - timedelta(microseconds=1), T0 + interval, T0 + interval * 9)
    ]


def test_a_clock_that_went_back_asks_for_a_full_pass() -> None:
    """A full pass is never wrong: a last pass in the future does not silence the next ones."""
    assert full_pass_due(T0, T0 - timedelta(microseconds=1))


def test_the_default_full_pass_interval_is_five_minutes() -> None:
    """The issue's bound on how late a change the triggers miss is judged."""
    assert timedelta(minutes=5) == FULL_PASS_INTERVAL
    assert not full_pass_due(T0, T0 + timedelta(minutes=4, seconds=59))
    assert full_pass_due(T0, T0 + timedelta(minutes=5))


def test_a_full_pass_interval_must_be_positive_and_instants_aware() -> None:
    """Bad arguments name what is wrong."""
    with pytest.raises(ValueError, match="full-pass interval must be positive"):
        full_pass_due(T0, T0, timedelta(0))
    with pytest.raises(ValueError, match="now"):
        full_pass_due(T0, T0.replace(tzinfo=None))
