"""Which kind of tick runs, and what a delta tick judges (issue 26, items 2 and 3).

A full pass judges every pair. A delta judges only the pairs whose decision
can have changed since the last judging tick, found from the host's own
timestamps since a watermark (that tick's ``now`` less the lookback) and from
our own tables. The contract suite holds what each tick decides, deltas
included; here a ``PostgresLedger`` on a test clock, in a DBA's database,
shows what the contract cannot see: that each source a delta reads makes it
judge its pair and only that pair; that what no timestamp shows waits for
the full pass; when a full pass runs; and what the lookback covers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import cast

import asyncpg
import pytest

from adapters.postgres import DELTA_BOUND, LOOKBACK, PostgresLedger
from stall_core import FULL_PASS_INTERVAL, ChargeOutcome, PacingPolicy
from stall_testing import HOST_SQL, INERT_HOOK_SECRET, INERT_HOOK_URL, PostgresHost
from tests import pg
from tests.support import T0, FakeClock, minutes

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
        pools: pg.Pools,
        *,
        full_pass_interval: timedelta = FULL_PASS_INTERVAL,
        lookback: timedelta = LOOKBACK,
    ) -> None:
        self.pools = pools
        self.host = PostgresHost(pools.host)
        self.clock = FakeClock()
        self.ledger = self.instance(full_pass_interval=full_pass_interval, lookback=lookback)

    def instance(
        self, *, full_pass_interval: timedelta = FULL_PASS_INTERVAL, lookback: timedelta = LOOKBACK
    ) -> PostgresLedger:
        """A ledger instance on this board's database and clock (another sidecar, say)."""
        return PostgresLedger(
            self.pools.sweeper,
            clock=self.clock,
            full_pass_interval=full_pass_interval,
            lookback=lookback,
        )

    async def setup(self) -> Board:
        await self.endpoint("ep")
        await self.capped("still")
        return self

    async def endpoint(self, endpoint_id: str, *, hook: bool = True) -> None:
        await self.host.add_endpoint(endpoint_id)
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
        await self.pools.admin.execute(
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


async def board(pools: pg.Pools, **options: timedelta) -> Board:
    return await Board(pools, **options).setup()


# -- a delta with nothing changed ------------------------------------------------------


async def test_a_delta_with_nothing_changed_judges_no_pair_until_the_next_full_pass(
    pools: pg.Pools,
) -> None:
    """After a full pass that charged, beside more capped pairs than the tick limit, every
    delta until the next full pass judges 0 pairs and writes nothing."""
    b = await board(pools)
    for i in range(2 * POLICY.tick_limit):
        await b.capped(f"capped-{i}")
    await b.stalled("q", 3)

    first = await b.tick(START)
    rows = await b.ledger.ledger_rows()
    later = []
    at = START + STEP
    while at < START + FULL_PASS_INTERVAL:
        outcome = await b.tick(at)
        later.append((*seen(outcome), outcome.cleared))
        at += STEP

    assert ("full", 2 * POLICY.tick_limit + 2, [("ep", "q", "q-0", 1)]) == seen(first)
    assert [("delta", 0, [], ())] * len(later) == later
    assert rows == await b.ledger.ledger_rows()


# -- each source alone makes a delta judge its pair, and only it --------------------------


async def test_a_row_whose_backoff_ended_makes_a_delta_judge_its_pair(pools: pg.Pools) -> None:
    """Nudge 1's backoff step ends: the delta at that instant judges the pair, charges nudge 2."""
    b = await board(pools, full_pass_interval=NEVER)
    await b.stalled("q", 3)
    await b.tick(START)

    before = await b.tick(START + POLICY.backoff[0] - SECOND)
    ended = await b.tick(START + POLICY.backoff[0])

    assert ("delta", 0, []) == seen(before)
    assert ("delta", 1, [("ep", "q", "q-0", 2)]) == seen(ended)


async def test_a_claim_stamped_since_the_watermark_makes_a_delta_judge_its_pair(
    pools: pg.Pools,
) -> None:
    """A claim after the last nudge, of a todo it did not name: the delta judges it, nudge 1."""
    b = await board(pools, full_pass_interval=NEVER)
    await b.stalled("q", 3)
    await b.tick(START)

    await b.host.claim("q-2", owner="puller", at=START + STEP)
    outcome = await b.tick(START + 2 * STEP)

    assert ("delta", 1, [("ep", "q", "q-0", 1)]) == seen(outcome)


async def test_work_that_crossed_the_threshold_makes_a_delta_judge_its_pair(
    pools: pg.Pools,
) -> None:
    """A todo fresh at the last tick, stalled now: the delta judges its pair and charges nudge 1."""
    b = await board(pools, full_pass_interval=NEVER)
    await b.host.create_todo("late-0", endpoint_id="ep", queue="late", created_at=START)
    first = await b.tick(START)

    fresh = await b.tick(START + POLICY.threshold)
    crossed = await b.tick(START + POLICY.threshold + STEP)

    assert ("full", 2, []) == seen(first)
    assert ("delta", 0, []) == seen(fresh)  # the threshold is strict
    assert ("delta", 1, [("ep", "late", "late-0", 1)]) == seen(crossed)


async def test_a_requeued_todo_makes_a_delta_judge_its_pair(pools: pg.Pools) -> None:
    """A todo claimed then given back, claimed_at kept: work again, judged by the next delta."""
    b = await board(pools, full_pass_interval=NEVER)
    [todo] = await b.stalled("r")
    await b.host.claim(todo, owner="consumer", at=START - STEP)
    first = await b.tick(START)  # r has no pending work and no row: not a pair yet
    quiet = await b.tick(START + STEP)

    await b.host.requeue(todo)
    requeued = await b.tick(START + 2 * STEP)

    assert ("full", 1, []) == seen(first)
    assert ("delta", 0, []) == seen(quiet)
    assert ("delta", 1, [("ep", "r", todo, 1)]) == seen(requeued)


async def test_pairs_held_back_by_the_tick_limit_make_a_delta_judge_them(pools: pg.Pools) -> None:
    """More due pairs than the tick limit: each delta judges the best tick_limit held back."""
    b = await board(pools, full_pass_interval=NEVER)
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


@pytest.mark.parametrize("deleted", [True, False], ids=["deleted", "done-unstamped"])
async def test_a_named_todo_that_left_makes_a_delta_judge_its_pair(
    pools: pg.Pools, deleted: bool
) -> None:
    """The todo nudge 1 named is deleted, or done with no stamp a delta reads: a reset."""
    b = await board(pools, full_pass_interval=NEVER)
    named, *_ = await b.stalled("q", 3)
    await b.tick(START)

    if deleted:
        await b.host.delete_todo(named)
    else:
        # Its transaction read the time before the nudge's charge and committed after it.
        await b.host.claim(named, owner="consumer", at=START - SECOND)
        await b.host.complete(named, unstamp=True)
    outcome = await b.tick(START + STEP)

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


async def _ledger_row_deleted_by_hand(b: Board) -> Callable[[], Awaitable[None]]:
    # An operator wipes a capped pair's row: its next nudge is a first one.
    await b.capped("wiped")

    async def wipe() -> None:
        await b.pools.admin.execute(
            "DELETE FROM stall_nudge.queue_stall_nudges WHERE queue = 'wiped'"
        )

    return wipe


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
        await b.pools.admin.execute("TRUNCATE todos")

    return truncate


Unseen = Callable[[Board], Awaitable[Callable[[], Awaitable[None]]]]

#: Each change no timestamp shows: how to set it up (returning the change), and what the
#: full pass then does (charges, drains). An endpoint resumed and a hook enabled again are
#: the contract's (each nudged within a full-pass interval).
UNSEEN: list[tuple[str, Unseen, list[Charge], tuple[tuple[str, str], ...]]] = [
    ("unnamed-work-deleted", _unnamed_work_deleted, [], (("ep", "old"),)),
    (
        "named-todo-of-an-old-row-deleted",
        _named_todo_deleted_before_the_last_full_pass,
        [("ep", "cap", "cap-1", 1)],
        (),
    ),
    (
        "ledger-row-deleted-by-hand",
        _ledger_row_deleted_by_hand,
        [("ep", "wiped", "wiped-0", 1)],
        (),
    ),
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
    pools: pg.Pools,
    setup: Unseen,
    charged: list[Charge],
    drained: tuple[tuple[str, str], ...],
) -> None:
    """Every delta until the next full pass judges no pair; the full pass acts on the change."""
    b = await board(pools)
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


# -- when a full pass runs ---------------------------------------------------------------


async def test_each_ledger_instance_starts_with_a_full_pass(pools: pg.Pools) -> None:
    """The first tick of every instance judges every pair, whatever the fleet did before."""
    b = await board(pools, full_pass_interval=NEVER)
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


async def test_a_full_pass_runs_every_full_pass_interval(pools: pg.Pools) -> None:
    """Ticked every STEP, the fleet runs a full pass exactly each ``full_pass_interval``.

    The default interval is the one the cases above wait for.
    """
    interval = FULL_PASS_INTERVAL / 5
    b = await board(pools, full_pass_interval=interval)
    await b.stalled("q")
    await b.tick(START)

    kinds = []
    for step in range(1, 2 * (interval // STEP) + 1):
        outcome = await b.tick(START + step * STEP)
        kinds.append((step * STEP, outcome.kind))

    assert [(s, "full" if s % interval == timedelta(0) else "delta") for s, _ in kinds] == kinds
    assert 2 == [kind for _, kind in kinds].count("full")


async def test_a_clock_gone_back_before_the_watermark_forces_a_full_pass(pools: pg.Pools) -> None:
    """A tick earlier than the last judging tick's now cannot trust the watermark: full pass."""
    b = await board(pools, full_pass_interval=NEVER)
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
    await b.pools.host.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at)"
        " SELECT 'arrival-' || i, 'ep', 'arrivals', 'pending', $2"
        "   FROM generate_series(1, $1) AS i",
        count,
        START - POLICY.threshold,
    )


async def _claims(b: Board, count: int) -> None:
    """``count`` new claims in one pair whose ledger row (no pending work) they progress."""
    await b.pools.admin.execute(
        "INSERT INTO stall_nudge.queue_stall_nudges (endpoint_id, queue, nudges, last_nudged_at)"
        " VALUES ('ep', 'claims', 1, $1)",
        START - STEP,
    )
    await b.pools.host.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at, claimed_at)"
        " SELECT 'claim-' || i, 'ep', 'claims', 'claimed', $2, $3"
        "   FROM generate_series(1, $1) AS i",
        count,
        T0,
        START + SECOND,
    )


async def _pairs(b: Board, count: int) -> None:
    """``count`` pairs with fresh work: a full pass judges each."""
    await b.pools.host.execute(
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
    pools: pg.Pools,
    caplog: pytest.LogCaptureFixture,
    pairs: int,
    changes: Callable[[Board, int], Awaitable[None]],
    over: bool,
    kind: str,
) -> None:
    """The bound is the pairs the last full pass judged, DELTA_BOUND at least; reaching it: a
    full pass (after an outage, say), and an info line says so."""
    b = await board(pools, full_pass_interval=NEVER)
    await _pairs(b, pairs)
    first = await b.tick(START)
    bound = max(first.judged, DELTA_BOUND)

    await changes(b, bound if over else bound - 1)
    with caplog.at_level(logging.INFO, logger="adapters.postgres"):
        outcome = await b.tick(START + STEP)

    assert ("full", pairs + 1) == (first.kind, first.judged)
    # Arrivals are all in one pair (stalled, no row), and so are the claims (a row, no
    # pending work): a delta judges that one pair; a full pass every pair, the claims' row
    # too.
    new_pairs = 1
    assert (kind, new_pairs + (pairs + 1 if kind == "full" else 0)) == (
        outcome.kind,
        outcome.judged,
    )
    said = [m for m in caplog.messages if m.endswith("this tick is a full pass")]
    assert (1 if over else 0) == len(said), caplog.messages


# -- the lookback --------------------------------------------------------------------------


@pytest.mark.parametrize(("lookback", "judged"), [(LOOKBACK, 1), (timedelta(0), 0)])
async def test_a_claim_open_across_a_tick_is_seen_by_the_next_delta_within_the_lookback(
    pools: pg.Pools, lookback: timedelta, judged: int
) -> None:
    """A claim stamped before a tick's now, committed after it: the next delta reads it again.

    Only within the lookback: with none, the delta after the commit reads
    from the last tick's now, past the claim's stamp.
    """
    b = await board(pools, full_pass_interval=NEVER, lookback=lookback)
    await b.stalled("q", 3)
    await b.tick(START)

    async with pools.host.acquire() as conn:
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


async def test_claims_stamped_ahead_are_new_once_not_a_string_of_full_passes(
    pools: pg.Pools,
) -> None:
    """1,040 claims stamped 10 min ahead: one full pass reads them, the next 11 min are deltas.

    They stay inside every claims window until their stamp, but the claims a tick read are
    not new to the next one, so they count toward no bound again.
    """
    b = await board(pools, full_pass_interval=NEVER)
    await b.capped("q")
    await b.tick(START)
    await b.pools.host.execute(
        "INSERT INTO todos (id, endpoint_id, queue, state, created_at, claimed_at)"
        " SELECT 'ahead-' || i, 'ep', 'q', 'done', $2, $3 FROM generate_series(1, $1) AS i",
        DELTA_BOUND + 40,
        T0,
        START + minutes(10),
    )

    ticks = [await b.tick(START + k * STEP) for k in range(1, 46)]

    assert ("full", [("ep", "q", "q-0", 1)]) == (ticks[0].kind, charges(ticks[0]))
    assert ["delta"] * 44 == [t.kind for t in ticks[1:]]
    # The pair backs off from nudge 1 as if the claims had been read once: nudge 2, no reset.
    assert [("ep", "q", "q-0", 2)] == [c for t in ticks[1:] for c in charges(t)]


@pytest.mark.parametrize(
    "lookback", [timedelta(seconds=-1), 60, None], ids=["negative", "seconds", "none"]
)
def test_a_bad_lookback_is_refused_by_name(lookback: object) -> None:
    """lookback must be a timedelta of 0 or more; the error names it."""
    with pytest.raises(ValueError, match="lookback"):
        PostgresLedger(cast(asyncpg.Pool, None), lookback=lookback)  # type: ignore[arg-type]


def test_the_lookback_is_configurable() -> None:
    """The default is LOOKBACK; 0 and any other duration are taken as given."""
    pool = cast(asyncpg.Pool, None)
    assert LOOKBACK == PostgresLedger(pool).lookback
    for lookback in (timedelta(0), 3 * LOOKBACK):
        assert lookback == PostgresLedger(pool, lookback=lookback).lookback


# -- what a full pass judges ---------------------------------------------------------------


async def test_a_full_pass_judges_every_pair_with_pending_work_or_a_ledger_row(
    pools: pg.Pools,
) -> None:
    """Pairs with pending work, and rows with none, are judged; a pair with neither is not."""
    b = await board(pools)
    await b.stalled("q", 3)
    await b.host.create_todo("fresh-0", endpoint_id="ep", queue="fresh", created_at=START)
    await b.capped("gone")
    await b.host.delete_todo("gone-0")  # a row with no work left: drained
    await b.stalled("done")
    await b.host.claim("done-0", owner="consumer", at=T0 + SECOND)  # no pending work, no row

    full = await b.tick(START)

    assert ("full", 4, [("ep", "q", "q-0", 1)], (("ep", "gone"),)) == (
        *seen(full),
        full.cleared,
    )
