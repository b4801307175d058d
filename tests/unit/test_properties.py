"""Hypothesis properties: plan_tick on generated boards, and random histories on the MemoryBoard.

The state machine keeps its own model of each pair's ledger row (nudges since
the last progress that reached a receiver, time of the last attempt) and of the
progress log (the claims no tick has absorbed yet: a claim adds to its pair's,
a tick absorbs those of the pairs it charged or drained and of pairs with no
row; a pair with progress that no sweep charges loses its row), and an
independent reading of the board's gate, receivers and endpoint states, and
checks every sweep against them: nothing is charged that should
not be, nothing due is skipped unless the tick limit was reached, progress is
a claim made after the last nudge (in program order, whatever its stamp), a
nudge that reached nobody is refunded, and no sweep changes a todo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from adapters.memory import MemoryBoard, Todo
from stall_core import (
    QUARANTINE_QUEUE,
    Charge,
    ChargeOutcome,
    Drain,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    Sweeper,
    TickReport,
    TodoRef,
    charge_stamp,
    decide,
    plan_tick,
)
from stall_testing import RecordingWake
from tests.support import T0, examples, minutes

ENDPOINTS = ("a", "b", "é")
QUEUES = ("lane", "Lane", QUARANTINE_QUEUE)
KINDS = ("verified", "unverified", "operator")


def d6_key(nudge: Nudge) -> tuple[int, datetime, str, str]:
    """The charge order: effective count, oldest pending todo, endpoint_id, queue."""
    return (nudge.number - 1, nudge.todo.created_at, nudge.endpoint_id, nudge.queue)


# -- strategies ------------------------------------------------------------------------

steps = st.lists(
    st.sampled_from([minutes(1), minutes(5), minutes(20), timedelta(hours=1)]),
    min_size=1,
    max_size=4,
).map(lambda xs: tuple(sorted(xs)))

policies = st.one_of(
    st.just(PacingPolicy()),
    st.builds(
        PacingPolicy,
        threshold=st.sampled_from([timedelta(seconds=30), minutes(2)]),
        backoff=steps,
        cap=st.integers(1, 3),
        tick_limit=st.integers(1, 4),
    ),
)

# Instants near NOW, often exactly on a threshold or backoff boundary.
NOW = T0
instants = st.one_of(
    st.sampled_from(
        [
            timedelta(0),
            -timedelta(seconds=30),
            -minutes(2),
            -minutes(2) - timedelta(microseconds=1),
            -minutes(5),
            -minutes(20),
            -timedelta(hours=1),
        ]
    ),
    st.integers(-600, 10).map(minutes),
).map(lambda d: NOW + d)
mostly = st.sampled_from([True, True, True, False])
keys = st.tuples(
    st.sampled_from(["a", "B", "é", "b", "A"]), st.sampled_from(["q", "Q", QUARANTINE_QUEUE])
)


@st.composite
def boards(
    draw: st.DrawFn,
) -> tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy]:
    """A board of distinct pairs, rows for some of them (and some orphans), now and a policy."""
    pair_keys = draw(st.lists(keys, unique=True, max_size=12))
    pairs = [
        PairState(
            endpoint_id=ep,
            queue=q,
            oldest=draw(
                st.none() | st.builds(TodoRef, id=st.just(f"{ep}/{q}"), created_at=instants)
            ),
            endpoint_active=draw(mostly),
            has_receiver=draw(mostly),
            progress_at=draw(st.none() | instants),
        )
        for ep, q in pair_keys
    ]
    row_keys = draw(st.lists(keys, unique=True, max_size=12))
    # 0 is a refunded first nudge.
    rows = {
        (ep, q): LedgerRow(
            endpoint_id=ep, queue=q, nudges=draw(st.integers(0, 6)), last_nudged_at=draw(instants)
        )
        for ep, q in row_keys
    }
    return pairs, rows, NOW, draw(policies)


# -- plan_tick on generated values ---------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_charges_the_first_charge_decisions_in_d6_order(
    board: tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy],
) -> None:
    """Charges are the first tick_limit Charge decisions in charge order, held_back the rest.

    Each is stamped with ``charge_stamp``: now, or the pair's unabsorbed claim if that is later.
    """
    pairs, rows, now, policy = board
    decisions = {p.key: (p, decide(p, rows.get(p.key), now, policy)) for p in pairs}
    wanted = sorted(
        (
            Nudge(
                endpoint_id=p.endpoint_id,
                queue=p.queue,
                todo=d.todo,
                number=d.number,
                charged_at=charge_stamp(p, now),
            )
            for p, d in decisions.values()
            if isinstance(d, Charge)
        ),
        key=d6_key,
    )

    plan = plan_tick(pairs, rows, now, policy)

    assert tuple(wanted[: policy.tick_limit]) == plan.charges
    assert sorted(plan.charges, key=d6_key) == list(plan.charges)
    assert len(wanted) - len(plan.charges) == plan.held_back
    assert len(plan.charges) <= policy.tick_limit


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_drains_are_drains_and_orphans(
    board: tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy],
) -> None:
    """Deletions are the Drain decisions plus rows with no pair, sorted, never also charged."""
    pairs, rows, now, policy = board
    present = {p.key for p in pairs}
    drains = {p.key for p in pairs if isinstance(decide(p, rows.get(p.key), now, policy), Drain)}

    plan = plan_tick(pairs, rows, now, policy)

    assert sorted(drains | (rows.keys() - present)) == list(plan.drained)
    assert set() == {n.key for n in plan.charges} & set(plan.drained)


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_never_charges_a_non_candidate(
    board: tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy],
) -> None:
    """Every charge is of a stalled, active, reachable, non-quarantine pair, numbered within cap."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    plan = plan_tick(pairs, rows, now, policy)

    for nudge in plan.charges:
        pair = by_key[nudge.key]
        assert QUARANTINE_QUEUE != pair.queue
        assert (True, True) == (pair.endpoint_active, pair.has_receiver)
        assert pair.oldest == nudge.todo
        assert nudge.todo.created_at < now - policy.threshold
        assert 1 <= nudge.number <= policy.cap


# -- random histories on the memory board -----------------------------------------------------

advances = st.one_of(
    st.sampled_from(
        [
            timedelta(0),
            timedelta(seconds=15),
            minutes(1),
            minutes(2),
            minutes(2) + timedelta(seconds=1),
            minutes(5) - timedelta(seconds=1),
            minutes(5),
            minutes(20),
            timedelta(hours=1),
            timedelta(hours=6),
            timedelta(days=1),
        ]
    ),
    st.integers(0, 4 * 3600).map(lambda s: timedelta(seconds=s)),
)
filters = st.sampled_from([None, ("lane",), ("Lane",), (), ("lane", "Lane", QUARANTINE_QUEUE)])


@attrs.frozen(kw_only=True)
class Before:
    """The board as it stood just before a sweep, and what the model says is due."""

    todos: dict[str, Todo]
    #: Pending, gate-passing todos by pair (any queue, any endpoint state).
    gated: dict[PairKey, list[Todo]]
    #: Candidate pairs (stalled, active, reachable, not quarantine) -> oldest gated created_at.
    eligible: dict[PairKey, datetime]
    #: Candidates due now -> their charge-order sort key.
    due: dict[PairKey, tuple[int, datetime, str, str]]
    #: Ledger rows whose pair has no gate-passing, non-quarantine pending todo.
    drained: set[PairKey]


@attrs.define
class Pacing:
    """The model's ledger row of one pair: nudges since progress, the last attempt's time.

    A pair starts over (nudge 1 at once) with no row or with an unabsorbed
    claim; a refunded first nudge leaves count 0 but does not start over: it
    waits backoff[0].
    """

    count: int
    last: datetime


class BoardMachine(RuleBasedStateMachine):
    """Random host operations and sweeps on a MemoryBoard, every sweep checked against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.board = MemoryBoard(clock=lambda: self.now)
        self.now = T0
        self.policy = PacingPolicy()
        self.kinds: dict[str, str] = {}
        #: The model's ledger: a pair has an entry exactly when it has a row.
        self.pacing: dict[PairKey, Pacing] = {}
        #: The model's progress log: per pair, the claims no tick has absorbed yet.
        self.claims: dict[PairKey, list[datetime]] = {}
        self.sweeps = 0
        self.charged_total = 0
        self.refunded_total = 0

    def teardown(self) -> None:
        self.runner.close()
        top = max((p.count for p in self.pacing.values()), default=0)
        event(f"nudges charged: {min(self.charged_total, 10)}, deepest count: {top}")
        event(f"sweeps: {min(self.sweeps, 10)}")
        event(f"refunds: {min(self.refunded_total, 3)}")

    @initialize(
        policy=policies,
        backlog=st.lists(
            st.tuples(st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES), st.sampled_from(KINDS)),
            min_size=1,
            max_size=8,
        ),
    )
    def setup(self, policy: PacingPolicy, backlog: list[tuple[str, str, str]]) -> None:
        """Three endpoints with hooks and deliveries, and a backlog already past the threshold."""
        self.policy = policy
        for ep in ENDPOINTS:
            self.board.add_endpoint(ep)
            for verified in (True, False):
                self.board.add_delivery(
                    f"d-{ep}-{'v' if verified else 'u'}",
                    endpoint_id=ep,
                    verified=verified,
                    received_at=T0,
                )
        self.board.add_hook("h-a", endpoint_id="a", url="http://127.0.0.1:9/", secret="whsec_a")
        self.board.add_hook(
            "h-b", endpoint_id="b", url="http://127.0.0.1:9/", secret="whsec_b", queues=["lane"]
        )
        self.board.add_hook(
            "h-é", endpoint_id="é", url="http://127.0.0.1:9/", secret="whsec_e", queues=["Lane"]
        )
        for endpoint, queue, kind in backlog:
            self.create_todo(endpoint, queue, kind, backdate=minutes(10))

    # -- host operations ----------------------------------------------------------------

    @rule(
        endpoint=st.sampled_from(ENDPOINTS),
        queue=st.sampled_from(QUEUES),
        kind=st.sampled_from(KINDS),
        backdate=st.sampled_from([timedelta(0), timedelta(0), minutes(3), timedelta(hours=2)]),
    )
    def create_todo(self, endpoint: str, queue: str, kind: str, backdate: timedelta) -> None:
        todo_id = f"t{len(self.kinds)}"
        delivery = {"verified": f"d-{endpoint}-v", "unverified": f"d-{endpoint}-u"}.get(kind)
        self.board.create_todo(
            todo_id,
            endpoint_id=endpoint,
            queue=queue,
            created_at=self.now - backdate,
            delivery_id=delivery,
            title=f"{kind} text of {todo_id}",
        )
        self.kinds[todo_id] = kind

    def in_state(self, state: str) -> list[Todo]:
        return sorted(
            (t for t in self.board.todos.values() if t.state == state), key=lambda t: t.id
        )

    def claimed_now(self, todo: Todo) -> None:
        """Log a claim at ``now`` in the model: unabsorbed until a tick absorbs it.

        Made after every charge so far (even one at this same instant), it is
        progress for a pair with a row; a pair with no row has it absorbed. A
        claim is a change of claimed_at (as the Postgres trigger logs it): a
        requeued todo claimed again at its old instant logs nothing.
        """
        if todo.claimed_at != self.now:
            self.claims.setdefault((todo.endpoint_id, todo.queue), []).append(self.now)

    def starts_over(self, key: PairKey) -> bool:
        """The model's progress rule: no row, or a claim no tick has absorbed yet."""
        return key not in self.pacing or bool(self.claims.get(key))

    @precondition(lambda self: bool(self.in_state("pending")))
    @rule(pick=st.integers(0, 10_000), explicit=st.booleans())
    def claim(self, pick: int, explicit: bool) -> None:
        """Claim a pending todo, at an explicit now or stamped by the board's clock (the same)."""
        pending = self.in_state("pending")
        todo = pending[pick % len(pending)]
        self.board.claim(todo.id, owner="consumer", at=self.now if explicit else None)
        self.claimed_now(todo)

    @rule(endpoint=st.sampled_from(ENDPOINTS), queue=st.sampled_from(QUEUES))
    def claim_next(self, endpoint: str, queue: str) -> None:
        before = dict(self.board.todos)
        todo = self.board.claim_next(endpoint, queue, owner="one-shot")
        if todo is not None:
            self.claimed_now(before[todo.id])

    @precondition(lambda self: bool(self.in_state("claimed")))
    @rule(pick=st.integers(0, 10_000), requeue=st.booleans())
    def finish(self, pick: int, requeue: bool) -> None:
        claimed = self.in_state("claimed")
        todo = claimed[pick % len(claimed)]
        if requeue:
            self.board.requeue(todo.id)
        else:
            self.board.complete(todo.id)

    @rule(
        endpoint=st.sampled_from(ENDPOINTS),
        state=st.sampled_from(["active", "paused"]),
        enabled=st.booleans(),
        queues=filters,
        what=st.sampled_from(["endpoint", "hook enabled", "hook queues"]),
    )
    def reconfigure(
        self, endpoint: str, state: str, enabled: bool, queues: Iterable[str] | None, what: str
    ) -> None:
        """Pause or resume an endpoint, enable or disable its hook, or change the hook's filter."""
        if what == "endpoint":
            self.board.set_endpoint_state(endpoint, state)
        elif what == "hook enabled":
            self.board.set_hook_enabled(f"h-{endpoint}", enabled, at=self.now, reason="test")
        else:
            self.board.set_hook_queues(f"h-{endpoint}", queues)

    # -- sweeps --------------------------------------------------------------------------

    @rule(
        delta=advances,
        how=st.sampled_from(
            ["charge_due", "sweeper", "refused", "lost", "concurrent", "held", "no sweep"]
        ),
    )
    def tick(self, delta: timedelta, how: str) -> None:
        """Move the clock, then sweep one way: the ledger alone, a Sweeper, or several at once.

        A Sweeper's wakes may be refused or reach nobody (both refunded); a
        held tick (another instance mid-sweep) skips and changes nothing.
        """
        self.now += delta
        before = self.expectations()
        if how == "charge_due":
            outcome = self.runner.run(self.board.charge_due(policy=self.policy))
            assert (self.now, False) == (outcome.now, outcome.skipped)
            self.check(before, [outcome])
        elif how == "concurrent":
            self.check(before, self.runner.run(self.gathered()), concurrent=True)
        elif how == "held":
            self.held(before)
        elif how != "no sweep":
            self.sweep(before, how=how)

    @rule(delta=advances)
    def tick_again(self, delta: timedelta) -> None:
        """A plain reaper tick through the ledger (a second rule, so ticks are drawn often)."""
        self.tick(delta, "charge_due")

    def sweep(self, before: Before, *, how: str) -> None:
        """One Sweeper tick, settled; refused or lost wakes must come back refunded."""
        wake = RecordingWake(refuse=how == "refused", reach=how != "lost")
        sweeper = Sweeper(ledger=self.board, wake=wake, policy=self.policy)

        async def tick_and_settle() -> TickReport:
            report = await sweeper.tick()
            await sweeper.settle()
            return report

        report = self.runner.run(tick_and_settle())
        assert (self.now, False) == (report.now, report.skipped)
        refunded = {n.key for n in report.charged} if how in ("refused", "lost") else set()
        self.check(
            before,
            [ChargeOutcome(now=report.now, charged=report.charged, drained=report.drained)],
            refunded=refunded,
        )
        assert len(refunded) == sweeper.refunded
        self.refunded_total += sweeper.refunded
        delivered, refused, lost = (wake.sent, wake.refused, wake.lost)
        assert (list(report.charged), []) == {
            "refused": (refused, delivered + lost),
            "lost": (lost, delivered + refused),
        }.get(how, (delivered, refused + lost))
        assert (len(delivered) + len(lost), len(refused)) == (report.queued, report.refused)

    def held(self, before: Before) -> None:
        """A sweep while another instance holds the tick: skipped, nothing charged or deleted."""
        wake = RecordingWake()
        sweeper = Sweeper(ledger=self.board, wake=wake, policy=self.policy)
        rows = dict(self.board.ledger)
        with self.board.hold_tick():
            report = self.runner.run(sweeper.tick())
        assert (True, self.now, (), ()) == (
            report.skipped,
            report.now,
            report.charged,
            report.drained,
        )
        assert (before.todos, rows, []) == (
            dict(self.board.todos),
            dict(self.board.ledger),
            wake.sent,
        )

    async def gathered(self) -> list[ChargeOutcome]:
        calls = (self.board.charge_due(policy=self.policy) for _ in range(3))
        return list(await asyncio.gather(*calls))

    # -- the oracle ------------------------------------------------------------------------

    def gate_passes(self, todo: Todo) -> bool:
        return self.kinds[todo.id] != "unverified"

    def receives(self, endpoint: str, queue: str) -> bool:
        return any(
            h.enabled and h.endpoint_id == endpoint and (h.queues is None or queue in h.queues)
            for h in self.board.hooks.values()
        )

    def expectations(self) -> Before:
        """What the board looks like, and what is due, just before a sweep."""
        todos = dict(self.board.todos)
        gated: dict[PairKey, list[Todo]] = {}
        for todo in todos.values():
            if todo.state == "pending" and self.gate_passes(todo):
                gated.setdefault((todo.endpoint_id, todo.queue), []).append(todo)
        eligible: dict[PairKey, datetime] = {}
        for (endpoint, queue), work in gated.items():
            oldest = min(t.created_at for t in work)
            if (
                queue != QUARANTINE_QUEUE
                and self.board.endpoints[endpoint].state == "active"
                and self.receives(endpoint, queue)
                and oldest < self.now - self.policy.threshold
            ):
                eligible[endpoint, queue] = oldest
        due: dict[PairKey, tuple[int, datetime, str, str]] = {}
        for key, oldest in eligible.items():
            if self.starts_over(key):
                due[key] = (0, oldest, *key)
                continue
            pacing = self.pacing[key]
            if (
                pacing.count < self.policy.cap
                and self.now >= pacing.last + self.policy.delay_before(pacing.count + 1)
            ):
                due[key] = (pacing.count, oldest, *key)
        drained = {
            key for key in self.board.ledger if key[1] == QUARANTINE_QUEUE or key not in gated
        }
        return Before(todos=todos, gated=gated, eligible=eligible, due=due, drained=drained)

    def check(
        self,
        before: Before,
        outcomes: list[ChargeOutcome],
        concurrent: bool = False,
        refunded: set[PairKey] | frozenset[PairKey] = frozenset(),
    ) -> None:
        """Check one sweep's outcomes against the board as it stood just before it.

        ``refunded`` holds the pairs whose nudge reached nobody and was refunded.
        """
        self.sweeps += 1
        todos, gated, eligible, due = before.todos, before.gated, before.eligible, before.due
        drained = before.drained
        # Pairs with no row as the sweep began: it absorbs their claims, charged or not.
        rowless = self.claims.keys() - self.pacing.keys()
        # A nudge never changes any todo.
        assert todos == dict(self.board.todos)
        all_keys = [n.key for o in outcomes for n in o.charged]
        # One nudge per pair per tick, even across concurrent sweeps at one instant.
        assert len(set(all_keys)) == len(all_keys)
        # The drained rows are deleted by the first sweep to see them, and only they.
        assert drained == {key for o in outcomes for key in o.drained}

        for outcome in outcomes:
            assert len(outcome.charged) <= self.policy.tick_limit
            assert sorted(outcome.charged, key=d6_key) == list(outcome.charged)
            for nudge in outcome.charged:
                self.check_nudge(nudge, gated, eligible, refunded=nudge.key in refunded)

        if not concurrent:
            [outcome] = outcomes
            charged = {n.key for n in outcome.charged}
            assert charged <= due.keys()
            skipped = due.keys() - charged
            if skipped:
                # Something due was left out only because the tick was full, and least-nudged first.
                assert self.policy.tick_limit == len(outcome.charged)
                assert max(due[k] for k in charged) < min(due[k] for k in skipped)
        else:
            charged = set(all_keys)
            assert charged <= due.keys()
            assert min(len(due), self.policy.tick_limit) <= len(outcomes[0].charged)

        # A pair with progress that no sweep charged has its row deleted: progress is consumed
        # where it is seen, and the next nudge is a first one, as progress makes it anyway.
        reset = {k for k in self.pacing if self.claims.get(k)} - set(all_keys) - drained
        for key in drained | reset:
            self.pacing.pop(key, None)
        for key in rowless | set(all_keys) | drained | reset:
            self.claims.pop(key, None)

    def check_nudge(
        self,
        nudge: Nudge,
        gated: dict[PairKey, list[Todo]],
        eligible: dict[PairKey, datetime],
        *,
        refunded: bool = False,
    ) -> None:
        """The nudge is of a candidate pair, names its oldest gated todo and respects pacing.

        A refunded nudge leaves its row one count lower with the stamp kept.
        """
        assert self.now == nudge.charged_at
        # Never a fresh, ungated, quarantine, inactive-endpoint or hookless pair.
        assert nudge.key in eligible
        todo = self.board.todos[nudge.todo.id]
        assert (nudge.endpoint_id, nudge.queue, "pending") == (
            todo.endpoint_id,
            todo.queue,
            todo.state,
        )
        assert self.gate_passes(todo)
        # The named todo is the pair's oldest gate-passing pending todo.
        assert eligible[nudge.key] == todo.created_at
        assert TodoRef(id=todo.id, created_at=todo.created_at, title=todo.title) == nudge.todo
        assert todo in gated[nudge.key]

        if self.starts_over(nudge.key):
            assert 1 == nudge.number
            row = self.pacing.get(nudge.key)
            if row is not None and max(self.claims[nudge.key]) <= row.last:
                event("progress from a claim stamped at the last nudge")
        else:
            # Every nudge but one that starts over (a refunded nudge 1 too) waits its step.
            pacing = self.pacing[nudge.key]
            assert pacing.count + 1 == nudge.number
            assert self.now - pacing.last >= self.policy.delay_before(nudge.number)
        count = nudge.number - 1 if refunded else nudge.number
        self.pacing[nudge.key] = Pacing(count=count, last=self.now)
        # Never more than cap nudges between two progress events.
        assert count <= self.policy.cap
        assert (
            LedgerRow(
                endpoint_id=nudge.endpoint_id,
                queue=nudge.queue,
                nudges=count,
                last_nudged_at=self.now,
            )
            == self.board.ledger[nudge.key]
        )
        self.charged_total += 1

    @invariant()
    def ledger_rows_stay_within_cap(self) -> None:
        """No ledger row ever counts more nudges than the cap, nor fewer than none."""
        assert all(0 <= row.nudges <= self.policy.cap for row in self.board.ledger.values())

    @invariant()
    def ledger_rows_follow_the_model(self) -> None:
        """Every row holds the model's count and last attempt; only the model's pairs have one."""
        assert {key: (p.count, p.last) for key, p in self.pacing.items()} == {
            key: (row.nudges, row.last_nudged_at) for key, row in self.board.ledger.items()
        }

    @invariant()
    def unabsorbed_claims_follow_the_model(self) -> None:
        """Each pair the sweep sees reports the latest claim the model's log still holds."""
        for state in self.board.pair_states():
            assert max(self.claims.get(state.key, ()), default=None) == state.progress_at


BoardMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoardHistories = BoardMachine.TestCase
TestBoardHistories.__doc__ = "Random host histories and sweeps never break a SPEC-0038 guarantee."
