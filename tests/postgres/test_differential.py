"""Differential test: Postgres ticking as production does keeps the core's rules, tick for tick.

Hypothesis draws histories of host writes, clock moves and sweeps, the host
writes including what a real host does that no timestamp shows or that a
timestamp gets wrong: claims stamped by a clock 60 s behind or 2 min ahead
of the database's, claims whose transaction spans a tick, todos deleted or
un-stamped when done, moved to another queue or requeued, deliveries
verified or revoked, endpoints paused, hooks re-scoped, writes under the
replica role, TRUNCATE. The same history is applied to a memory board, which
stands in for the host's rows.

One ledger, the sweeping role's in a DBA's database (``site``), ticks as
production does (deltas, and a full pass every ``FULL_PASS_INTERVAL``); the
core's rules are evaluated on its own ledger rows at each tick's ``now``, with
the claims window and read set of its own fleet record (``claims_window`` from
the last tick's ``judged_to``, the claims that tick read): every charge is one
the core calls due, with its number and todo, stamped ``now``; a full pass
charges, clears, resets and writes exactly what ``plan_tick`` says, so a due
pair waits at most one full-pass interval; every tick records exactly the
claims in its window (``claims_read``); no claim or departure counts twice
(after a charge the pair shows no progress to the next tick on the same rows).
A claim the late transaction commits after a tick is new to the next one,
whatever its stamp, as long as the window still holds it.

What one full pass does on any rows a host may hold, and each rule the SQL
restates, are held to the core in test_rules_differential.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta

import asyncpg
import attrs
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from adapters.memory import MemoryBoard
from adapters.postgres import PostgresLedger
from stall_core import (
    Charge,
    Claim,
    LedgerRow,
    PacingPolicy,
    PairKey,
    charge_row,
    claims_read,
    claims_window,
    decide,
    made_progress,
    plan_tick,
    reset_row,
)
from stall_testing import MemoryDriver, PostgresDriver
from tests import pg
from tests.support import T0, FakeClock, examples

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()
ENDPOINTS = ("ep-a", "ep-b", "ep-c")
QUEUES = ("lane-l", "quarantine", "ünïcødé-队列", "ops")
#: One hook per endpoint covering every queue, and a second one on ep-a for "ops" only.
HOOKS = (*(f"hook-{e}" for e in ENDPOINTS), "hook-ep-a-ops")
HOOK_ENDPOINT = {**{f"hook-{e}": e for e in ENDPOINTS}, "hook-ep-a-ops": "ep-a"}
GATES = ("verified", "unverified", "none")
DELIVERIES = tuple(f"{gate}-{e}" for e in ENDPOINTS for gate in ("verified", "unverified"))

US = timedelta(microseconds=1)
STALLED = timedelta(minutes=10)
#: The instants the schedule turns on, and one microsecond either side.
BOUNDARIES = sorted(
    {
        edge + nudge
        for edge in (POLICY.threshold, *POLICY.backoff)
        for nudge in (-US, timedelta(0), US)
    }
    | {timedelta(0), US}
)
#: How a host stamps a claim, against the ledger's clock: right, 60 s behind, 2 min ahead.
SKEWS = {"db": timedelta(0), "behind": timedelta(seconds=-60), "ahead": timedelta(minutes=2)}
#: How a host ends a todo: done (claimed_at kept), done and un-stamped, or deleted.
ENDINGS = ("complete", "unstamp", "delete")

STEP = st.sampled_from(BOUNDARIES) | st.integers(min_value=0, max_value=8 * 3600).map(
    lambda s: timedelta(seconds=s)
)
AGE = st.sampled_from([timedelta(0), *BOUNDARIES[2:5], STALLED])
INDEX = st.integers(min_value=0, max_value=50)
ARGS: dict[str, st.SearchStrategy[tuple[object, ...]]] = {
    "create": st.tuples(
        st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES), st.sampled_from(GATES), AGE
    ),
    "claim": st.tuples(INDEX, st.sampled_from(tuple(SKEWS))),
    "finish": st.tuples(INDEX, st.sampled_from(ENDINGS)),
    "requeue": st.tuples(INDEX, st.booleans()),
    "move": st.tuples(INDEX, st.sampled_from(QUEUES)),
    "delete": st.tuples(INDEX),
    "verify": st.tuples(st.sampled_from(DELIVERIES), st.booleans()),
    "endpoint": st.tuples(
        st.sampled_from(ENDPOINTS), st.sampled_from(["active", "active", "paused", "disabled"])
    ),
    "hook_enabled": st.tuples(st.sampled_from(HOOKS), st.booleans()),
    "hook_queues": st.tuples(
        st.sampled_from(HOOKS),
        st.none() | st.lists(st.sampled_from(QUEUES), unique=True, max_size=3),
    ),
    # A claim under session_replication_role = replica (a logical-replication apply).
    "replica_claim": st.tuples(INDEX),
    "truncate": st.just(()),
    # A claim, or a creation, whose transaction commits only after the next sweep.
    "late_claim": st.tuples(INDEX),
    "late_create": st.tuples(
        st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES), st.sampled_from(GATES), AGE
    ),
    # Stalled work in more pairs than one tick may charge.
    "burst": st.lists(
        st.tuples(st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES)),
        min_size=POLICY.tick_limit + 1,
        max_size=9,
        unique=True,
    ).map(lambda pairs: (tuple(pairs),)),
    "advance": st.tuples(STEP),
    "tick": st.tuples(STEP),
    "edge": st.tuples(INDEX, st.sampled_from([-US, US * 0, US])),
    "sweep": st.just(()),
}
WEIGHTS = {"create": 4, "claim": 3, "finish": 2, "requeue": 1, "move": 1, "delete": 1}
WEIGHTS |= {"verify": 1, "endpoint": 1, "hook_enabled": 1, "hook_queues": 1}
WEIGHTS |= {"replica_claim": 1, "truncate": 1, "late_claim": 1, "late_create": 1, "burst": 1}
WEIGHTS |= {"advance": 2, "tick": 4, "edge": 3, "sweep": 2}
OPS = st.lists(
    st.sampled_from([kind for kind, weight in WEIGHTS.items() for _ in range(weight)]).flatmap(
        lambda kind: ARGS[kind].map(lambda drawn: (kind, *drawn))
    ),
    min_size=20,
    max_size=80,
)
#: The ops that end in a sweep (after moving the clock, for "tick" and "edge").
SWEEPS = ("sweep", "tick", "edge")

Driver = MemoryDriver | PostgresDriver
Verb = Callable[[Driver], Awaitable[None]]

#: Empties the host's tables (the host's schema first on the search_path) and ours.
CLEAR = (
    "DELETE FROM stall_nudge.queue_stall_nudges; DELETE FROM notify_hooks; DELETE FROM todos;"
    " DELETE FROM deliveries; DELETE FROM endpoints; DELETE FROM stall_nudge.held;"
    " DELETE FROM stall_nudge.ticks"
)


async def setup(driver: Driver) -> None:
    """Three active endpoints, their hooks, one verified and one unverified delivery each."""
    for endpoint in ENDPOINTS:
        await driver.add_endpoint(endpoint)
        for gate in ("verified", "unverified"):
            await driver.add_delivery(
                f"{gate}-{endpoint}",
                endpoint_id=endpoint,
                verified=gate == "verified",
                received_at=T0,
            )
    for hook in HOOKS:
        queues = ["ops"] if hook == "hook-ep-a-ops" else None
        await driver.add_hook(hook, endpoint_id=HOOK_ENDPOINT[hook], queues=queues)


def moved(op: tuple[object, ...], board: MemoryBoard, now: datetime) -> datetime:
    """The clock after ``op``: a step forward, a jump to a coming edge, or unchanged."""
    kind, *args = op
    if kind in ("advance", "tick"):
        (delta,) = args
        assert isinstance(delta, timedelta)
        return now + delta
    if kind == "edge":
        instants = {
            t.created_at + POLICY.threshold for t in board.todos.values() if t.state == "pending"
        }
        instants |= {
            row.last_nudged_at + POLICY.delay_before(row.nudges + 1)
            for row in board.ledger.values()
            if row.nudges < POLICY.cap
        }
        coming = sorted(i for i in instants if i >= now)
        if coming:
            index, offset = args
            assert isinstance(offset, timedelta)
            return max(now, coming[int(str(index)) % len(coming)] + offset)
    return now


def resolve(
    op: tuple[object, ...], board: MemoryBoard, now: datetime, name: str, held: set[str]
) -> Verb | None:
    """The host verb ``op`` stands for on the board as it is now; None when it has no target.

    ``held``: todos a late transaction holds; no other write may touch them
    until it commits (it would wait for that transaction, which waits for
    the sweep).
    """
    kind, *args = op

    def pick(state: str | None, index: object) -> str | None:
        targets = sorted(
            t.id
            for t in board.todos.values()
            if (state is None or t.state == state) and t.id not in held
        )
        return targets[int(str(index)) % len(targets)] if targets else None

    if kind in ("create", "late_create"):
        endpoint, queue, gate, age = args
        assert isinstance(age, timedelta)
        delivery = None if gate == "none" else f"{gate}-{endpoint}"
        return lambda d: d.create_todo(
            name,
            endpoint_id=str(endpoint),
            queue=str(queue),
            created_at=now - age,
            delivery_id=delivery,
            title=f"{gate} work {name}",
        )
    if kind == "burst":
        (pairs,) = args
        assert isinstance(pairs, tuple)

        async def burst(d: Driver) -> None:
            for i, (endpoint, queue) in enumerate(pairs):
                await d.create_todo(
                    f"{name}-{i}",
                    endpoint_id=endpoint,
                    queue=queue,
                    created_at=now - STALLED + i * US,
                    delivery_id=f"verified-{endpoint}",
                    title=f"burst {name}-{i}",
                )

        return burst
    if kind in ("claim", "replica_claim", "late_claim"):
        target = pick("pending", args[0])
        skew = SKEWS[str(args[1])] if kind == "claim" else timedelta(0)
        if target is None:
            return None
        return lambda d: d.claim(target, owner="consumer", at=now + skew)
    if kind == "finish":
        index, ending = args
        target = pick("claimed", index)
        if target is None:
            return None
        if ending == "delete":
            return lambda d: d.delete_todo(target)
        return lambda d: d.complete(target, unstamp=ending == "unstamp")
    if kind == "requeue":
        index, unstamp = args
        target = pick("claimed", index)
        return None if target is None else lambda d: d.requeue(target, unstamp=bool(unstamp))
    if kind == "move":
        index, queue = args
        target = pick(None, index)
        return None if target is None else lambda d: d.move_todo(target, str(queue))
    if kind == "delete":
        target = pick(None, args[0])
        return None if target is None else lambda d: d.delete_todo(target)
    if kind == "verify":
        delivery, verified = args
        return lambda d: d.set_delivery_verified(str(delivery), bool(verified))
    if kind == "endpoint":
        endpoint, state = args
        return lambda d: d.set_endpoint_state(str(endpoint), str(state))
    if kind == "hook_enabled":
        hook, enabled = args
        return lambda d: d.set_hook_enabled(str(hook), bool(enabled))
    if kind == "hook_queues":
        hook, queues = args
        assert queues is None or isinstance(queues, list)
        return lambda d: d.set_hook_queues(str(hook), queues)
    if kind == "truncate":
        if held:
            return None  # TRUNCATE would wait for the late transaction
        everything = sorted(board.todos)

        async def truncate(d: Driver) -> None:
            # On Postgres, History.write runs TRUNCATE instead (the host's role may not).
            for todo_id in everything:
                await d.delete_todo(todo_id)

        return truncate
    raise AssertionError(f"unknown op {op!r}")


@attrs.frozen
class Conns:
    """The host's application (``host``, and ``late`` for a transaction left open), the
    sweeping role, and a superuser (``admin``: our tables, TRUNCATE, the replica role)."""

    host: asyncpg.Pool
    sweeper: asyncpg.Pool
    admin: asyncpg.Pool
    late: asyncpg.Connection


class History:
    """One history applied to a memory board and to Postgres, step by step.

    Late ops run their Postgres statement in a transaction of their own that
    commits after the next sweep, and reach the memory board then.
    """

    def __init__(self, conns: Conns) -> None:
        self.clock = FakeClock(T0)
        self.memory = MemoryDriver(self.clock)
        self.postgres = pg.SiteDriver(conns.host, conns.sweeper, self.clock)
        self.admin = conns.admin
        self.late_conn = conns.late
        self.late: list[Verb] = []
        self.held: set[str] = set()
        #: The todos late transactions claimed (committed after a sweep, or to be).
        self.late_claims: set[str] = set()
        self.count = 0

    @property
    def board(self) -> MemoryBoard:
        return self.memory.board

    async def start(self) -> None:
        if self.late_conn.is_in_transaction():  # an example that ended before its sweep
            await self.late_conn.execute("ROLLBACK")
        await self.admin.execute(CLEAR)
        for driver in (self.memory, self.postgres):
            await setup(driver)

    async def write(self, op: tuple[object, ...]) -> None:
        """Apply one host write to both backends (a late one to Postgres, uncommitted)."""
        self.count += 1
        name = f"t{self.count:03d}"
        verb = resolve(op, self.board, self.clock.now, name, self.held)
        if verb is None:
            return
        if op[0] in ("late_claim", "late_create"):
            if not self.late:
                await self.late_conn.execute("BEGIN")
            await verb(PostgresDriver(self.late_conn, self.clock))  # type: ignore[arg-type]
            # The late transaction holds what it wrote (a TRUNCATE would wait for it).
            if op[0] == "late_claim":
                target = _target(op, self.board, self.held)
                self.held.add(target)
                self.late_claims.add(target)
            else:
                self.held.add(name)
            self.late.append(verb)
            return
        if op[0] == "truncate":
            await self.admin.execute("TRUNCATE todos")
        elif op[0] == "replica_claim":
            async with self.admin.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL session_replication_role = replica")
                await verb(PostgresDriver(conn, self.clock))  # type: ignore[arg-type]
        else:
            await verb(self.postgres)
        await verb(self.memory)

    async def commit_late(self) -> None:
        """The late transaction commits (after a sweep): its writes reach the memory board."""
        if self.late:
            await self.late_conn.execute("COMMIT")
            for verb in self.late:
                await verb(self.memory)
            self.late.clear()
            self.held.clear()

    async def rows(self) -> dict[PairKey, LedgerRow]:
        return dict(await self.postgres.ledger_rows())

    async def record(self) -> tuple[datetime | None, set[Claim]]:
        """The fleet's record of its last tick: its ``judged_to``, and the claims it read."""
        record = await self.admin.fetchrow(
            "SELECT judged_to, claims_read_ids, claims_read_at FROM stall_nudge.ticks"
        )
        if record is None:
            return None, set()
        ids, stamps = record["claims_read_ids"] or [], record["claims_read_at"] or []
        assert len(ids) == len(stamps), "the read set's ids and stamps go side by side"
        return record["judged_to"], set(zip(ids, stamps, strict=True))

    def claims(self, since: datetime) -> set[Claim]:
        """The claims a tick reads from the host's rows (the board's) in the window ``since``."""
        return claims_read(
            ((t.id, t.state, t.claimed_at) for t in self.board.todos.values()), since
        )


def _target(op: tuple[object, ...], board: MemoryBoard, held: set[str]) -> str:
    """The todo a late claim took (as ``resolve`` picked it)."""
    targets = sorted(
        t.id for t in board.todos.values() if t.state == "pending" and t.id not in held
    )
    return targets[int(str(op[1])) % len(targets)]


async def usual_ticks(history: History, ops: list[tuple[object, ...]]) -> tuple[int, int]:
    """One ledger ticking as production does, held to the core's rules on its own rows.

    Returns how many delta and full ticks ran.
    """
    ledger = history.postgres.ledger
    assert isinstance(ledger, PostgresLedger)
    kinds = {"delta": 0, "full": 0}
    for step, op in enumerate(ops):
        now = moved(op, history.board, history.clock.now)
        history.clock.set(now)
        note(f"step {step}, now = T0 + {now - T0}: {op!r}")
        if op[0] == "advance":
            continue
        if op[0] not in SWEEPS:
            await history.write(op)
            continue
        rows = await history.rows()
        # The claims window and read set the tick judges by, from the fleet's record.
        judged_to, read = await history.record()
        since = claims_window(judged_to, now, ledger.lookback)
        # The host's rows as the sweep's snapshot sees them: the late transaction's are not.
        pairs = history.board.pair_states(rows, since=since, read=read)
        if any(todo_id in history.late_claims for todo_id, _ in history.claims(since) - read):
            event("a claim committed after a tick is new to the next")
        decisions = {p.key: decide(p, rows.get(p.key), now, POLICY) for p in pairs}
        outcome = await ledger.charge_due(policy=POLICY)
        assert outcome.kind is not None
        kinds[outcome.kind] += 1
        for nudge in outcome.charged:
            decision = decisions[nudge.key]
            assert isinstance(decision, Charge), f"step {step}: {nudge.key} charged, not due"
            assert (decision.number, decision.todo, now) == (
                nudge.number,
                nudge.todo,
                nudge.charged_at,
            ), f"step {step}: {nudge.key} charged otherwise than the core says"
        assert len(outcome.charged) <= POLICY.tick_limit
        if outcome.kind == "full":
            planned = plan_tick(pairs, rows, now, POLICY)
            assert planned.charges == outcome.charged, f"step {step}: a full pass charged otherwise"
            assert planned.cleared == outcome.cleared, f"step {step}: a full pass cleared otherwise"
        after = await history.rows()
        if outcome.kind == "full":
            wrote = {k: row for k, row in rows.items() if k not in planned.cleared}
            wrote |= {k: reset_row(rows[k], now) for k in planned.reset}
            wrote |= {n.key: charge_row(n) for n in planned.charges}
            assert wrote == after, f"step {step}: a full pass wrote rows otherwise"
        # The tick read every claim in its window, and only those, in either kind; the
        # late transaction's are not among them (the snapshot does not see them).
        judged_now, recorded = await history.record()
        assert judged_now == now, f"step {step}: the record's judged_to is the tick's now"
        assert history.claims(since) == recorded, f"step {step}: the tick read other claims"
        # The pairs as the next tick would read them against the rows the charge wrote, on
        # the same host rows: its window starts a lookback before this tick (the clock never
        # goes back), and the claims this tick read are not new to it.
        since_next = claims_window(now, now, ledger.lookback)
        seen_after = {
            p.key: p for p in history.board.pair_states(after, since=since_next, read=recorded)
        }
        for nudge in outcome.charged:
            assert not made_progress(seen_after[nudge.key], after[nudge.key]), (
                f"step {step}: {nudge.key} would count the same progress again"
            )
        await history.commit_late()
    return kinds["delta"], kinds["full"]


@pytest.fixture(name="conns")
async def _conns(site: pg.Site) -> AsyncIterator[Conns]:
    async with site.pools() as pools:
        late = await asyncpg.connect(
            site.as_role(site.cast.app), server_settings={"search_path": pg.HOST_SCHEMA}
        )
        try:
            yield Conns(pools.host, pools.sweeper, pools.admin, late)
        finally:
            await late.close()


#: Each example clears the tables of the test's one database.
REUSED = [HealthCheck.function_scoped_fixture]


@settings(max_examples=examples(60), suppress_health_check=REUSED)
@given(ops=OPS)
async def test_usual_ticks_keep_the_core_rules(conns: Conns, ops: list[tuple[object, ...]]) -> None:
    """Deltas and full passes: every charge due, full passes exact, no progress counted twice."""
    history = History(conns)
    await history.start()
    deltas, fulls = await usual_ticks(history, ops)
    event(f"ticks: {deltas} delta, {fulls} full")
