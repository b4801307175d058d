"""Each rule the SQL restates, held to its core function on random rows.

Hypothesis draws a host's rows: endpoints active, paused, disabled or missing;
todos whose delivery is verified, unverified, absent or missing, in any state,
created and claimed at the thresholds' edges or outside every reader's range
(infinities, years BC and past 9999); hooks of any queue filter, enabled or
not; names that fit ``NAMES_MAX_BYTES`` and names that do not; and ledger rows
at the backoff's edges. They are written into a DBA's database (``site``: the
host's tables off the sweeping role's search_path), FK checks off as a
replica applies them, so a missing endpoint or delivery row is possible.

PostgreSQL answers with the ledger's ``status()`` facts and one full pass's
``charge_due``; the core answers with its functions applied to the same rows.
Each assertion names the core function it holds, so a restatement that drifts
says which.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta

import asyncpg
import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from adapters.postgres import PostgresLedger
from stall_core import (
    QUARANTINE_QUEUE,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    TodoRef,
    Unreadable,
    Verdict,
    charge_row,
    covers,
    endpoint_active,
    has_departed,
    has_receiver,
    is_receiver,
    latest_claim,
    names_fit,
    pair_status,
    passes_gate,
    plan_tick,
    readable,
    reset_row,
    work_of,
)
from stall_testing import FakeClock
from tests import pg
from tests.support import T0, examples, minutes

from .test_differential import CLEAR, REUSED

pytestmark = pytest.mark.postgres

POLICY = PacingPolicy()
NOW = T0 + timedelta(days=1)
US = timedelta(microseconds=1)
FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)

#: The third endpoint's id takes 1,500 bytes: with a 500-byte queue its pair's names fit
#: (2,000 bytes), with 501 or 502 they do not. The others fit with every queue.
ENDPOINTS = ("ep-a", "ep-b", "E" * 1500)
QUEUES = ("lane", QUARANTINE_QUEUE, "ünï-队列", "q" * 500, "q" * 501, "é" * 250, "é" * 251)
#: Todo ids whose code point order differs from a collation's ("B" < "a" < "ä").
IDS = ("a", "B", "ä", "t1", "T2", "0", "z9", "Ab", "t10", "t2", "_x", "é", "b", "A", "t3", "Z")
#: An endpoint's state; None: its row is missing.
STATES = ("active",) * 6 + ("paused", "disabled", None)
#: A todo's delivery: none (an operator's todo), a verified one, an unverified one, or a
#: delivery_id whose row is missing.
GATES = ("none", "none", "verified", "verified", "verified", "unverified", "missing")
FILTERS = (None, None, (), ("lane",), ("lane", QUARANTINE_QUEUE), ("q" * 501,), ("ünï-队列",))

#: Instants at the edges the rules turn on: the threshold and each backoff step, a
#: microsecond either side, claims ahead of now, and the ends of the readable range.
EDGES = sorted(
    {NOW - d for step in (POLICY.threshold, *POLICY.backoff) for d in (step - US, step, step + US)}
    | {NOW - d for d in (timedelta(0), US, minutes(1), minutes(10), timedelta(days=2))}
    | {NOW + US, NOW + minutes(1), FIRST + US, LAST - US}
)
#: How the host may hold an instant no reader judges alike; the core reads each as the end
#: of the range it stands for (``readable`` is False for both).
ODD = [(FIRST, s) for s in ("-infinity", "0001-01-01 00:00:00+00", "0044-03-15 12:00:00+00 BC")]
ODD += [(LAST, s) for s in ("infinity", "9999-12-31 23:59:59.999999+00", "10000-01-01 00:00:00+00")]

Instant = tuple[datetime, str]
readable_instants = st.sampled_from([(at, at.isoformat()) for at in EDGES])
stalled_instants = st.sampled_from(
    [(at, at.isoformat()) for at in EDGES if at < NOW - POLICY.threshold]
)
instants = st.one_of(*[readable_instants] * 5, st.sampled_from(ODD))
#: The pairs of the short endpoints whose queue is neither quarantine nor long.
SHORT_PAIRS = [(e, q) for e in ENDPOINTS[:2] for q in (QUEUES[0], QUEUES[2], QUEUES[3], QUEUES[5])]
#: The long endpoint's pairs at the edge of names_fit: 2,000 bytes fit, 2,001 or 2,002 do not.
EDGE_PAIRS = [(ENDPOINTS[2], q) for q in QUEUES[3:]]


def _short(value: object) -> str:
    """A repr that shortens the long names, so a failing example stays readable."""
    text = repr(value)
    for name in (*ENDPOINTS, *QUEUES):
        if len(name) > 20:
            text = text.replace(repr(name)[1:-1], f"{name[0]}*{len(name)}")
    return text


@attrs.frozen(kw_only=True)
class Todo:
    id: str
    endpoint_id: str = attrs.field(repr=_short)
    queue: str = attrs.field(repr=_short)
    gate: str
    state: str
    created: Instant
    claimed: Instant | None

    @property
    def key(self) -> PairKey:
        return (self.endpoint_id, self.queue)

    @property
    def delivery(self) -> tuple[str | None, bool | None]:
        """The todo's delivery_id and its row's verified flag (None: no such row)."""
        i = ENDPOINTS.index(self.endpoint_id)
        return {
            "none": (None, None),
            "verified": (f"v{i}", True),
            "unverified": (f"u{i}", False),
            "missing": (f"x{i}", None),
        }[self.gate]


@attrs.frozen(kw_only=True)
class Hook:
    id: str
    endpoint_id: str = attrs.field(repr=_short)
    queues: tuple[str, ...] | None = attrs.field(repr=_short)
    enabled: bool
    failures: int


@attrs.frozen(kw_only=True)
class Rows:
    """A host's rows and our ledger's, as plain values."""

    states: dict[str, str | None] = attrs.field(repr=_short)
    todos: tuple[Todo, ...]
    hooks: tuple[Hook, ...]
    ledger: dict[PairKey, LedgerRow] = attrs.field(repr=_short)


@st.composite
def host_rows(draw: st.DrawFn) -> Rows:
    """Rows that turn every rule, on a base of stalled pairs (more than one tick charges)."""
    ids = iter(draw(st.permutations(IDS)))
    # The base: stalled todos, most past the gate, most in pairs whose names fit.
    stalled = draw(st.lists(st.sampled_from(SHORT_PAIRS * 2 + EDGE_PAIRS), unique=True, max_size=6))
    todos = [
        Todo(
            id=next(ids),
            endpoint_id=endpoint_id,
            queue=queue,
            gate=draw(st.sampled_from(["none", "verified", "verified", "missing"])),
            state="pending",
            created=draw(stalled_instants),
            claimed=None,
        )
        for endpoint_id, queue in stalled
    ]
    # On top, anything: any pair, gate, state and instant.
    endpoints = st.sampled_from(ENDPOINTS)
    todos += [
        Todo(
            id=todo_id,
            endpoint_id=draw(endpoints),
            queue=draw(st.sampled_from([QUEUES[0], *QUEUES])),
            gate=draw(st.sampled_from(GATES)),
            state=draw(st.sampled_from(["pending", "pending", "claimed", "done"])),
            created=draw(instants),
            claimed=draw(st.sampled_from([None, None]) | instants),
        )
        for todo_id in list(ids)[: draw(st.integers(0, 8))]
    ]
    # Each endpoint's first hook covers every queue (most often enabled); others filter.
    hooks = tuple(
        Hook(
            id=f"h{i}",
            endpoint_id=ENDPOINTS[i] if i < len(ENDPOINTS) else draw(endpoints),
            queues=None if i < len(ENDPOINTS) else draw(st.sampled_from(FILTERS)),
            enabled=draw(st.sampled_from([True] * 5 + [False])),
            failures=draw(st.integers(0, 3)),
        )
        for i in range(len(ENDPOINTS) + draw(st.integers(0, 3)))
    )
    # Ledger rows, only of pairs whose names fit (no others exist), one perhaps of a pair
    # without todos; each names a todo of its pair, one gone, or none (an older build's).
    # A row keeping progress counts 0 (reset_row), as every row a ledger writes does.
    worked = sorted({t.key for t in todos if names_fit(*t.key)})
    keys = draw(st.lists(st.sampled_from(worked), max_size=6)) if worked else []
    keys += draw(st.lists(st.sampled_from(SHORT_PAIRS), max_size=1))
    ledger = {}
    for e, q in keys:
        kept = draw(st.sampled_from([None, None, None, NOW - minutes(1)]))
        mine = [t.id for t in todos if t.key == (e, q)]
        ledger[e, q] = LedgerRow(
            endpoint_id=e,
            queue=q,
            nudges=0 if kept else draw(st.integers(0, POLICY.cap + 1)),
            last_nudged_at=draw(readable_instants)[0],
            named_todo=draw(st.sampled_from([*mine, *mine, "gone", None])),
            progressed_at=kept,
        )
    return Rows(
        states={e: draw(st.sampled_from(STATES)) for e in ENDPOINTS},
        todos=tuple(todos),
        hooks=hooks,
        ledger=ledger,
    )


async def write(pool: asyncpg.Pool, rows: Rows) -> None:
    """Replace every row with ``rows``, FK checks off (a replica's apply), in one transaction."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(CLEAR)
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.executemany(
            "INSERT INTO endpoints (id, state) VALUES ($1, $2)",
            [(e, s) for e, s in rows.states.items() if s is not None],
        )
        await conn.executemany(
            "INSERT INTO deliveries (id, endpoint_id, verified, received_at)"
            " VALUES ($1, $2, $3, $4)",
            [(f"{g}{i}", e, g == "v", T0) for i, e in enumerate(ENDPOINTS) for g in "vu"],
        )
        await conn.executemany(
            "INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled,"
            " consecutive_failures) VALUES ($1, $2, 'http://127.0.0.1:9/', 'whsec_x', $3, $4, $5)",
            [
                (
                    h.id,
                    h.endpoint_id,
                    None if h.queues is None else list(h.queues),
                    h.enabled,
                    h.failures,
                )
                for h in rows.hooks
            ],
        )
        await conn.executemany(
            "INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at,"
            " claimed_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7::text::timestamptz, $8::text::timestamptz)",
            [
                (
                    t.id,
                    t.endpoint_id,
                    t.queue,
                    t.delivery[0],
                    t.state,
                    f"title of {t.id}",
                    t.created[1],
                    None if t.claimed is None else t.claimed[1],
                )
                for t in rows.todos
            ],
        )
        await conn.executemany(
            "INSERT INTO stall_nudge.queue_stall_nudges (endpoint_id, queue, nudges,"
            " last_nudged_at, named_todo, progressed_at) VALUES ($1, $2, $3, $4, $5, $6)",
            [
                (r.endpoint_id, r.queue, r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at)
                for r in rows.ledger.values()
            ],
        )


# -- the core's answers ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Facts:
    """One pair as the core reads it from the rows, with what status shows beside."""

    state: PairState
    row: LedgerRow | None
    sendable: int
    held_by_gate: int
    hook_failures: int
    hooks_disabled: int
    #: The first todo holding an instant the sweep does not read, and which column.
    unreadable: tuple[str, str] | None


def core_facts(rows: Rows) -> dict[PairKey, Facts]:
    """Every pair with a pending todo or a ledger row, read by the core's functions."""
    pending = [t for t in rows.todos if t.state == "pending"]
    keys = {t.key for t in pending} | rows.ledger.keys()
    hooks = [(h.enabled, h.endpoint_id, h.queues) for h in rows.hooks]
    facts = {}
    for key in keys:
        endpoint_id, queue = key
        mine = [t for t in rows.todos if t.key == key]
        waiting = [t for t in pending if t.key == key]
        sendable = [t for t in waiting if passes_gate(*t.delivery)]
        row = rows.ledger.get(key)
        odd_created = sorted(t.id for t in waiting if not readable(t.created[0]))
        odd_claimed = sorted(t.id for t in mine if t.claimed and not readable(t.claimed[0]))
        facts[key] = Facts(
            state=PairState(
                endpoint_id=endpoint_id,
                queue=queue,
                oldest=work_of(
                    (
                        TodoRef(id=t.id, created_at=t.created[0], title=f"title of {t.id}")
                        for t in sendable
                    ),
                    endpoint_id=endpoint_id,
                    queue=queue,
                ),
                endpoint_active=endpoint_active(rows.states[endpoint_id]),
                has_receiver=has_receiver(hooks, endpoint_id, queue),
                latest_claim=latest_claim(t.claimed[0] for t in mine if t.claimed),
                named_departed=has_departed(row, {t.id for t in waiting}),
            ),
            row=row,
            sendable=len(sendable),
            held_by_gate=len(waiting) - len(sendable),
            hook_failures=max(
                (
                    h.failures
                    for h in rows.hooks
                    if is_receiver(h.enabled, h.endpoint_id, h.queues, endpoint_id, queue)
                ),
                default=0,
            ),
            hooks_disabled=sum(
                1
                for h in rows.hooks
                if not h.enabled and covers(h.endpoint_id, h.queues, endpoint_id, queue)
            ),
            unreadable=(odd_created[0], "created_at")
            if odd_created
            else (odd_claimed[0], "claimed_at")
            if odd_claimed
            else None,
        )
    return facts


def core_status(facts: Facts) -> PairStatus:
    """The status the core gives the pair: ``pair_status`` on the facts it read."""
    return pair_status(
        facts.state,
        facts.row,
        sendable=facts.sendable,
        held_by_gate=facts.held_by_gate,
        now=NOW,
        policy=POLICY,
        hook_failures=facts.hook_failures,
        hooks_disabled=facts.hooks_disabled,
        unreadable=None
        if facts.unreadable is None
        else Unreadable(todo_id=facts.unreadable[0], column=facts.unreadable[1], value="?"),
    )


#: The rule behind each verdict, to name in a disagreement.
VERDICT_RULES = {
    Verdict.DUE: "is_due",
    Verdict.FRESH: "is_candidate (the threshold)",
    Verdict.BACKING_OFF: "next_due_at",
    Verdict.CAPPED: "capped",
    Verdict.NO_RECEIVER: "has_receiver / is_receiver / covers",
    Verdict.ENDPOINT_INACTIVE: "endpoint_active",
    Verdict.HELD_BY_GATE: "passes_gate",
    Verdict.QUARANTINE: "is_quarantine",
    Verdict.NAMES_TOO_LONG: "names_fit",
    Verdict.DRAINED: "work_of",
    Verdict.UNREADABLE: "readable",
}


def _name(key: PairKey) -> str:
    return "/".join(part if len(part) < 20 else f"{part[0]}*{len(part)}" for part in key)


# -- the tests ---------------------------------------------------------------------------


@pytest.fixture(name="writer")
async def _writer(site: pg.Site) -> AsyncIterator[asyncpg.Pool]:
    """A superuser's pool on the site's database, the host's schema first on its path."""
    async with asyncpg.create_pool(
        site.dsn, min_size=1, max_size=1, server_settings={"search_path": pg.HOST_SCHEMA}
    ) as pool:
        yield pool


@pytest.fixture(name="sweeper")
async def _sweeper(site: pg.Site) -> AsyncIterator[asyncpg.Pool]:
    """The sweeping role's pool, as the ledger runs in production."""
    async with site.sweeper_pool() as pool:
        yield pool


@settings(max_examples=examples(30), suppress_health_check=REUSED)
@given(rows=host_rows())
async def test_status_holds_each_rule_to_its_core_function(
    writer: asyncpg.Pool, sweeper: asyncpg.Pool, rows: Rows
) -> None:
    """Every fact status shows is the core's function of the same rows."""
    await write(writer, rows)
    now, shown = await PostgresLedger(sweeper, clock=FakeClock(NOW)).status(policy=POLICY)
    facts = core_facts(rows)
    got = {(p.endpoint_id, p.queue): p for p in shown}

    assert NOW == now
    assert sorted(map(_name, facts)) == sorted(map(_name, got)), (
        "status lists every pair with a pending todo or a ledger row"
    )
    for key, fact in facts.items():
        pair, want, core = got[key], core_status(fact), fact.state
        name = _name(key)
        event(f"verdict: {want.verdict.value}")
        assert (want.sendable, want.held_by_gate) == (pair.sendable, pair.held_by_gate), (
            f"{name}: passes_gate (sendable, held by gate)"
        )
        assert want.oldest_age == pair.oldest_age, (
            f"{name}: work_of (the oldest readable sendable todo; none in quarantine, none "
            f"for names past names_fit) found {core.oldest}"
        )
        assert fact.unreadable == (
            None if pair.unreadable is None else (pair.unreadable.todo_id, pair.unreadable.column)
        ), f"{name}: readable (the first todo holding an instant no reader judges alike)"
        assert (want.hook_failures, want.hooks_disabled) == (
            pair.hook_failures,
            pair.hooks_disabled,
        ), f"{name}: covers / is_receiver (failures of receivers, disabled covering hooks)"
        assert want.effective_nudges == pair.effective_nudges, (
            f"{name}: made_progress, from latest_claim ({core.latest_claim}) and has_departed "
            f"({core.named_departed})"
        )
        assert want.next_due_at == pair.next_due_at, f"{name}: next_due_at / capped"
        assert want.verdict == pair.verdict, (
            f"{name}: the core says {want.verdict.value} ({VERDICT_RULES[want.verdict]}), "
            f"PostgreSQL {pair.verdict.value} ({VERDICT_RULES[pair.verdict]}); core facts: "
            f"endpoint_active {core.endpoint_active}, has_receiver {core.has_receiver}, "
            f"names_fit {names_fit(*key)}, work {core.oldest}"
        )
        assert (want.last_nudged_at, want.named_todo) == (pair.last_nudged_at, pair.named_todo), (
            f"{name}: the ledger row as planted"
        )


@settings(max_examples=examples(30), suppress_health_check=REUSED)
@given(rows=host_rows())
async def test_a_full_pass_charges_clears_and_resets_as_plan_tick(
    writer: asyncpg.Pool, sweeper: asyncpg.Pool, rows: Rows
) -> None:
    """A full pass on the rows charges, clears and resets what plan_tick does on them."""
    await write(writer, rows)
    ledger = PostgresLedger(sweeper, clock=FakeClock(NOW))
    facts = core_facts(rows)
    plan = plan_tick((f.state for f in facts.values()), rows.ledger, NOW, POLICY)

    outcome = await ledger.charge_due(policy=POLICY)
    after = await ledger.ledger_rows()
    event(f"due {len(plan.charges) + plan.held_back}, cleared {len(plan.cleared)}")
    event(f"reset {len(plan.reset)}")

    assert ("full", NOW) == (outcome.kind, outcome.now), (
        "a fresh ledger's first tick is a full pass"
    )
    assert _keys(plan.charges) == _keys(outcome.charged), (
        "plan_tick: the due pairs (is_due), in charge_order, at most the tick limit"
    )
    for want, got in zip(plan.charges, outcome.charged, strict=True):
        name = _name(want.key)
        assert want.todo == got.todo, f"{name}: work_of names the todo"
        assert want.number == got.number, f"{name}: effective_nudges + 1 is the number"
        assert want.charged_at == got.charged_at, f"{name}: charge_stamp (now, or a later claim)"
        assert charge_row(want) == after.get(want.key), f"{name}: charge_row"
    assert sorted(map(_name, plan.cleared)) == sorted(map(_name, outcome.cleared)), (
        "Clear: a row whose pair has no work (work_of) is deleted"
    )
    for key in plan.reset:
        assert reset_row(rows.ledger[key], NOW) == after.get(key), f"{_name(key)}: reset_row"
    kept = rows.ledger.keys() - {n.key for n in plan.charges} - {*plan.cleared, *plan.reset}
    assert {k: rows.ledger[k] for k in kept} == {k: after.get(k) for k in kept}, (
        "decide: the row of an idle, waiting or capped pair stays as it is"
    )


def _keys(nudges: Iterable[Nudge]) -> list[str]:
    return [_name(n.key) for n in nudges]
