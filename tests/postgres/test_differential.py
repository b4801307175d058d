"""Differential tests: the memory board and Postgres agree, and `status` agrees with the sweep.

Hypothesis draws a sequence of host verbs, clock moves and sweeps; the same
sequence is applied to a MemoryBoard and to Postgres, and after every step
the two ledgers must hold identical rows and every sweep must charge the
same nudges (pair, todo, number, title) and delete the same rows. Before
each sweep, Postgres' `status` is asked too: the sweep must charge exactly
the pairs it calls due, the first tick_limit of them in charge order, and
no other. A "late" todo or claim is written in a transaction that commits
only after the next sweep.

In the lean footprint Postgres reads the host's rows on every tick, so the
histories also hold writes no trigger sees (a todo created or claimed under
``session_replication_role = replica`` or with the triggers disabled, a
claim stamped by the host's own BEFORE trigger, a TRUNCATE, done todos
purged), applied to the memory board as ordinary writes: the two must still
agree tick for tick (the memory board reading progress by timestamps too).
In the incremental footprint the memory board reads progress in commit
order; Postgres runs once judging only what changed (one full pass, the
first tick), once with a full pass whenever the clock moved, and once
compacting its logs on nearly every tick. A second incremental test writes
behind the triggers' back and holds Postgres to its own `status`: no tick
charges a pair `status` does not call due, and a full pass, or any tick with
nothing hidden since the last one, charges exactly what `status` calls due.
Each example starts from empty tables in one database cloned for the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import asyncpg
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from adapters.memory import MemoryBoard
from adapters.postgres import COMPACT_AT, PostgresLedger
from stall_core import PacingPolicy, PairKey, Progress, Verdict, full_pass_due
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

US = timedelta(microseconds=1)
#: How long ago stalled work was created (well past the threshold).
MINUTES_10 = timedelta(minutes=10)
#: The instants the schedule turns on, and one microsecond either side.
BOUNDARIES = sorted(
    {
        edge + nudge
        for edge in (POLICY.threshold, *POLICY.backoff)
        for nudge in (-US, timedelta(0), US)
    }
    | {timedelta(0), US}
)

#: A clock move: onto a schedule boundary (or a microsecond off it), or any whole second.
STEP = st.sampled_from(BOUNDARIES) | st.integers(min_value=0, max_value=8 * 3600).map(
    lambda s: timedelta(seconds=s)
)
#: Every verb with its arguments; "tick" is a clock move followed by a sweep, the reaper's beat.
ARGS: dict[str, st.SearchStrategy[tuple[object, ...]]] = {
    "create": st.tuples(
        st.sampled_from(ENDPOINTS),
        st.sampled_from(QUEUES),
        st.sampled_from(GATES),
        # created_at = now - age: fresh, either side of the threshold, or long stalled.
        st.sampled_from([timedelta(0), *BOUNDARIES[2:5], MINUTES_10]),
    ),
    "claim": st.tuples(st.integers(min_value=0, max_value=50)),
    "complete": st.tuples(st.integers(min_value=0, max_value=50)),
    "requeue": st.tuples(st.integers(min_value=0, max_value=50)),
    "endpoint": st.tuples(
        st.sampled_from(ENDPOINTS), st.sampled_from(["active", "active", "paused", "disabled"])
    ),
    "hook_enabled": st.tuples(st.sampled_from(HOOKS), st.booleans()),
    "hook_queues": st.tuples(
        st.sampled_from(HOOKS),
        st.none() | st.lists(st.sampled_from(QUEUES), unique=True, max_size=3),
    ),
    "advance": st.tuples(STEP),
    "tick": st.tuples(STEP),
    "sweep": st.just(()),
    # A claim in a transaction that commits only after the next sweep.
    "late_claim": st.tuples(st.integers(min_value=0, max_value=50)),
    # Created in a transaction that commits only after the next sweep.
    "late": st.tuples(
        st.sampled_from(ENDPOINTS),
        st.sampled_from(QUEUES),
        st.sampled_from(GATES),
        st.sampled_from([timedelta(0), *BOUNDARIES[2:5], MINUTES_10]),
    ),
    # A storm: stalled work in several pairs at once, each a microsecond apart, so a tick
    # finds more pairs newly due than it may charge and stops its walk of the changes.
    "burst": st.lists(
        st.tuples(st.sampled_from(ENDPOINTS), st.sampled_from(QUEUES)),
        min_size=POLICY.tick_limit + 1,
        max_size=9,
        unique=True,
    ).map(lambda pairs: (tuple(pairs),)),
    # Jump to one of the instants the schedule turns on (or a microsecond off it), then sweep.
    "edge": st.tuples(st.integers(min_value=0, max_value=50), st.sampled_from([-US, US * 0, US])),
}
#: How often each verb is drawn: mostly work, time and sweeps; now and then a config change.
WEIGHTS = {"create": 4, "claim": 2, "complete": 1, "requeue": 1, "endpoint": 1}
WEIGHTS |= {"hook_enabled": 1, "hook_queues": 1, "advance": 2, "tick": 4, "edge": 3, "sweep": 2}
WEIGHTS |= {"late": 1, "late_claim": 1, "burst": 1}


def histories(
    weights: dict[str, int], args: dict[str, st.SearchStrategy[tuple[object, ...]]]
) -> st.SearchStrategy[list[tuple[object, ...]]]:
    """Lists of ops drawn with ``weights``, each with its arguments from ``args``."""
    return st.lists(
        st.sampled_from([kind for kind, weight in weights.items() for _ in range(weight)]).flatmap(
            lambda kind: args[kind].map(lambda drawn: (kind, *drawn))
        ),
        min_size=20,
        max_size=80,
    )


OPS = histories(WEIGHTS, ARGS)
#: The same Postgres judged incrementally (one full pass, the first tick) and fully.
INCREMENTAL = timedelta(days=100_000)
FULL = US


async def setup(driver: MemoryDriver | PostgresDriver) -> None:
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


Driver = MemoryDriver | PostgresDriver


#: The ops that end in a sweep (after moving the clock, for "tick" and "edge").
SWEEPS = ("sweep", "tick", "edge")


def moved(op: tuple[object, ...], board: MemoryBoard, now: datetime) -> datetime:
    """The clock after ``op``: a step forward, a jump to a coming edge, or unchanged."""
    kind, *args = op
    if kind in ("advance", "tick"):
        (delta,) = args
        assert isinstance(delta, timedelta)
        return now + delta
    if kind == "edge" and (coming := edges(board, now)):
        index, offset = args
        assert isinstance(offset, timedelta)
        return max(now, coming[int(str(index)) % len(coming)] + offset)
    return now


def edges(board: MemoryBoard, now: datetime) -> list[datetime]:
    """The coming instants where a todo crosses the threshold or a ledger row's backoff ends."""
    instants = {
        t.created_at + POLICY.threshold for t in board.todos.values() if t.state == "pending"
    }
    instants |= {
        row.last_nudged_at + POLICY.delay_before(row.nudges + 1)
        for row in board.ledger.values()
        if row.nudges < POLICY.cap
    }
    return sorted(i for i in instants if i >= now)


Verb = Callable[[Driver], Awaitable[None]]


def resolve(
    op: tuple[object, ...],
    board: MemoryBoard,
    now: datetime,
    todo_id: str,
    held: frozenset[str] = frozenset(),
) -> Verb | None:
    """The host verb ``op`` stands for on the board as it is now; None when it has no target.

    ``held``: todos a late transaction has claimed, which no other write may touch
    until it commits (it would wait for that transaction, which waits for the sweep).
    """
    kind, *args = op
    if kind in ("create", "late", "hidden_create"):
        endpoint, queue, gate, age, *_ = args
        assert isinstance(age, timedelta)
        delivery = None if gate == "none" else f"{gate}-{endpoint}"
        return lambda d: d.create_todo(
            todo_id,
            endpoint_id=str(endpoint),
            queue=str(queue),
            created_at=now - age,
            delivery_id=delivery,
            title=f"{gate} work {todo_id}",
        )
    if kind == "burst":
        (pairs,) = args
        assert isinstance(pairs, tuple)

        async def burst(d: Driver) -> None:
            for i, (endpoint, queue) in enumerate(pairs):
                await d.create_todo(
                    f"{todo_id}-{i}",
                    endpoint_id=endpoint,
                    queue=queue,
                    created_at=now - MINUTES_10 + i * US,
                    delivery_id=f"verified-{endpoint}",
                    title=f"burst {todo_id}-{i}",
                )

        return burst
    if kind in ("claim", "late_claim", "hidden_claim", "before_claim", "complete", "requeue"):
        (index, *_) = args
        needs = "claimed" if kind in ("complete", "requeue") else "pending"
        targets = sorted(
            t.id for t in board.todos.values() if t.state == needs and t.id not in held
        )
        if not targets:
            return None
        target = targets[int(str(index)) % len(targets)]
        if kind not in ("complete", "requeue"):
            return _Claim(target, now)
        return (
            (lambda d: d.complete(target)) if kind == "complete" else (lambda d: d.requeue(target))
        )
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
    if kind == "hidden_hook":
        (hook, _) = args
        enabled = board.hooks[str(hook)].enabled
        return lambda d: d.set_hook_enabled(str(hook), not enabled)
    if kind in ("truncate", "purge"):
        gone = sorted(t.id for t in board.todos.values() if kind == "truncate" or t.state == "done")

        async def delete(d: Driver) -> None:
            assert isinstance(d, MemoryDriver)  # Postgres gets the raw statement (hidden)
            for todo_id in gone:
                d.board.delete_todo(todo_id)

        return delete
    raise AssertionError(f"unknown op {op!r}")


#: Pair changes past the threshold that a tick left for later (its walk filled the limit).
LEFT_PAST_THE_CUT = (
    "SELECT count(*) > 0 FROM stall_nudge.changes WHERE queue IS NOT NULL AND look_after < $1"
)
RESET = (
    "DELETE FROM queue_stall_nudges; DELETE FROM stall_nudge.claims;"
    " DELETE FROM notify_hooks; DELETE FROM todos; DELETE FROM deliveries;"
    " DELETE FROM endpoints; DELETE FROM stall_nudge.changes; DELETE FROM stall_nudge.held;"
    " DELETE FROM stall_nudge.sweeps"
)
#: The host's own BEFORE trigger, as some hosts stamp claims: an UPDATE that claims sets
#: only the state, and the trigger stamps claimed_at (with the test clock's instant,
#: from a setting, where a real host would use now()). Installed in every test database.
HOST_STAMPS_CLAIMS = """
CREATE FUNCTION host_stamps_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'claimed' AND OLD.state = 'pending'
       AND coalesce(current_setting('host.claim_stamp', true), '') <> '' THEN
        NEW.claimed_at := current_setting('host.claim_stamp')::timestamptz;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER host_stamps_claims BEFORE UPDATE ON todos
    FOR EACH ROW EXECUTE FUNCTION host_stamps_claims();
"""

#: Writes no trigger of ours sees, each with how it hides: under session_replication_role
#: = replica (a logical-replication apply, pg_restore --disable-triggers), or with the
#: table's triggers disabled. A claim stamped by the host's BEFORE trigger, a TRUNCATE and
#: done todos purged hide on their own.
BYPASS = st.sampled_from(["replica", "disabled"])
HIDDEN: dict[str, st.SearchStrategy[tuple[object, ...]]] = {
    "hidden_create": st.tuples(
        st.sampled_from(ENDPOINTS),
        st.sampled_from(QUEUES),
        st.sampled_from(GATES),
        st.sampled_from([timedelta(0), *BOUNDARIES[2:5], MINUTES_10]),
        BYPASS,
    ),
    "hidden_claim": st.tuples(st.integers(min_value=0, max_value=50), BYPASS),
    "hidden_hook": st.tuples(st.sampled_from(HOOKS), BYPASS),
    "before_claim": st.tuples(st.integers(min_value=0, max_value=50)),
    "truncate": st.tuples(BYPASS),
    "purge": st.just(()),
}
#: The hidden writes that hide by a bypass (their last argument).
BYPASSED = ("hidden_create", "hidden_claim", "hidden_hook", "truncate")


async def hidden(conn: asyncpg.Connection, op: tuple[object, ...], verb: Verb | None) -> None:
    """Apply a write no trigger of ours sees to Postgres, as ``verb`` applies it to the board.

    The board's verb names the target (the same todo, the same hook); the
    statement here writes it the way that hides it.
    """
    kind, *args = op
    bypass = (
        args[-1] if kind in ("hidden_create", "hidden_claim", "hidden_hook", "truncate") else ""
    )
    async with conn.transaction():
        if bypass == "replica":
            await conn.execute("SET LOCAL session_replication_role = replica")
        elif bypass == "disabled":
            for table in ("todos", "notify_hooks"):
                await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        if kind == "truncate":
            await conn.execute("TRUNCATE todos")
        elif kind == "purge":
            await conn.execute("DELETE FROM todos WHERE state = 'done'")
        elif kind == "before_claim":
            assert verb is not None
            await verb(_Stamped(conn))  # type: ignore[arg-type]
        elif verb is not None:
            await verb(PostgresDriver(conn))  # type: ignore[arg-type]
        if bypass == "disabled":
            for table in ("todos", "notify_hooks"):
                await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER ALL")


class _Claim:
    """A claim of one todo at one instant, as a verb (it names its target)."""

    def __init__(self, target: str, at: datetime) -> None:
        self.target = target
        self.at = at

    async def __call__(self, d: Driver | _Stamped) -> None:
        await d.claim(self.target, owner="consumer", at=self.at)


class _Stamped:
    """A host whose claim sets only the state: its own BEFORE trigger stamps claimed_at."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def claim(self, todo_id: str, *, owner: str, at: datetime) -> None:
        await self._conn.execute("SELECT set_config('host.claim_stamp', $1, true)", at.isoformat())
        await self._conn.execute(
            "UPDATE todos SET state = 'claimed', claim_owner = $2 WHERE id = $1", todo_id, owner
        )


async def replay(
    pool: asyncpg.Pool,
    late_pool: asyncpg.Pool,
    ops: list[tuple[object, ...]],
    interval: timedelta,
    compact_at: int = COMPACT_AT,
    progress: Progress = Progress.COMMIT_ORDER,
) -> int:
    """Apply ``ops`` to a fresh memory board and to Postgres, comparing after every step.

    The board reads progress as ``progress`` says (the Postgres footprint's
    reading). Returns how many sweeps left pair changes past their cut.
    """
    await pool.execute(RESET)
    clock = FakeClock(T0)
    memory_driver = MemoryDriver(clock, progress=progress)
    board = memory_driver.board
    backends: tuple[Driver, Driver] = (
        memory_driver,
        PostgresDriver(pool, clock, full_pass_interval=interval, compact_at=compact_at),
    )
    for driver in backends:
        await setup(driver)
    now = T0
    numbers: list[int] = []
    deleted = cuts = 0
    late: list[Verb] = []
    held: set[str] = set()
    async with late_pool.acquire() as late_conn:
        for step, op in enumerate(ops):
            note(f"step {step}, now = T0 + {now - T0}: {op!r}")
            now = moved(op, board, now)
            clock.set(now)
            if op[0] in SWEEPS:
                due = await due_by_status(PostgresLedger(pool, clock=clock))
                memory, postgres = [await d.ledger.charge_due(policy=POLICY) for d in backends]
                assert memory == postgres, f"step {step}: the sweeps differ"
                assert due[: POLICY.tick_limit] == [n.key for n in postgres.charged], (
                    f"step {step}: status called {due} due"
                )
                numbers.extend(n.number for n in memory.charged)
                if await pool.fetchval(LEFT_PAST_THE_CUT, now - POLICY.threshold):
                    event("a tick judged the changes only up to its cut")
                    cuts += 1
                deleted += len(memory.drained)
                if late:
                    await late_conn.execute("COMMIT")
                    for verb in late:
                        await verb(memory_driver)
                    late.clear()
                    held.clear()
            elif op[0] in ("late", "late_claim"):
                verb = resolve(op, board, now, f"t{step}", frozenset(held))
                if verb is not None:
                    if not late:
                        await late_conn.execute("BEGIN")
                    await verb(PostgresDriver(late_conn))  # type: ignore[arg-type]
                    late.append(verb)
                    if isinstance(verb, _Claim):
                        held.add(verb.target)
            elif op[0] in HIDDEN:
                if late:
                    continue  # it would wait on the late transaction's locks
                verb = resolve(op, board, now, f"t{step}")
                if verb is not None or op[0] in ("truncate", "purge"):
                    async with pool.acquire() as conn:
                        await hidden(conn, op, verb)
                    if verb is not None:
                        await verb(memory_driver)
            elif op[0] != "advance" and (
                verb := resolve(op, board, now, f"t{step}", frozenset(held))
            ):
                for driver in backends:
                    await verb(driver)
            memory_rows, postgres_rows = [await d.ledger_rows() for d in backends]
            assert memory_rows == postgres_rows, f"step {step}: the ledger rows differ"
        if late:
            await late_conn.execute("ROLLBACK")
    event(f"highest nudge number charged: {max(numbers, default=0)}")
    event("some ledger row drained" if deleted else "no ledger row drained")
    return cuts


async def due_by_status(ledger: PostgresLedger) -> list[PairKey]:
    """The pairs `status` calls due, in the order a tick charges them (plan_tick's)."""
    now, statuses = await ledger.status(policy=POLICY)
    due = []
    for s in statuses:
        if s.verdict is Verdict.DUE:
            assert s.oldest_age is not None  # a due pair has work
            due.append((s.effective_nudges or 0, now - s.oldest_age, s.endpoint_id, s.queue))
    return [(endpoint_id, queue) for *_, endpoint_id, queue in sorted(due)]


def test_lean_postgres_agrees_with_memory_on_every_tick_even_behind_the_triggers_back(
    pg_server: str, pg_template: str
) -> None:
    """Lean: every write (hidden ones too) and every sweep wakes and records as the board does.

    The board reads progress by timestamps, as the lean footprint does; hidden
    writes are ordinary writes to it, and the lean tick reads the host's rows.
    """
    weights = WEIGHTS | dict.fromkeys(HIDDEN, 1)
    ops = histories(weights, ARGS | HIDDEN)
    with databases(pg_server, pg_template) as (runner, pool, late_pool):

        @settings(max_examples=examples(60), deadline=None)
        @given(ops=ops)
        def agree(ops: list[tuple[object, ...]]) -> None:
            runner.run(replay(pool, late_pool, ops, FULL, progress=Progress.TIMESTAMPS))

        agree()


@pytest.mark.parametrize(
    ("interval", "compact_at"),
    [(INCREMENTAL, COMPACT_AT), (FULL, COMPACT_AT), (INCREMENTAL, 2)],
    ids=["changed", "full", "changed-compacting"],
)
def test_memory_and_postgres_agree_on_every_wake_and_ledger_row(
    pg_server: str, pg_template_incremental: str, interval: timedelta, compact_at: int
) -> None:
    """Incremental: random host verbs, clock moves and sweeps wake and record as the board does.

    With ``compact_at`` 2, nearly every tick compacts the logs before it judges.
    """
    with databases(pg_server, pg_template_incremental) as (runner, pool, late_pool):

        @settings(max_examples=examples(60), deadline=None)
        @given(ops=OPS)
        def agree(ops: list[tuple[object, ...]]) -> None:
            runner.run(replay(pool, late_pool, ops, interval, compact_at))

        agree()


UNICODE = "ünïcødé-队列"
#: Storms whose oldest changes a tick's walk must not count as pairs it will charge.
#: (Each starts with a sweep: the first tick is a full pass.)
STORMS: dict[str, list[tuple[object, ...]]] = {
    "the oldest changes are in pairs no hook covers": [
        ("sweep",),
        ("hook_queues", "hook-ep-b", ["ops"]),
        ("hook_queues", "hook-ep-c", ["ops"]),
        (
            "burst",
            (
                *((e, q) for e in ("ep-b", "ep-c") for q in ("lane-l", UNICODE)),
                *(("ep-a", q) for q in ("lane-l", UNICODE, "ops")),
                ("ep-b", "ops"),
                ("ep-c", "ops"),
            ),
        ),
        ("sweep",),
        ("sweep",),
    ],
    "the oldest change's pair has only younger work (its todo is held by the gate)": [
        ("sweep",),
        ("create", "ep-a", "lane-l", "unverified", MINUTES_10 + 5 * US),
        ("create", "ep-a", "lane-l", "verified", MINUTES_10 - 50 * US),
        (
            "burst",
            (
                ("ep-b", "lane-l"),
                ("ep-b", "ops"),
                ("ep-c", "lane-l"),
                ("ep-c", "ops"),
                ("ep-a", "ops"),
            ),
        ),
        ("sweep",),
        ("sweep",),
    ],
}


@pytest.mark.parametrize("ops", STORMS.values(), ids=STORMS.keys())
def test_a_storm_tick_charges_what_judging_every_change_would(
    pg_server: str, pg_template_incremental: str, ops: list[tuple[object, ...]]
) -> None:
    """A tick that judges changes only up to its cut charges what the memory board does."""
    cuts: list[int] = []
    with databases(pg_server, pg_template_incremental) as (runner, pool, late_pool):
        # Run as a one-example property: replay notes each step for the report.
        @settings(max_examples=1, deadline=None, database=None)
        @given(st.just(ops))
        def agree(ops: list[tuple[object, ...]]) -> None:
            cuts.append(runner.run(replay(pool, late_pool, ops, INCREMENTAL)))

        agree()
    assert [1] == cuts


#: How often the full pass runs in the hidden-writes test, on the test clock.
HIDDEN_INTERVAL = timedelta(minutes=30)


async def replay_hidden(pool: asyncpg.Pool, ops: list[tuple[object, ...]]) -> tuple[int, int]:
    """Apply ``ops`` to Postgres, holding every sweep to ``status``; return (full, exact) ticks."""
    await pool.execute(RESET)
    clock = FakeClock(T0)
    memory_driver = MemoryDriver(clock)  # only to resolve ops against a board of the same shape
    board = memory_driver.board
    postgres = PostgresDriver(pool, clock, full_pass_interval=HIDDEN_INTERVAL)
    for driver in (memory_driver, postgres):
        await setup(driver)
    now = T0
    full_passes = exact = 0
    hidden_since_full_pass = False
    # When each hidden todo stalls: a full pass before then cannot have judged it stalled,
    # and no log names it, so the next full pass after then is the one that repairs it.
    hidden_stalls: list[datetime] = []
    for step, op in enumerate(ops):
        note(f"step {step}, now = T0 + {now - T0}: {op!r}")
        now = moved(op, board, now)
        clock.set(now)
        if op[0] in SWEEPS:
            due = await due_by_status(PostgresLedger(pool, clock=clock))
            last = await pool.fetchval("SELECT full_pass_at FROM stall_nudge.sweeps")
            full = full_pass_due(last, now, HIDDEN_INTERVAL)
            outcome = await postgres.ledger.charge_due(policy=POLICY)
            charged = [n.key for n in outcome.charged]
            assert set(charged) <= set(due), f"step {step}: charged {charged}, due {due}"
            assert len(charged) <= POLICY.tick_limit
            if full or not hidden_since_full_pass:
                assert due[: POLICY.tick_limit] == charged, f"step {step}: status said {due}"
                exact += 1
            if full:
                full_passes += 1
                hidden_stalls = [at for at in hidden_stalls if at > now]
                hidden_since_full_pass = bool(hidden_stalls)
            # The memory board follows the charges, so ops resolve against the same todos.
            await memory_driver.ledger.charge_due(policy=POLICY)
        elif op[0] in HIDDEN:
            verb = resolve(op, board, now, f"t{step}")
            if verb is not None or op[0] in ("truncate", "purge"):
                async with pool.acquire() as conn:
                    await hidden(conn, op, verb)
                if verb is not None:
                    await verb(memory_driver)
                if op[0] == "hidden_create" and (todo := board.todos.get(f"t{step}")):
                    hidden_stalls.append(todo.created_at + POLICY.threshold)
                hidden_since_full_pass = True
        elif op[0] != "advance" and (verb := resolve(op, board, now, f"t{step}")) is not None:
            await verb(postgres)
            await verb(memory_driver)
    return full_passes, exact


def test_writes_the_triggers_miss_are_late_never_wrong(
    pg_server: str, pg_template_incremental: str
) -> None:
    """Incremental, hidden writes: no tick charges what status calls not due; full passes are exact.

    After a write no trigger saw, the incremental footprint may judge a pair
    late (at its ended backoff or the next full pass), never wrongly: every
    tick's charges are among what status, reading the host's rows, calls due,
    and a full pass (or a tick with nothing hidden since the last full pass
    that came after every hidden todo had stalled) charges exactly the
    first tick_limit of them. The board is not the
    reference here: after a late reset its stamps legitimately differ.
    """
    skip = ("late", "late_claim")
    weights = {k: v for k, v in WEIGHTS.items() if k not in skip} | dict.fromkeys(HIDDEN, 2)
    ops = histories(weights, ARGS | HIDDEN)
    with databases(pg_server, pg_template_incremental) as (runner, pool, _):

        @settings(max_examples=examples(60), deadline=None)
        @given(ops=ops)
        def late_never_wrong(ops: list[tuple[object, ...]]) -> None:
            full_passes, exact = runner.run(replay_hidden(pool, ops))
            event(f"full passes: {min(full_passes, 3)}{'+' if full_passes > 3 else ''}")
            event("some tick held to status exactly" if exact else "no tick exact")

        late_never_wrong()


@contextmanager
def databases(
    pg_server: str, pg_template: str
) -> Iterator[tuple[asyncio.Runner, asyncpg.Pool, asyncpg.Pool]]:
    """One cloned database for the whole test, a pool for the board and one for late commits."""
    name = pg.unique_name("stall_diff")
    with asyncio.Runner() as runner:
        runner.run(pg.create_database(pg_server, name, template=pg_template))
        try:
            dsn = pg.with_database(pg_server, name)
            pool = runner.run(open_pool(dsn))
            runner.run(pool.execute(HOST_STAMPS_CLAIMS))
            late_pool = runner.run(open_pool(dsn))
            try:
                yield runner, pool, late_pool
            finally:
                runner.run(pool.close())
                runner.run(late_pool.close())
        finally:
            runner.run(pg.drop_database(pg_server, name))


async def open_pool(dsn: str) -> asyncpg.Pool:
    """One connection; commits need not wait for the disk in a throwaway database."""
    return await asyncpg.create_pool(
        dsn, min_size=1, max_size=1, server_settings={"synchronous_commit": "off"}
    )
