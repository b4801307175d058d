"""The exact SPEC-0038 schedule, driven through plan_tick alone with a plain-values loop.

The loop plays the ledger over one pair's todos: it reads the pair as a
ledger does (its oldest pending todo, the latest ``claimed_at`` of any of
its todos, whether the todo the row names is still pending) and applies
each tick's plan: rows charged, reset (kept) or deleted.
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
    has_departed,
    latest_claim,
    plan_tick,
    reset_row,
    work_of,
)
from tests.support import T0, minutes

POLICY = PacingPolicy()
KEY = ("ep", "lane")
STEP = timedelta(seconds=15)


@attrs.define
class Todo:
    """One todo of the pair: pending until claimed (or deleted), stamped when claimed."""

    created_at: datetime
    pending: bool = True
    claimed_at: datetime | None = None


class Loop:
    """Ticks plan_tick over the pair's todos and applies its plan to the rows, as a ledger does."""

    def __init__(self, start: datetime, **todos: datetime) -> None:
        self.now = start
        self.todos: dict[str, Todo] = {
            todo_id: Todo(created_at=at) for todo_id, at in (todos or {"t1": T0}).items()
        }
        self.rows: dict[PairKey, LedgerRow] = {}
        self.active = True
        self.fired: list[tuple[timedelta, int]] = []
        self.named: list[str] = []
        self.drained: list[tuple[timedelta, PairKey]] = []
        self.reset: list[tuple[timedelta, PairKey]] = []

    def add(self, todo_id: str, created_at: datetime) -> None:
        """A new pending todo arrives."""
        self.todos[todo_id] = Todo(created_at=created_at)

    def claim(self, todo_id: str, at: datetime) -> None:
        """The consumer claims a pending todo, its claimed_at stamped ``at`` (any host clock)."""
        todo = self.todos[todo_id]
        assert todo.pending
        todo.pending, todo.claimed_at = False, at

    def delete(self, todo_id: str) -> None:
        """The host deletes a todo, its stamp with it."""
        del self.todos[todo_id]

    def board(self) -> list[PairState]:
        """The pair as the sweep reads it, or nothing once it has neither work nor a row."""
        pending = {i: t for i, t in self.todos.items() if t.pending}
        if not pending and KEY not in self.rows:
            return []
        return [
            PairState(
                endpoint_id="ep",
                queue="lane",
                oldest=work_of(TodoRef(id=i, created_at=t.created_at) for i, t in pending.items()),
                endpoint_active=self.active,
                has_receiver=True,
                latest_claim=latest_claim(t.claimed_at for t in self.todos.values()),
                named_departed=has_departed(self.rows.get(KEY), pending),
            )
        ]

    def tick(self) -> tuple[Nudge, ...]:
        """Plan one tick at ``now`` and apply it: delete drained rows, reset, charge."""
        plan = plan_tick(self.board(), self.rows, self.now, POLICY)
        for key in plan.drained:
            del self.rows[key]
            self.drained.append((self.now - T0, key))
        for key in plan.reset:
            self.rows[key] = reset_row(self.rows[key], self.now)
            self.reset.append((self.now - T0, key))
        for nudge in plan.charges:
            self.rows[nudge.key] = charge_row(nudge)
            self.fired.append((self.now - T0, nudge.number))
            self.named.append(nudge.todo.id)
        return plan.charges

    def run_until(self, end: datetime) -> None:
        """Tick every STEP from now until ``end`` (exclusive)."""
        while self.now < end:
            self.tick()
            self.now += STEP


def schedule(first: timedelta) -> list[tuple[timedelta, int]]:
    """Nudges 1..cap without progress: the first, then each backoff step after the previous."""
    steps = [POLICY.delay_before(n) for n in range(2, POLICY.cap + 1)]
    return [
        (first + at, n) for n, at in enumerate(itertools.accumulate(steps, initial=timedelta(0)), 1)
    ]


FIRST = POLICY.threshold + STEP  # the first tick strictly past the threshold


def test_first_nudge_at_the_first_tick_past_the_threshold() -> None:
    """Nudge 1 fires on the first tick strictly past the threshold."""
    loop = Loop(T0)

    loop.run_until(T0 + POLICY.threshold * 2)

    assert [(FIRST, 1)] == loop.fired


def test_the_exact_schedule() -> None:
    """Nudges 2..cap follow the backoff steps (5 min, 20 min, 1 h, 6 h) after the previous one."""
    loop = Loop(T0)

    loop.run_until(T0 + FIRST + sum(POLICY.backoff, timedelta(0)) + STEP)

    assert schedule(FIRST) == loop.fired
    assert [
        FIRST,
        FIRST + minutes(5),
        FIRST + minutes(25),
        FIRST + minutes(85),
        FIRST + minutes(445),
    ] == [at for at, _ in loop.fired]


def test_one_tick_before_each_step_is_a_wait() -> None:
    """One tick before each backoff step ends, decide says Wait with the step's due time."""
    loop = Loop(T0)
    loop.run_until(T0 + timedelta(hours=9))
    fired_at = [T0 + offset for offset, _ in loop.fired]
    [state] = loop.board()

    for number, (previous, due) in enumerate(itertools.pairwise(fired_at), start=1):
        row = LedgerRow(
            endpoint_id="ep", queue="lane", nudges=number, last_nudged_at=previous, named_todo="t1"
        )
        assert due - previous == POLICY.delay_before(number + 1)
        assert Wait(due_at=due) == decide(state, row, due - STEP, POLICY)
        assert () == plan_tick([state], {KEY: row}, due - STEP, POLICY).charges
    assert T0 + FIRST == fired_at[0]


def test_a_stalled_queue_backs_off_and_stops() -> None:
    """A stalled queue backs off and stops: nothing after nudge cap for days without progress."""
    loop = Loop(T0)

    loop.run_until(T0 + timedelta(days=4))

    assert list(range(1, POLICY.cap + 1)) == [number for _, number in loop.fired]
    assert POLICY.cap == loop.rows[KEY].nudges
    assert ([], ["t1"]) == (loop.drained, sorted(set(loop.named)))


def at_count(count: int) -> Loop:
    """A loop of todos t1 and t2 whose pair has just been charged nudge ``count``."""
    loop = Loop(T0, t1=T0, t2=T0 + timedelta(seconds=1))
    while len(loop.fired) < count:
        loop.tick()
        loop.now += STEP
    assert count == loop.rows[KEY].nudges
    return loop


PROGRESS: dict[str, Callable[[Loop], None]] = {
    "named todo claimed now": lambda loop: loop.claim("t1", loop.now),
    "named todo claimed, clock behind": lambda loop: loop.claim("t1", T0),
    "named todo deleted": lambda loop: loop.delete("t1"),
    "other todo claimed now": lambda loop: loop.claim("t2", loop.now),
}


@pytest.mark.parametrize("progress", PROGRESS.values(), ids=PROGRESS.keys())
def test_progress_keeps_the_short_cadence(progress: Callable[[Loop], None]) -> None:
    """Progress keeps the short cadence: progress at count 4 makes the pair due at once, at 1."""
    loop = at_count(POLICY.cap - 1)

    progress(loop)
    loop.now += STEP
    charges = loop.tick()

    assert [(1, loop.now)] == [(n.number, n.charged_at) for n in charges]
    assert 1 == loop.rows[KEY].nudges


def test_a_claim_stamped_behind_on_another_todo_keeps_the_backoff() -> None:
    """A claim on a todo the nudge did not name, stamped before the nudge, is not progress."""
    loop = at_count(POLICY.cap - 1)
    last = loop.rows[KEY].last_nudged_at

    loop.claim("t2", last - STEP)
    loop.now += STEP

    assert () == loop.tick()
    assert POLICY.cap - 1 == loop.rows[KEY].nudges


def test_after_progress_the_schedule_restarts() -> None:
    """After a progress charge, nudge 2 again waits the first step, then the second, and so on."""
    loop = at_count(POLICY.cap - 1)
    loop.claim("t1", loop.now)
    restart = loop.now + STEP
    loop.now = restart
    loop.fired.clear()

    # The claim counts once: the restart charge consumes it, so it resets only that one.
    loop.run_until(restart + timedelta(hours=1))

    assert schedule(restart - T0)[:3] == loop.fired


def test_a_claim_after_the_cap_restarts_the_pair() -> None:
    """A capped pair whose consumer finally claims is due at once with count 1."""
    loop = at_count(POLICY.cap)
    loop.now += timedelta(days=1)
    assert () == loop.tick()

    loop.claim("t2", loop.now - STEP)
    charges = loop.tick()

    assert [(1, "t1")] == [(n.number, n.todo.id) for n in charges]


def test_progress_while_paused_is_kept_and_nudged_at_once_on_resuming() -> None:
    """Progress seen while the endpoint is paused resets the row; resumed, it is nudge 1 at once."""
    loop = at_count(POLICY.cap)
    loop.active = False
    loop.claim("t1", loop.now)
    loop.now += STEP
    loop.tick()
    kept = loop.rows[KEY]
    loop.active = True
    loop.now += timedelta(hours=1)
    charges = loop.tick()

    assert [(loop.now - T0 - timedelta(hours=1), KEY)] == loop.reset
    assert (0, "t1", loop.now - timedelta(hours=1)) == (
        kept.nudges,
        kept.named_todo,
        kept.progressed_at,
    )
    assert [(1, "t2")] == [(n.number, n.todo.id) for n in charges]


def test_a_claim_stamped_ahead_of_the_ledger_counts_once() -> None:
    """A claim stamped a minute ahead is nudge 1's stamp; nudge 2 waits the first step from it."""
    loop = at_count(2)
    ahead = loop.now + minutes(1)
    loop.claim("t2", ahead)
    loop.now += STEP
    loop.fired.clear()

    loop.run_until(loop.now + minutes(10))

    # ``ahead`` lies on the 15 s tick grid, so nudge 2 falls exactly one first step after it.
    assert [
        (ahead - T0 - minutes(1) + STEP, 1),
        (ahead - T0 + POLICY.backoff[0], 2),
    ] == loop.fired


def test_a_drained_queue_does_not_ring() -> None:
    """A drained queue does not ring: its row is deleted and the next backlog starts at 1."""
    loop = Loop(T0)
    loop.run_until(T0 + FIRST + POLICY.backoff[0] + STEP)
    assert 2 == loop.rows[KEY].nudges

    # The consumer claims the last todo: the pair has no work left.
    loop.claim("t1", loop.now)
    loop.now += STEP
    assert () == loop.tick()
    assert {} == loop.rows
    assert [(loop.now - T0, KEY)] == loop.drained

    # The drained pair then leaves the board; the next backlog arrives later.
    loop.now += timedelta(hours=3)
    new_at = loop.now
    loop.add("t2", new_at)
    loop.fired.clear()
    loop.run_until(new_at + FIRST + POLICY.backoff[0] + STEP)

    assert schedule(new_at - T0 + FIRST)[:2] == loop.fired


def test_consumer_woken_each_time_claims_one_and_drains_the_queue() -> None:
    """A one-todo-per-wake consumer is re-woken at the short cadence until the queue empties."""
    loop = Loop(T0, t0=T0, t1=T0 + timedelta(seconds=1), t2=T0 + timedelta(seconds=2))
    while loop.now < T0 + timedelta(hours=1):
        for nudge in loop.tick():
            # Its host's clock runs a second ahead of the ledger's.
            loop.claim(nudge.todo.id, loop.now + timedelta(seconds=1))
        loop.now += STEP

    assert [1, 1, 1] == [number for _, number in loop.fired]
    assert ["t0", "t1", "t2"] == loop.named
    # Each nudge after the first comes one tick after the claim the previous one caused.
    assert [FIRST, FIRST + STEP, FIRST + 2 * STEP] == [at for at, _ in loop.fired]
    assert ({}, [(FIRST + 3 * STEP, KEY)]) == (loop.rows, loop.drained)


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
