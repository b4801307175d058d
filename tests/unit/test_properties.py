"""Hypothesis properties: plan_tick on generated boards, and random histories on the MemoryBoard.

The state machine keeps its own model of each pair's ledger row (nudges since
the last progress that reached a receiver, the stamp of the last attempt, the
todo it named, and whether a reset kept progress for the next nudge) and an
independent reading of the board's gate, receivers and endpoint states. It
reads progress from the board's todos as SPEC-0038 and D4 put it: a claim
stamped after the last nudge, or the named todo no longer pending in the
pair, or progress a reset kept. Every sweep is checked twice: against the
core (each charge is one ``decide`` calls due on the rows as they were,
stamped by ``charge_stamp``) and against the model (nothing charged that
should not be, nothing due skipped unless the tick limit was reached,
progress that no charge answers is kept, a nudge that reached nobody is
refunded, no sweep changes a todo). After a charge the same history never
makes the pair progress again: each claim and departure counts once.
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
    Reset,
    Sweeper,
    TickReport,
    TodoRef,
    charge_row,
    charge_stamp,
    decide,
    effective_nudges,
    made_progress,
    plan_tick,
    refunded_row,
    reset_row,
)
from stall_testing import RecordingWake
from tests.support import T0, examples, minutes

ENDPOINTS = ("a", "b", "é")
QUEUES = ("lane", "Lane", QUARANTINE_QUEUE)
KINDS = ("verified", "unverified", "operator")
US = timedelta(microseconds=1)


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

# Instants near NOW, often exactly on a threshold or backoff boundary, some ahead of it.
NOW = T0
instants = st.one_of(
    st.sampled_from(
        [
            timedelta(0),
            -timedelta(seconds=30),
            -minutes(2),
            -minutes(2) - US,
            -minutes(5),
            -minutes(20),
            -timedelta(hours=1),
            US,
        ]
    ),
    st.integers(-600, 10).map(minutes),
).map(lambda d: NOW + d)
mostly = st.sampled_from([True, True, True, False])
rarely = st.sampled_from([False, False, False, True])
keys = st.tuples(
    st.sampled_from(["a", "B", "é", "b", "A"]), st.sampled_from(["q", "Q", QUARANTINE_QUEUE])
)

Board = tuple[list[PairState], dict[PairKey, LedgerRow], datetime, PacingPolicy]


@st.composite
def boards(draw: st.DrawFn) -> Board:
    """A board of distinct pairs, rows for some of them (and some orphans), now and a policy.

    Rows name a todo or (an older build's) none, and some keep progress a reset saw.
    """
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
            latest_claim=draw(st.none() | instants),
            named_departed=draw(rarely),
        )
        for ep, q in pair_keys
    ]
    row_keys = draw(st.lists(keys, unique=True, max_size=12))
    # 0 is a refunded first nudge, or a reset.
    rows = {
        (ep, q): LedgerRow(
            endpoint_id=ep,
            queue=q,
            nudges=draw(st.integers(0, 6)),
            last_nudged_at=draw(instants),
            named_todo=draw(st.sampled_from([f"{ep}/{q}", f"{ep}/{q}", "gone", None])),
            progressed_at=draw(st.none() | st.none() | instants),
        )
        for ep, q in row_keys
    }
    return pairs, rows, NOW, draw(policies)


# -- plan_tick on generated values ---------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_charges_the_first_charge_decisions_in_d6_order(board: Board) -> None:
    """Charges are the first tick_limit Charge decisions in charge order, held_back the rest.

    Each is stamped with ``charge_stamp``: now, or the pair's latest claim if that is later.
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
def test_plan_tick_drains_are_drains_and_orphans(board: Board) -> None:
    """Deletions are the Drain decisions plus rows with no pair, sorted, never also charged."""
    pairs, rows, now, policy = board
    present = {p.key for p in pairs}
    drains = {p.key for p in pairs if isinstance(decide(p, rows.get(p.key), now, policy), Drain)}

    plan = plan_tick(pairs, rows, now, policy)

    assert sorted(drains | (rows.keys() - present)) == list(plan.drained)
    assert set() == {n.key for n in plan.charges} & set(plan.drained)


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_resets_exactly_the_rows_with_progress_it_does_not_charge(board: Board) -> None:
    """Resets are the Reset decisions and the held-back pairs with progress: rows, never charged."""
    pairs, rows, now, policy = board
    plan = plan_tick(pairs, rows, now, policy)
    charged = {n.key for n in plan.charges}
    wanted = {
        p.key
        for p in pairs
        if isinstance(decide(p, rows.get(p.key), now, policy), Reset)
        or (
            p.key not in charged
            and isinstance(decide(p, rows.get(p.key), now, policy), Charge)
            and made_progress(p, rows.get(p.key))
        )
    }

    assert sorted(wanted) == list(plan.reset)
    assert set(plan.reset) <= rows.keys()
    assert set() == set(plan.reset) & (charged | set(plan.drained))


@settings(max_examples=examples(150), deadline=None)
@given(boards())
def test_plan_tick_never_charges_a_non_candidate(board: Board) -> None:
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


@settings(max_examples=examples(150), deadline=None)
@given(boards(), st.sampled_from([timedelta(0), US, minutes(1), timedelta(days=2)]))
def test_a_charge_consumes_the_progress_it_answers(board: Board, later: timedelta) -> None:
    """With the history a charge saw, its row shows no progress: nudge N counts N, never 1 again."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    for nudge in plan_tick(pairs, rows, now, policy).charges:
        written = charge_row(nudge)
        # The same claims; the named todo is the pair's oldest pending todo, so not departed.
        seen = attrs.evolve(by_key[nudge.key], named_departed=False)

        assert False is made_progress(seen, written)
        assert nudge.number == effective_nudges(seen, written)
        assert Charge(number=1, todo=nudge.todo) != decide(seen, written, now + later, policy)


@settings(max_examples=examples(150), deadline=None)
@given(boards(), st.integers(1, 6), instants)
def test_a_reset_row_keeps_its_progress_and_refuses_every_refund(
    board: Board, number: int, charged_at: datetime
) -> None:
    """A reset row keeps its stamp and named todo, counts 0, shows progress and refunds nothing."""
    pairs, rows, now, policy = board
    by_key = {p.key: p for p in pairs}

    for key in plan_tick(pairs, rows, now, policy).reset:
        kept = reset_row(rows[key], now)
        nudge = Nudge(
            endpoint_id=key[0],
            queue=key[1],
            todo=TodoRef(id="t", created_at=T0),
            number=number,
            charged_at=rows[key].last_nudged_at if number % 2 else charged_at,
        )

        assert (0, rows[key].last_nudged_at, rows[key].named_todo) == (
            kept.nudges,
            kept.last_nudged_at,
            kept.named_todo,
        )
        assert (rows[key].progressed_at or now) == kept.progressed_at
        # Whatever shows it now may be gone by the next tick: the row alone keeps it.
        quiet = attrs.evolve(by_key[key], latest_claim=None, named_departed=False)
        assert True is made_progress(quiet, kept)
        assert None is refunded_row(kept, nudge)


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
#: How far a claim's stamp lies from the board's clock: a host clock behind or ahead of it.
skews = st.sampled_from(
    [-minutes(10), -minutes(1), -US, timedelta(0), timedelta(0), US, minutes(1), minutes(10)]
)


@attrs.frozen(kw_only=True)
class Before:
    """The board as it stood just before a sweep, and what the model says the sweep does."""

    todos: dict[str, Todo]
    #: Pending, gate-passing todos by pair (any queue, any endpoint state).
    gated: dict[PairKey, list[Todo]]
    #: Candidate pairs (stalled, active, reachable, not quarantine) -> their work.
    eligible: dict[PairKey, Todo]
    #: Candidates due now -> their charge-order sort key.
    due: dict[PairKey, tuple[int, datetime, str, str]]
    #: Ledger rows whose pair has no gate-passing, non-quarantine pending todo.
    drained: set[PairKey]
    #: Pairs with a row and progress (a later claim, the named todo departed, or kept).
    progressed: set[PairKey]
    #: The stamp a charge of each pair would write: now, or its latest claim if later.
    stamps: dict[PairKey, datetime]
    #: The core's view as the sweep found it (None: not taken, for a later concurrent call).
    states: dict[PairKey, PairState] | None = None
    rows: dict[PairKey, LedgerRow] | None = None


@attrs.define
class Pacing:
    """The model's ledger row of one pair.

    A pair starts over (nudge 1 at once) with no row or with progress; a
    refunded first nudge leaves count 0 but does not start over: it waits
    backoff[0]. ``kept`` is when a reset kept progress for the next nudge.
    """

    count: int
    last: datetime
    named: str
    kept: datetime | None = None


class BoardMachine(RuleBasedStateMachine):
    """Random host operations and sweeps on a MemoryBoard, every sweep checked against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.board = MemoryBoard(clock=lambda: self.now)
        self.now = T0
        self.policy = PacingPolicy()
        self.created = 0
        #: The model's sender gate: whether each delivery is verified.
        self.verified: dict[str, bool] = {}
        #: The model's ledger: a pair has an entry exactly when it has a row.
        self.pacing: dict[PairKey, Pacing] = {}
        self.sweeps = 0
        self.charged_total = 0
        self.refunded_total = 0
        self.resets = 0
        self.progress_seen: set[str] = set()

    def teardown(self) -> None:
        self.runner.close()
        top = max((p.count for p in self.pacing.values()), default=0)
        event(f"nudges charged: {min(self.charged_total, 10)}, deepest count: {top}")
        event(f"sweeps: {min(self.sweeps, 10)}")
        event(f"refunds: {min(self.refunded_total, 3)}, resets: {min(self.resets, 3)}")
        for how in sorted(self.progress_seen):
            event(f"seen: {how}")

    @initialize(
        # A tick limit of 1 holds pairs back often: their progress must be kept too.
        policy=policies | st.builds(PacingPolicy, tick_limit=st.just(1)),
        backlog=st.lists(
            st.tuples(st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES), st.sampled_from(KINDS)),
            min_size=1,
            max_size=8,
        ),
    )
    def setup(self, policy: PacingPolicy, backlog: list[tuple[str, str, str]]) -> None:
        """Three endpoints with hooks and deliveries, a backlog past the threshold, one sweep."""
        self.policy = policy
        for ep in ENDPOINTS:
            self.board.add_endpoint(ep)
            for verified in (True, False):
                delivery = f"d-{ep}-{'v' if verified else 'u'}"
                self.board.add_delivery(delivery, endpoint_id=ep, verified=verified, received_at=T0)
                self.verified[delivery] = verified
        self.board.add_hook("h-a", endpoint_id="a", url="http://127.0.0.1:9/", secret="whsec_a")
        self.board.add_hook(
            "h-b", endpoint_id="b", url="http://127.0.0.1:9/", secret="whsec_b", queues=["lane"]
        )
        self.board.add_hook(
            "h-é", endpoint_id="é", url="http://127.0.0.1:9/", secret="whsec_e", queues=["Lane"]
        )
        for endpoint, queue, kind in backlog:
            self.create_todo(endpoint, queue, kind, backdate=minutes(10))
        self.tick(timedelta(0), "charge_due")

    # -- host operations ----------------------------------------------------------------

    @rule(
        endpoint=st.sampled_from(ENDPOINTS),
        queue=st.sampled_from(QUEUES),
        kind=st.sampled_from(KINDS),
        backdate=st.sampled_from([timedelta(0), timedelta(0), minutes(3), timedelta(hours=2)]),
    )
    def create_todo(self, endpoint: str, queue: str, kind: str, backdate: timedelta) -> None:
        todo_id = f"t{self.created}"
        self.created += 1
        delivery = {"verified": f"d-{endpoint}-v", "unverified": f"d-{endpoint}-u"}.get(kind)
        self.board.create_todo(
            todo_id,
            endpoint_id=endpoint,
            queue=queue,
            created_at=self.now - backdate,
            delivery_id=delivery,
            title=f"{kind} text of {todo_id}",
        )

    def in_state(self, *states: str) -> list[Todo]:
        return sorted(
            (t for t in self.board.todos.values() if t.state in states), key=lambda t: t.id
        )

    @precondition(lambda self: bool(self.in_state("pending")))
    @rule(pick=st.integers(0, 10_000), skew=skews, explicit=st.booleans())
    def claim(self, pick: int, skew: timedelta, explicit: bool) -> None:
        """Claim a pending todo, stamped by a host clock behind, on or ahead of the board's."""
        pending = self.in_state("pending")
        todo = pending[pick % len(pending)]
        at = None if skew == timedelta(0) and not explicit else self.now + skew
        self.board.claim(todo.id, owner="consumer", at=at)

    def named_pending(self) -> list[Todo]:
        """The pending todos a ledger row names, in their pair still."""
        named = {p.named: key for key, p in self.pacing.items()}
        return [t for t in self.in_state("pending") if named.get(t.id) == (t.endpoint_id, t.queue)]

    @precondition(lambda self: bool(self.named_pending()))
    @rule(pick=st.integers(0, 10_000), skew=skews)
    def claim_named(self, pick: int, skew: timedelta) -> None:
        """The consumer a nudge woke claims the todo it named, on a host clock of its own."""
        named = self.named_pending()
        self.board.claim(named[pick % len(named)].id, owner="woken", at=self.now + skew)

    @precondition(lambda self: bool(self.named_pending()))
    @rule(
        pick=st.integers(0, 10_000),
        skew=skews,
        off=st.sampled_from(["endpoint", "hook"]),
        gap=st.sampled_from([US, timedelta(seconds=15), minutes(1), minutes(10)]),
    )
    def progress_while_idle(self, pick: int, skew: timedelta, off: str, gap: timedelta) -> None:
        """A named todo is claimed while its pair cannot be nudged: sweep, turn it on, sweep.

        The pair keeps other stalled work, so the first sweep resets its row
        rather than draining it.
        """
        named = self.named_pending()
        todo = named[pick % len(named)]
        endpoint = todo.endpoint_id
        self.create_todo(endpoint, todo.queue, "operator", backdate=minutes(10))
        if off == "endpoint":
            self.board.set_endpoint_state(endpoint, "paused")
        else:
            self.board.set_hook_enabled(f"h-{endpoint}", False, at=self.now, reason="test")
        self.board.claim(todo.id, owner="pull", at=self.now + skew)
        self.tick(gap, "charge_due")
        if off == "endpoint":
            self.board.set_endpoint_state(endpoint, "active")
        else:
            self.board.set_hook_enabled(f"h-{endpoint}", True)
        self.tick(gap, "charge_due")

    @rule(endpoint=st.sampled_from(ENDPOINTS), queue=st.sampled_from(QUEUES))
    def claim_next(self, endpoint: str, queue: str) -> None:
        """A one-shot consumer claims the pair's oldest pending todo, stamped by the board."""
        self.board.claim_next(endpoint, queue, owner="one-shot")

    @precondition(lambda self: bool(self.in_state("claimed")))
    @rule(pick=st.integers(0, 10_000), requeue=st.booleans(), unstamp=rarely)
    def finish(self, pick: int, requeue: bool, unstamp: bool) -> None:
        """Complete or requeue a claimed todo; some hosts clear claimed_at as they do."""
        claimed = self.in_state("claimed")
        todo = claimed[pick % len(claimed)]
        if requeue:
            self.board.requeue(todo.id, unstamp=unstamp)
        else:
            self.board.complete(todo.id, unstamp=unstamp)

    @precondition(lambda self: bool(self.board.todos))
    @rule(pick=st.integers(0, 10_000))
    def delete(self, pick: int) -> None:
        """The host deletes a todo, whatever its state (a purge, a TRUNCATE)."""
        todos = self.in_state("pending", "claimed", "done")
        self.board.delete_todo(todos[pick % len(todos)].id)

    @precondition(lambda self: bool(self.board.todos))
    @rule(pick=st.integers(0, 10_000), queue=st.sampled_from(QUEUES))
    def move(self, pick: int, queue: str) -> None:
        """An operator moves a todo to another queue of its endpoint (or the same one)."""
        todos = self.in_state("pending", "claimed", "done")
        self.board.move_todo(todos[pick % len(todos)].id, queue)

    @rule(endpoint=st.sampled_from(ENDPOINTS), which=st.sampled_from("vu"), verified=st.booleans())
    def verify(self, endpoint: str, which: str, verified: bool) -> None:
        """A delivery is verified late, or its verification revoked: the gate changes."""
        delivery = f"d-{endpoint}-{which}"
        self.board.set_delivery_verified(delivery, verified)
        self.verified[delivery] = verified

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
        before = self.expectations(core=True)
        if how == "charge_due":
            outcome = self.runner.run(self.board.charge_due(policy=self.policy))
            assert (self.now, False, "full") == (outcome.now, outcome.skipped, outcome.kind)
            self.check(before, outcome)
        elif how == "concurrent":
            self.concurrent(before)
        elif how == "held":
            self.held(before)
        elif how != "no sweep":
            self.sweep(before, how=how)

    @rule(delta=advances)
    def tick_again(self, delta: timedelta) -> None:
        """A plain reaper tick through the ledger (a second rule, so ticks are drawn often)."""
        self.tick(delta, "charge_due")

    @rule(delta=st.sampled_from([timedelta(0), US, timedelta(seconds=15), minutes(1)]))
    def tick_soon(self, delta: timedelta) -> None:
        """A tick soon after the last: claims ahead of the clock and resets meet the next one."""
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
            ChargeOutcome(now=report.now, charged=report.charged, drained=report.drained),
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

    def concurrent(self, before: Before) -> None:
        """Three sweeps gathered at one instant: each is judged after the ones before it.

        The memory board applies a whole tick without awaiting, so gathered
        sweeps are serialised as the Postgres tick lock serialises them.
        """

        async def gathered() -> list[ChargeOutcome]:
            calls = (self.board.charge_due(policy=self.policy) for _ in range(3))
            return list(await asyncio.gather(*calls))

        outcomes = self.runner.run(gathered())
        keys = [n.key for o in outcomes for n in o.charged]
        # One nudge per pair per instant, even across concurrent sweeps.
        assert len(set(keys)) == len(keys)
        for outcome in outcomes:
            self.check(before, outcome)
            before = self.expectations(core=False, todos=before.todos)

    def held(self, before: Before) -> None:
        """A sweep while another instance holds the tick: skipped, nothing charged or deleted."""
        wake = RecordingWake()
        sweeper = Sweeper(ledger=self.board, wake=wake, policy=self.policy)
        rows = dict(self.board.ledger)
        with self.board.hold_tick():
            report = self.runner.run(sweeper.tick())
        assert (True, self.now, (), (), None) == (
            report.skipped,
            report.now,
            report.charged,
            report.drained,
            report.kind,
        )
        assert (before.todos, rows, []) == (
            dict(self.board.todos),
            dict(self.board.ledger),
            wake.sent,
        )

    # -- the oracle ------------------------------------------------------------------------

    def gate_passes(self, todo: Todo) -> bool:
        return todo.delivery_id is None or self.verified[todo.delivery_id]

    def receives(self, endpoint: str, queue: str) -> bool:
        return any(
            h.enabled and h.endpoint_id == endpoint and (h.queues is None or queue in h.queues)
            for h in self.board.hooks.values()
        )

    def progress(self, key: PairKey, todos: dict[str, Todo]) -> str | None:
        """How the pair shows progress to its row (None: no row, or none shows).

        Kept by a reset, the named todo no longer pending in the pair, or a
        claim on any of its todos stamped after the row's last nudge.
        """
        pacing = self.pacing.get(key)
        if pacing is None:
            return None
        mine = [t for t in todos.values() if (t.endpoint_id, t.queue) == key]
        if pacing.kept is not None:
            return "a reset's keeping"
        if pacing.named not in {t.id for t in mine if t.state == "pending"}:
            return "departure"
        if any(t.claimed_at is not None and t.claimed_at > pacing.last for t in mine):
            return "claim"
        return None

    def expectations(self, *, core: bool, todos: dict[str, Todo] | None = None) -> Before:
        """What the board looks like, and what the model says is due, just before a sweep."""
        todos = dict(self.board.todos) if todos is None else todos
        gated: dict[PairKey, list[Todo]] = {}
        claims: dict[PairKey, datetime] = {}
        for todo in todos.values():
            key = (todo.endpoint_id, todo.queue)
            if todo.state == "pending" and self.gate_passes(todo):
                gated.setdefault(key, []).append(todo)
            if todo.claimed_at is not None:
                claims[key] = max(claims.get(key, todo.claimed_at), todo.claimed_at)
        eligible: dict[PairKey, Todo] = {}
        for (endpoint, queue), work in gated.items():
            oldest = min(work, key=lambda t: (t.created_at, t.id))
            if (
                queue != QUARANTINE_QUEUE
                and self.board.endpoints[endpoint].state == "active"
                and self.receives(endpoint, queue)
                and oldest.created_at < self.now - self.policy.threshold
            ):
                eligible[endpoint, queue] = oldest
        progressed = {key for key in self.pacing if self.progress(key, todos)}
        due: dict[PairKey, tuple[int, datetime, str, str]] = {}
        for key, oldest in eligible.items():
            if key not in self.pacing or key in progressed:
                due[key] = (0, oldest.created_at, *key)
                continue
            pacing = self.pacing[key]
            if (
                pacing.count < self.policy.cap
                and self.now >= pacing.last + self.policy.delay_before(pacing.count + 1)
            ):
                due[key] = (pacing.count, oldest.created_at, *key)
        drained = {key for key in self.pacing if key[1] == QUARANTINE_QUEUE or key not in gated}
        stamps = {key: max(self.now, claims.get(key, self.now)) for key in eligible}
        return Before(
            todos=todos,
            gated=gated,
            eligible=eligible,
            due=due,
            drained=drained,
            progressed=progressed,
            stamps=stamps,
            states={s.key: s for s in self.board.pair_states()} if core else None,
            rows=dict(self.board.ledger) if core else None,
        )

    def check(
        self,
        before: Before,
        outcome: ChargeOutcome,
        refunded: set[PairKey] | frozenset[PairKey] = frozenset(),
    ) -> None:
        """Check one sweep's outcome against the core and the model, then move the model on.

        ``refunded`` holds the pairs whose nudge reached nobody and was refunded.
        """
        self.sweeps += 1
        # A nudge never changes any todo.
        assert before.todos == dict(self.board.todos)
        if before.states is not None and before.rows is not None:
            self.check_core(before.states, before.rows, outcome)
        # The drained rows are deleted, and only they.
        assert before.drained == set(outcome.drained)
        assert len(outcome.charged) <= self.policy.tick_limit
        assert sorted(outcome.charged, key=d6_key) == list(outcome.charged)
        charged = {n.key for n in outcome.charged}
        assert charged <= before.due.keys()
        skipped = before.due.keys() - charged
        if skipped:
            # Something due was left out only because the tick was full, and least-nudged first.
            assert self.policy.tick_limit == len(outcome.charged)
            assert max(before.due[k] for k in charged) < min(before.due[k] for k in skipped)
        for nudge in outcome.charged:
            self.check_nudge(before, nudge, refunded=nudge.key in refunded)

        # Progress that no charge answered is kept: the row resets, its stamp and todo stay.
        for key in before.progressed - charged - before.drained:
            pacing = self.pacing[key]
            self.pacing[key] = attrs.evolve(pacing, count=0, kept=pacing.kept or self.now)
            self.resets += 1
        for key in before.drained:
            del self.pacing[key]

        # Each claim and departure counts once: with the same history, a charged pair shows
        # no progress to the row its charge wrote (a refund keeps its stamp and named todo).
        states = {s.key: s for s in self.board.pair_states()}
        for key in charged:
            assert None is self.progress(key, before.todos)
            assert False is made_progress(states[key], self.board.ledger[key])

    def check_core(
        self,
        states: dict[PairKey, PairState],
        rows: dict[PairKey, LedgerRow],
        outcome: ChargeOutcome,
    ) -> None:
        """Every charge is one the core's ``decide`` calls due on the rows as they were.

        With the board as the sweep found it, ``plan_tick`` charges and drains exactly that.
        """
        for nudge in outcome.charged:
            state, row = states[nudge.key], rows.get(nudge.key)
            assert Charge(number=nudge.number, todo=nudge.todo) == decide(
                state, row, self.now, self.policy
            )
            assert charge_stamp(state, self.now) == nudge.charged_at
        plan = plan_tick(states.values(), rows, self.now, self.policy)
        assert (plan.charges, plan.drained) == (outcome.charged, outcome.drained)

    def check_nudge(self, before: Before, nudge: Nudge, *, refunded: bool = False) -> None:
        """The nudge is of a candidate pair, names its oldest gated todo and respects pacing.

        A refunded nudge leaves its row one count lower with the stamp kept.
        """
        # Never a fresh, ungated, quarantine, inactive-endpoint or hookless pair.
        assert nudge.key in before.eligible
        todo = before.eligible[nudge.key]
        assert (nudge.endpoint_id, nudge.queue, "pending") == (
            todo.endpoint_id,
            todo.queue,
            todo.state,
        )
        assert self.gate_passes(todo)
        # The named todo is the pair's oldest gate-passing pending todo.
        assert TodoRef(id=todo.id, created_at=todo.created_at, title=todo.title) == nudge.todo
        assert todo in before.gated[nudge.key]
        # Stamped now, or with the pair's latest claim if that is later: consumed once.
        assert before.stamps[nudge.key] == nudge.charged_at
        if nudge.charged_at > self.now:
            self.progress_seen.add("a claim stamped ahead")

        how = self.progress(nudge.key, before.todos)
        if nudge.key not in self.pacing or how is not None:
            assert 1 == nudge.number
            if how is not None:
                self.progress_seen.add(how)
        else:
            # Every nudge but one that starts over (a refunded nudge 1 too) waits its step.
            pacing = self.pacing[nudge.key]
            assert pacing.count + 1 == nudge.number
            assert self.now >= pacing.last + self.policy.delay_before(nudge.number)
        count = nudge.number - 1 if refunded else nudge.number
        self.pacing[nudge.key] = Pacing(count=count, last=nudge.charged_at, named=todo.id)
        # Never more than cap nudges between two progress events.
        assert count <= self.policy.cap
        assert (
            LedgerRow(
                endpoint_id=nudge.endpoint_id,
                queue=nudge.queue,
                nudges=count,
                last_nudged_at=nudge.charged_at,
                named_todo=todo.id,
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
        """Every row holds the model's count, stamp, named todo and kept progress; no other row."""
        assert {key: (p.count, p.last, p.named, p.kept) for key, p in self.pacing.items()} == {
            key: (row.nudges, row.last_nudged_at, row.named_todo, row.progressed_at)
            for key, row in self.board.ledger.items()
        }

    @invariant()
    def progress_follows_the_model(self) -> None:
        """The core reads progress on the board's pairs exactly where the model sees it."""
        todos = dict(self.board.todos)
        for state in self.board.pair_states():
            row = self.board.ledger.get(state.key)
            assert (self.progress(state.key, todos) is not None) == made_progress(state, row)


BoardMachine.TestCase.settings = settings(
    max_examples=examples(150),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoardHistories = BoardMachine.TestCase
TestBoardHistories.__doc__ = "Random host histories and sweeps never break a SPEC-0038 guarantee."
