"""Which kind of tick runs, and what a delta tick judges (issue 26, items 2 and 3).

A full pass judges every pair. A delta judges only the pairs whose decision
can have changed since the last judging tick, found from the host's own
timestamps since a watermark (that tick's ``now`` less the lookback) and from
our own tables. Here a ``PostgresLedger`` on a test clock (its time
authority) shows that each source a delta reads is enough on its own to make
it judge its pair, and only that pair; that what no timestamp shows waits for
the full pass; when a full pass runs; what the lookback covers; and that
every tick reports its kind and how many pairs it judged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import asyncpg
import pytest

from adapters.postgres import DELTA_BOUND, LOOKBACK, PostgresLedger
from stall_core import FULL_PASS_INTERVAL, ChargeOutcome, PacingPolicy
from stall_testing import HOST_SQL, INERT_HOOK_SECRET, INERT_HOOK_URL, PostgresHost
from tests.support import JUDGED_IN, T0, FakeClock, minutes

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()
#: The first tick of every case: work created at T0 is stalled by then.
START = T0 + minutes(10)
#: Between two ticks of a looping instance: well inside the lookback and every backoff step.
STEP = timedelta(seconds=15)
SECOND = timedelta(seconds=1)
#: A full-pass interval no case here reaches, so every tick after the first is a delta.
NEVER = timedelta(days=7)

Charge = tuple[str, str, str, int]


def charges(outcome: ChargeOutcome) -> list[Charge]:
    """Each nudge charged: endpoint, queue, the todo it names, its number."""
    return [(n.endpoint_id, n.queue, n.todo.id, n.number) for n in outcome.charged]


def seen(outcome: ChargeOutcome) -> tuple[str | None, int, list[Charge]]:
    """What a tick looked at and what it charged: kind, pairs judged, charges."""
    return outcome.kind, outcome.judged, charges(outcome)


class Board:
    """Endpoint ``ep`` with a hook on every queue, and a pair (``still``) capped long ago.

    The capped pair is on every board as a control: a full pass judges it, a
    delta never should (nothing about it changes).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        full_pass_interval: timedelta = FULL_PASS_INTERVAL,
        lookback: timedelta = LOOKBACK,
    ) -> None:
        self.pool = pool
        self.host = PostgresHost(pool)
        self.clock = FakeClock()
        self.ledger = self.instance(full_pass_interval=full_pass_interval, lookback=lookback)

    def instance(
        self, *, full_pass_interval: timedelta = FULL_PASS_INTERVAL, lookback: timedelta = LOOKBACK
    ) -> PostgresLedger:
        """A ledger instance on this board's database and clock (another sidecar, say)."""
        return PostgresLedger(
            self.pool, clock=self.clock, full_pass_interval=full_pass_interval, lookback=lookback
        )

    async def setup(self) -> Board:
        await self.endpoint("ep")
        await self.capped("still")
        return self

    async def endpoint(self, endpoint_id: str, *, state: str = "active", hook: bool = True) -> None:
        await self.host.add_endpoint(endpoint_id, state=state)
        await self.host.add_hook(
            f"hook-{endpoint_id}",
            endpoint_id=endpoint_id,
            url=INERT_HOOK_URL,
            secret=INERT_HOOK_SECRET,
            enabled=hook,
        )

    async def stalled(self, queue: str, todos: int = 1, *, endpoint: str = "ep") -> list[str]:
        """``todos`` todos in the pair, created at T0 a second apart, ``{queue}-0`` the oldest."""
        ids = [f"{queue}-{i}" for i in range(todos)]
        for i, todo_id in enumerate(ids):
            await self.host.create_todo(
                todo_id, endpoint_id=endpoint, queue=queue, created_at=T0 + i * SECOND
            )
        return ids

    async def capped(self, queue: str, *, named: bool = True) -> None:
        """A stalled pair whose row spent the cap long ago; ``named``: the row names its todo.

        A row charged by an older build names no todo (``named=False``).
        """
        [todo] = await self.stalled(queue)
        await self.pool.execute(
            "INSERT INTO stall_nudge.queue_stall_nudges"
            " (endpoint_id, queue, nudges, last_nudged_at,"
            " named_todo) VALUES ('ep', $1, $2, $3, $4)",
            queue,
            POLICY.cap,
            T0 + POLICY.threshold + SECOND,
            todo if named else None,
        )

    async def tick(self, at: datetime, *, ledger: PostgresLedger | None = None) -> ChargeOutcome:
        """One tick of ``ledger`` (this board's own by default), the clock at ``at``."""
        self.clock.set(at)
        return await (ledger or self.ledger).charge_due(policy=POLICY)


async def board(pool: asyncpg.Pool, **options: timedelta) -> Board:
    return await Board(pool, **options).setup()


# -- a delta with nothing changed ------------------------------------------------------


async def test_a_delta_with_nothing_changed_judges_no_pair_and_charges_nothing(
    pg_pool: asyncpg.Pool,
) -> None:
    """After a full pass that charged, a delta on the unchanged board judges 0 pairs."""
    b = await board(pg_pool)
    await b.stalled("q", 3)
    await b.host.create_todo("fresh-0", endpoint_id="ep", queue="fresh", created_at=START)

    first = await b.tick(START)
    rows = await b.ledger.ledger_rows()
    quiet = await b.tick(START + STEP)

    assert ("full", 3, [("ep", "q", "q-0", 1)]) == seen(first)
    assert ("delta", 0, [], ()) == (*seen(quiet), quiet.cleared)
    assert rows == await b.ledger.ledger_rows()


async def test_a_steady_board_of_capped_pairs_stays_delta(pg_pool: asyncpg.Pool) -> None:
    """More capped pairs than the tick limit: each tick until the next full pass judges none."""
    b = await board(pg_pool)
    for i in range(2 * POLICY.tick_limit):
        await b.capped(f"capped-{i}")

    first = await b.tick(START)
    later = []
    at = START + STEP
    while at < START + FULL_PASS_INTERVAL:
        later.append(seen(await b.tick(at)))
        at += STEP

    assert ("full", 2 * POLICY.tick_limit + 1, []) == seen(first)
    assert [("delta", 0, [])] * len(later) == later


# -- each source alone makes a delta judge its pair --------------------------------------


async def test_a_row_whose_backoff_ended_makes_a_delta_judge_its_pair(
    pg_pool: asyncpg.Pool,
) -> None:
    """Nudge 1's backoff step ends: the delta at that instant judges the pair, charges nudge 2."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.stalled("q", 3)
    await b.tick(START)

    before = await b.tick(START + POLICY.backoff[0] - SECOND)
    ended = await b.tick(START + POLICY.backoff[0])

    assert ("delta", 0, []) == seen(before)
    assert ("delta", 1, [("ep", "q", "q-0", 2)]) == seen(ended)


async def test_a_claim_stamped_since_the_watermark_makes_a_delta_judge_its_pair(
    pg_pool: asyncpg.Pool,
) -> None:
    """A claim after the last nudge, of a todo it did not name: the delta judges it, nudge 1."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.stalled("q", 3)
    await b.tick(START)

    await b.host.claim("q-2", owner="puller", at=START + STEP)
    outcome = await b.tick(START + 2 * STEP)

    assert ("delta", 1, [("ep", "q", "q-0", 1)]) == seen(outcome)


async def test_work_that_crossed_the_threshold_makes_a_delta_judge_its_pair(
    pg_pool: asyncpg.Pool,
) -> None:
    """A todo fresh at the last tick, stalled now: the delta judges its pair and charges nudge 1."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.host.create_todo("late-0", endpoint_id="ep", queue="late", created_at=START)
    first = await b.tick(START)

    fresh = await b.tick(START + POLICY.threshold)
    crossed = await b.tick(START + POLICY.threshold + STEP)

    assert ("full", 2, []) == seen(first)
    assert ("delta", 0, []) == seen(fresh)  # the threshold is strict
    assert ("delta", 1, [("ep", "late", "late-0", 1)]) == seen(crossed)


async def test_a_requeued_todo_makes_a_delta_judge_its_pair(pg_pool: asyncpg.Pool) -> None:
    """A todo claimed then given back, claimed_at kept: work again, judged by the next delta."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    [todo] = await b.stalled("r")
    await b.host.claim(todo, owner="consumer", at=START - STEP)
    first = await b.tick(START)  # r has no pending work and no row: not a pair yet
    quiet = await b.tick(START + STEP)

    await b.host.requeue(todo)
    requeued = await b.tick(START + 2 * STEP)

    assert ("full", 1, []) == seen(first)
    assert ("delta", 0, []) == seen(quiet)
    assert ("delta", 1, [("ep", "r", todo, 1)]) == seen(requeued)


async def test_pairs_held_back_by_the_tick_limit_make_a_delta_judge_them(
    pg_pool: asyncpg.Pool,
) -> None:
    """More due pairs than the tick limit: each delta judges the best tick_limit held back."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    due = 2 * POLICY.tick_limit + 1
    queues = [f"h-{i:02}" for i in range(due)]
    for i, queue in enumerate(queues):
        await b.host.create_todo(
            f"{queue}-0", endpoint_id="ep", queue=queue, created_at=T0 + i * SECOND
        )

    first = await b.tick(START)
    second = await b.tick(START + STEP)
    third = await b.tick(START + 2 * STEP)
    after = await b.tick(START + 3 * STEP)

    def charged(chunk: list[str]) -> list[Charge]:
        return [("ep", q, f"{q}-0", 1) for q in chunk]

    limit = POLICY.tick_limit
    assert ("full", due + 1, charged(queues[:limit])) == seen(first)
    assert ("delta", limit, charged(queues[limit : 2 * limit])) == seen(second)
    assert ("delta", 1, charged(queues[2 * limit :])) == seen(third)
    assert ("delta", 0, []) == seen(after)


async def _delete(b: Board, todo: str) -> None:
    await b.host.delete_todo(todo)


async def _move(b: Board, todo: str) -> None:
    await b.host.move_todo(todo, "elsewhere")


async def _claim_stamped_before_the_nudge(b: Board, todo: str) -> None:
    # Its transaction read the time before the nudge's charge and committed after it.
    await b.host.claim(todo, owner="consumer", at=START - SECOND)


async def _complete_unstamped(b: Board, todo: str) -> None:
    await _claim_stamped_before_the_nudge(b, todo)
    await b.host.complete(todo, unstamp=True)


Departure = Callable[[Board, str], Awaitable[None]]


@pytest.mark.parametrize(
    "departure",
    [_delete, _move, _claim_stamped_before_the_nudge, _complete_unstamped],
    ids=["deleted", "moved-to-another-queue", "claimed-stamped-before", "done-unstamped"],
)
async def test_a_named_todo_that_left_makes_a_delta_judge_its_pair(
    pg_pool: asyncpg.Pool, departure: Departure
) -> None:
    """The todo nudge 1 named is gone or no longer pending in the pair: the delta resets it."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    named, *_ = await b.stalled("q", 3)
    await b.tick(START)

    await departure(b, named)
    outcome = await b.tick(START + STEP)

    # A moved todo's new pair (stalled, no row) shows no timestamp: the full pass finds it.
    assert ("delta", 1, [("ep", "q", "q-1", 1)]) == seen(outcome)


# -- what no timestamp shows waits for the full pass ----------------------------------


async def _unnamed_work_deleted(b: Board) -> Callable[[], Awaitable[None]]:
    # A row charged by an older build names no todo: deleting its work shows no timestamp.
    await b.capped("old", named=False)
    return lambda: b.host.delete_todo("old-0")


async def _named_todo_deleted_before_the_last_full_pass(b: Board) -> Callable[[], Awaitable[None]]:
    # Capped long ago: a delta looks for departures only on rows nudged since the full pass.
    await b.capped("cap")
    await b.host.create_todo("cap-1", endpoint_id="ep", queue="cap", created_at=T0 + SECOND)
    return lambda: b.host.delete_todo("cap-0")


async def _endpoint_resumed(b: Board) -> Callable[[], Awaitable[None]]:
    await b.endpoint("ep2", state="paused")
    await b.stalled("p", endpoint="ep2")
    return lambda: b.host.set_endpoint_state("ep2", "active")


async def _hook_enabled(b: Board) -> Callable[[], Awaitable[None]]:
    await b.endpoint("ep2", hook=False)
    await b.stalled("p", endpoint="ep2")
    return lambda: b.host.set_hook_enabled("hook-ep2", True)


async def _delivery_verified(b: Board) -> Callable[[], Awaitable[None]]:
    await b.host.add_delivery("d", endpoint_id="ep", verified=False, received_at=T0)
    await b.host.create_todo("g-0", endpoint_id="ep", queue="g", created_at=T0, delivery_id="d")
    return lambda: b.host.set_delivery_verified("d", True)


async def _written_with_an_old_stamp(b: Board) -> Callable[[], Awaitable[None]]:
    return lambda: b.host.create_todo("o-0", endpoint_id="ep", queue="o", created_at=T0)


async def _requeued_unstamped(b: Board) -> Callable[[], Awaitable[None]]:
    [todo] = await b.stalled("u")
    await b.host.claim(todo, owner="consumer", at=START - STEP)
    return lambda: b.host.requeue(todo, unstamp=True)


async def _truncated(b: Board) -> Callable[[], Awaitable[None]]:
    async def truncate() -> None:
        await b.pool.execute("TRUNCATE todos")

    return truncate


Unseen = Callable[[Board], Awaitable[Callable[[], Awaitable[None]]]]

#: Each change no timestamp shows: how to set it up (returning the change), and what the
#: full pass then does (charges, drains).
UNSEEN: list[tuple[str, Unseen, list[Charge], tuple[tuple[str, str], ...]]] = [
    ("unnamed-work-deleted", _unnamed_work_deleted, [], (("ep", "old"),)),
    (
        "named-todo-of-an-old-row-deleted",
        _named_todo_deleted_before_the_last_full_pass,
        [("ep", "cap", "cap-1", 1)],
        (),
    ),
    ("endpoint-resumed", _endpoint_resumed, [("ep2", "p", "p-0", 1)], ()),
    ("hook-enabled", _hook_enabled, [("ep2", "p", "p-0", 1)], ()),
    ("delivery-verified", _delivery_verified, [("ep", "g", "g-0", 1)], ()),
    ("written-with-an-old-stamp", _written_with_an_old_stamp, [("ep", "o", "o-0", 1)], ()),
    ("requeued-unstamped", _requeued_unstamped, [("ep", "u", "u-0", 1)], ()),
    ("truncate", _truncated, [], (("ep", "still"),)),
]


@pytest.mark.parametrize(
    ("setup", "charged", "drained"),
    [case[1:] for case in UNSEEN],
    ids=[case[0] for case in UNSEEN],
)
async def test_what_no_timestamp_shows_waits_for_the_full_pass(
    pg_pool: asyncpg.Pool,
    setup: Unseen,
    charged: list[Charge],
    drained: tuple[tuple[str, str], ...],
) -> None:
    """Every delta until the next full pass judges no pair; the full pass acts on the change."""
    b = await board(pg_pool)
    change = await setup(b)
    await b.tick(START)

    await change()
    deltas = []
    at = START + STEP
    while at < START + FULL_PASS_INTERVAL:
        outcome = await b.tick(at)
        deltas.append((*seen(outcome), outcome.cleared))
        at += STEP
    full = await b.tick(START + FULL_PASS_INTERVAL)

    assert [("delta", 0, [], ())] * len(deltas) == deltas
    assert ("full", charged, drained) == (full.kind, charges(full), full.cleared)


async def test_a_new_instance_judges_what_no_timestamp_shows_at_its_first_tick(
    pg_pool: asyncpg.Pool,
) -> None:
    """An endpoint resumed: a running instance's delta misses it; a new one's first tick acts."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    change = await _endpoint_resumed(b)
    await b.tick(START)
    await change()

    running = await b.tick(START + STEP)
    started = await b.tick(START + 2 * STEP, ledger=b.instance(full_pass_interval=NEVER))

    assert ("delta", 0, []) == seen(running)
    assert ("full", 2, [("ep2", "p", "p-0", 1)]) == seen(started)


# -- when a full pass runs ---------------------------------------------------------------


async def test_each_ledger_instance_starts_with_a_full_pass(pg_pool: asyncpg.Pool) -> None:
    """The first tick of every instance judges every pair, whatever the fleet did before."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.stalled("q")
    other = b.instance(full_pass_interval=NEVER)

    kinds = [
        (await b.tick(START)).kind,
        (await b.tick(START + STEP)).kind,
        (await b.tick(START + 2 * STEP, ledger=other)).kind,
        (await b.tick(START + 3 * STEP, ledger=other)).kind,
        (await b.tick(START + 4 * STEP)).kind,
    ]

    assert ["full", "delta", "full", "delta", "delta"] == kinds


@pytest.mark.parametrize("interval", [FULL_PASS_INTERVAL, FULL_PASS_INTERVAL / 5])
async def test_a_full_pass_runs_every_full_pass_interval(
    pg_pool: asyncpg.Pool, interval: timedelta
) -> None:
    """Ticked every STEP, the fleet runs a full pass exactly each ``full_pass_interval``."""
    b = await board(pg_pool, full_pass_interval=interval)
    await b.stalled("q")
    await b.tick(START)

    kinds = []
    for step in range(1, 2 * (interval // STEP) + 1):
        outcome = await b.tick(START + step * STEP)
        kinds.append((step * STEP, outcome.kind))

    assert [(s, "full" if s % interval == timedelta(0) else "delta") for s, _ in kinds] == kinds
    assert 2 == [kind for _, kind in kinds].count("full")


async def test_a_clock_gone_back_before_the_watermark_forces_a_full_pass(
    pg_pool: asyncpg.Pool,
) -> None:
    """A tick earlier than the last judging tick's now cannot trust the watermark: full pass."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.stalled("q")

    kinds = [
        (await b.tick(START)).kind,
        (await b.tick(START + STEP)).kind,
        (await b.tick(START + STEP)).kind,  # the same instant: not back
        (await b.tick(START + STEP - SECOND)).kind,  # back before the watermark's tick
        (await b.tick(START + STEP)).kind,
    ]

    assert ["full", "delta", "delta", "full", "delta"] == kinds


async def _arrivals(b: Board, count: int) -> None:
    """``count`` todos in one pair, fresh at START and stalled at START + STEP."""
    await b.pool.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
        " SELECT 'arrival-' || i, 'ep', 'arrivals', 'pending', $2"
        "   FROM generate_series(1, $1) AS i",
        count,
        START - POLICY.threshold,
    )


async def _claims(b: Board, count: int) -> None:
    """``count`` claims stamped since the watermark, in one pair with no ledger row."""
    await b.pool.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at, claimed_at)"
        " SELECT 'claim-' || i, 'ep', 'claims', 'claimed', $2, $3"
        "   FROM generate_series(1, $1) AS i",
        count,
        T0,
        START + SECOND,
    )


async def _pairs(b: Board, count: int) -> None:
    """``count`` pairs with fresh work: a full pass judges each."""
    await b.pool.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
        " SELECT 'pair-' || i, 'ep', 'pair-' || i, 'pending', $2"
        "   FROM generate_series(1, $1) AS i",
        count,
        START,
    )


@pytest.mark.parametrize(
    ("pairs", "changes", "over", "kind"),
    [
        (0, _arrivals, False, "delta"),
        (0, _arrivals, True, "full"),
        (0, _claims, False, "delta"),
        (0, _claims, True, "full"),
        (DELTA_BOUND + 10, _arrivals, False, "delta"),
        (DELTA_BOUND + 10, _arrivals, True, "full"),
    ],
    ids=[
        "arrivals-below-the-floor",
        "arrivals-at-the-floor",
        "claims-below-the-floor",
        "claims-at-the-floor",
        "arrivals-below-the-last-full-pass",
        "arrivals-at-the-last-full-pass",
    ],
)
async def test_a_change_set_as_large_as_a_full_pass_makes_the_tick_a_full_pass(
    pg_pool: asyncpg.Pool,
    pairs: int,
    changes: Callable[[Board, int], Awaitable[None]],
    over: bool,
    kind: str,
) -> None:
    """The bound is the pairs the last full pass judged, DELTA_BOUND at least; reaching it: full."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await _pairs(b, pairs)
    first = await b.tick(START)
    bound = max(first.judged, DELTA_BOUND)

    await changes(b, bound if over else bound - 1)
    outcome = await b.tick(START + STEP)

    assert ("full", pairs + 1) == (first.kind, first.judged)
    # Arrivals are all in one pair (stalled, no row): a delta judges that one. The claims'
    # pair has no row (nothing for them to reset) and no pending work (no full pass pair).
    new_pairs = 1 if changes is _arrivals else 0
    assert (kind, new_pairs + (pairs + 1 if kind == "full" else 0)) == (
        outcome.kind,
        outcome.judged,
    )


# -- the lookback --------------------------------------------------------------------------


@pytest.mark.parametrize(("lookback", "judged"), [(LOOKBACK, 1), (timedelta(0), 0)])
async def test_a_claim_open_across_a_tick_is_seen_by_the_next_delta_within_the_lookback(
    pg_pool: asyncpg.Pool, lookback: timedelta, judged: int
) -> None:
    """A claim stamped before a tick's now, committed after it: the next delta reads it again.

    Only within the lookback: with none, the delta after the commit reads
    from the last tick's now, past the claim's stamp.
    """
    b = await board(pg_pool, full_pass_interval=NEVER, lookback=lookback)
    await b.stalled("q", 3)
    await b.tick(START)

    async with pg_pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        claimed = await conn.fetchval(
            HOST_SQL["claim"], "q-2", "consumer", START + STEP - 5 * SECOND, timedelta(minutes=5)
        )
        while_open = await b.tick(START + STEP)
        await tx.commit()
    after = await b.tick(START + 2 * STEP)

    assert "q-2" == claimed
    assert ("delta", 0, []) == seen(while_open)
    assert ("delta", judged, [("ep", "q", "q-0", 1)] * judged) == seen(after)


@pytest.mark.parametrize(
    "lookback", [timedelta(seconds=-1), 60, None], ids=["negative", "seconds", "none"]
)
async def test_a_bad_lookback_is_refused_by_name(pg_pool: asyncpg.Pool, lookback: object) -> None:
    """lookback must be a timedelta of 0 or more; the error names it."""
    with pytest.raises(ValueError, match="lookback"):
        PostgresLedger(pg_pool, lookback=lookback)  # type: ignore[arg-type]


async def test_the_lookback_is_configurable(pg_pool: asyncpg.Pool) -> None:
    """The default is LOOKBACK; 0 and any other duration are taken as given."""
    assert LOOKBACK == PostgresLedger(pg_pool).lookback
    for lookback in (timedelta(0), 3 * LOOKBACK):
        assert lookback == PostgresLedger(pg_pool, lookback=lookback).lookback


# -- every tick reports its kind and the pairs it judged -------------------------------------


async def test_a_full_pass_judges_every_pair_and_the_fleet_record_keeps_both_kinds(
    pg_pool: asyncpg.Pool,
) -> None:
    """Pairs with pending work, and rows with none, are judged; the fleet record says so."""
    b = await board(pg_pool)
    await b.stalled("q", 3)
    await b.host.create_todo("fresh-0", endpoint_id="ep", queue="fresh", created_at=START)
    await b.capped("gone")
    await b.host.delete_todo("gone-0")  # a row with no work left: drained
    await b.stalled("done")
    await b.host.claim("done-0", owner="consumer", at=T0 + SECOND)  # no pending work, no row

    full = await b.tick(START)
    after_full = await b.ledger.fleet()
    delta = await b.tick(START + STEP)
    after_delta = await b.ledger.fleet()

    assert ("full", 4, [("ep", "q", "q-0", 1)], (("ep", "gone"),)) == (
        *seen(full),
        full.cleared,
    )
    assert ("delta", 0) == (delta.kind, delta.judged)
    assert (full.now, "full", 4, full.now, 4) == (
        after_full.swept_at,
        after_full.last_kind,
        after_full.last_judged,
        after_full.full_pass_at,
        after_full.full_pass_pairs,
    )
    assert (delta.now, "delta", 0, full.now, 4) == (
        after_delta.swept_at,
        after_delta.last_kind,
        after_delta.last_judged,
        after_delta.full_pass_at,
        after_delta.full_pass_pairs,
    )


async def test_the_debug_log_names_each_tick_kind_and_the_pairs_it_judged(
    pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """One debug line a tick: "tick: full pass judged N pair(s) in D", D by format_duration."""
    b = await board(pg_pool, full_pass_interval=NEVER)
    await b.stalled("q", 3)
    caplog.set_level(logging.DEBUG, logger="adapters.postgres")

    await b.tick(START)
    await b.host.claim("q-2", owner="puller", at=START + SECOND)
    await b.tick(START + STEP)
    await b.tick(START + 2 * STEP)

    lines = [m for m in caplog.messages if m.startswith("tick: ")]
    assert 3 == len(lines), lines
    assert re.fullmatch("tick: full pass judged 2" + JUDGED_IN, lines[0])
    assert re.fullmatch("tick: delta pass judged 1" + JUDGED_IN, lines[1])
    assert re.fullmatch("tick: delta pass judged 0" + JUDGED_IN, lines[2])
