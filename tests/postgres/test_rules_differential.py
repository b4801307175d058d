"""Each rule the SQL restates, held to its core function on random rows.

Hypothesis draws a host's rows: endpoints active, paused, disabled or missing;
todos whose delivery is verified, unverified, absent or missing, in any state,
created and claimed at the thresholds' edges or outside every reader's range
(infinities, years BC and past 9999); hooks of any queue filter, enabled or
not; names that fit ``NAMES_MAX_BYTES`` and names that do not; and ledger rows
at the backoff's edges; and the fleet's record of its last tick, which sets
the claims window (``claims_window``: a lookback before that tick, at the
edges of the claims drawn) and the claims that tick read (some of those drawn,
some of the same todos with another stamp, some of todos gone). They are
written into a DBA's database (``site``: the host's tables off the sweeping
role's search_path), FK checks off as a replica applies them, so a missing
endpoint or delivery row is possible.

PostgreSQL answers with the ledger's ``status()`` facts, one full pass's
``charge_due`` and one delta's (find_changed, then judge on the pairs it
found); the core answers with its functions applied to the same rows. Each
assertion names the core function it holds, so a restatement that drifts says
which.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta

import asyncpg
import attrs
import pytest
from hypothesis import event, example, given, note, settings
from hypothesis import strategies as st

from adapters.postgres import PostgresLedger
from stall_core import (
    CLAIMS_LOOKBACK,
    QUARANTINE_QUEUE,
    Charge,
    Claim,
    Clear,
    LedgerRow,
    Nudge,
    PacingPolicy,
    PairKey,
    PairState,
    PairStatus,
    Silence,
    TodoRef,
    Unreadable,
    Verdict,
    charge_row,
    claims_read,
    claims_window,
    covers,
    decide,
    endpoint_active,
    has_departed,
    has_receiver,
    is_receiver,
    latest_claim,
    made_progress,
    names_fit,
    pair_status,
    passes_gate,
    plan_tick,
    readable,
    reset_row,
    silenced_until,
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
#: Claims about where a tick at NOW starts reading them (NOW less the lookback), and later.
recent_claims = st.sampled_from(
    [
        (at, at.isoformat())
        for at in (NOW - CLAIMS_LOOKBACK + d for d in (US, US * 0, -US, US * 2, CLAIMS_LOOKBACK))
    ]
)
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
    """A host's rows and our ledger's, as plain values.

    ``judged_to`` and ``read`` are the fleet's record of its last tick (None and
    nothing: no tick yet): where it judged to, and the claims it read.
    """

    states: dict[str, str | None] = attrs.field(repr=_short)
    todos: tuple[Todo, ...]
    hooks: tuple[Hook, ...]
    ledger: dict[PairKey, LedgerRow] = attrs.field(repr=_short)
    judged_to: datetime | None
    read: frozenset[Claim]

    @property
    def since(self) -> datetime:
        """Where the claims a tick at NOW reads start (``claims_window``)."""
        return claims_window(self.judged_to, NOW, CLAIMS_LOOKBACK)

    @property
    def claims(self) -> set[Claim]:
        """The claims a tick at NOW reads (``claims_read``), of every todo."""
        return claims_read((_claim(t) for t in self.todos), self.since)


def _claim(todo: Todo) -> tuple[str, str, datetime | None]:
    """A todo as the sweep reads claims: id, state, claimed_at (an odd instant as the core's)."""
    return (todo.id, todo.state, None if todo.claimed is None else todo.claimed[0])


@st.composite
def host_rows(draw: st.DrawFn, *, ticked: bool = False) -> Rows:
    """Rows that turn every rule, on a base of stalled pairs (more than one tick charges).

    ``ticked``: the fleet has ticked, no later than NOW (the next tick may be a delta).
    """
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
        for todo_id in [next(ids) for _ in range(draw(st.integers(0, 8)))]
    ]
    # Claims near the window's usual start (a lookback before NOW) in stalled pairs, some
    # requeued (pending, the stamp kept): the rows drawn below are most often of their pairs.
    recent = [
        Todo(
            id=todo_id,
            endpoint_id=endpoint_id,
            queue=queue,
            gate="none",
            state=draw(st.sampled_from(["claimed", "done", "done", "pending"])),
            created=draw(readable_instants),
            claimed=draw(st.one_of(recent_claims, recent_claims, recent_claims, instants)),
        )
        for todo_id, (endpoint_id, queue) in zip(
            ids,
            draw(st.lists(st.sampled_from(stalled or SHORT_PAIRS), min_size=1, max_size=3)),
            strict=False,
        )
    ]
    todos += recent
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
    # Ledger rows, only of pairs whose names fit (no others exist), most often of a pair
    # with a claim, one perhaps of a pair without todos; each names a todo of its pair
    # (most often a pending one: not departed), one gone, or none (an older build's). A row
    # keeping progress counts 0 (reset_row), as every row a ledger writes does. The first
    # claim's pair has a row only a claim can show progress for (none kept, its named todo
    # pending or none): whether a claim there is new decides.
    worked = sorted({t.key for t in todos if names_fit(*t.key)})
    claimed = sorted({t.key for t in recent if names_fit(*t.key)})
    focus = recent[0].key if recent and names_fit(*recent[0].key) else None
    keys = draw(st.lists(st.sampled_from(worked), max_size=6)) if worked else []
    keys += draw(st.lists(st.sampled_from(claimed), max_size=2)) if claimed else []
    keys += draw(st.lists(st.sampled_from(SHORT_PAIRS), max_size=1))
    keys += [focus] if focus else []
    ledger = {}
    for e, q in keys:
        mine = [t.id for t in todos if t.key == (e, q)]
        waiting = [t.id for t in todos if t.key == (e, q) and t.state == "pending"]
        if (e, q) == focus:
            kept, named = None, [*waiting, None]
        else:
            kept = draw(st.sampled_from([None, None, None, NOW - minutes(1)]))
            named = [*waiting * 3, *mine, "gone", None]
        ledger[e, q] = LedgerRow(
            endpoint_id=e,
            queue=q,
            nudges=0 if kept else draw(st.integers(0, POLICY.cap + 1)),
            last_nudged_at=draw(readable_instants)[0],
            named_todo=draw(st.sampled_from(named)),
            progressed_at=kept,
        )
    judged_to, read = draw(fleet_record(todos, ticked=ticked))
    return Rows(
        states={e: draw(st.sampled_from(STATES)) for e in ENDPOINTS},
        todos=tuple(todos),
        hooks=hooks,
        ledger=ledger,
        judged_to=judged_to,
        read=read,
    )


@st.composite
def fleet_record(
    draw: st.DrawFn, todos: list[Todo], *, ticked: bool
) -> tuple[datetime | None, frozenset[Claim]]:
    """The last tick's ``judged_to`` and the claims it read; None and nothing: no tick yet.

    ``judged_to`` puts the claims window's start (``claims_window``) on a claim's stamp
    or a microsecond either side, else at NOW less the lookback (no tick yet, a tick at
    NOW, or one later than NOW: a clock gone back). The claims read: all of those in the
    window, none, or some; some of the todos' others; some of the same todos with another
    stamp (claimed again since), or of todos gone.
    """
    stamps = sorted({t.claimed[0] for t in todos if t.claimed and readable(t.claimed[0])})
    edges = [at + CLAIMS_LOOKBACK + d for at in stamps if at <= NOW for d in (-US, US * 0, US)]
    plain = [NOW, NOW - US] if ticked else [NOW, NOW + minutes(1)]
    edges = [at for at in edges if at <= NOW] if ticked else edges
    choices = st.sampled_from(edges) | st.sampled_from(plain) if edges else st.sampled_from(plain)
    judged_to = draw(choices if ticked else choices | st.none())
    if judged_to is None:
        return None, frozenset()
    own = [(t.id, t.claimed[0]) for t in todos if t.claimed and readable(t.claimed[0])]
    # Every claim in the window read, none, or each as a coin falls; then any of the others.
    since = claims_window(judged_to, NOW, CLAIMS_LOOKBACK)
    window = sorted(claims_read(map(_claim, todos), since))
    mode = draw(st.sampled_from(["some", "none", "all"]))
    read = {c for c in window if mode == "all" or (mode == "some" and draw(st.booleans()))}
    read |= set(draw(st.lists(st.sampled_from(own), unique=True))) if own else set()
    others = st.tuples(
        st.sampled_from([*(t.id for t in todos), "gone"]), readable_instants.map(lambda i: i[0])
    )
    read |= set(draw(st.lists(others, max_size=2)))
    return judged_to, frozenset(read)


def _first_edge() -> Rows:
    """A window that starts at the first instant, and a claim stamped with it.

    A last tick within a lookback of the first instant puts the claims window's start
    there (``claims_window``); a claim stamped 0001-01-01 00:00:00+00 is not ``readable``,
    so not new: the pair waits on its backoff. asyncpg sends the window's start as
    -infinity, which that claim is after.
    """
    stalled = NOW - minutes(60)
    todos = (
        Todo(
            id="a",
            endpoint_id="ep-a",
            queue="lane",
            gate="none",
            state="pending",
            created=(stalled, stalled.isoformat()),
            claimed=None,
        ),
        Todo(
            id="B",
            endpoint_id="ep-a",
            queue="lane",
            gate="none",
            state="done",
            created=(stalled, stalled.isoformat()),
            claimed=ODD[1],
        ),
    )
    row = LedgerRow(
        endpoint_id="ep-a",
        queue="lane",
        nudges=2,
        last_nudged_at=NOW - minutes(1),
        named_todo="a",
    )
    return Rows(
        states=dict.fromkeys(ENDPOINTS, "active"),
        todos=todos,
        hooks=tuple(
            Hook(id=f"h{i}", endpoint_id=e, queues=None, enabled=True, failures=0)
            for i, e in enumerate(ENDPOINTS)
        ),
        ledger={row.key: row},
        judged_to=FIRST + CLAIMS_LOOKBACK,
        read=frozenset(),
    )


#: Every statement that reads the claims window, held to ``readable`` at its first instant.
FIRST_EDGE = _first_edge()


async def write(pool: asyncpg.Pool, rows: Rows, *, full_pass_at: datetime | None = None) -> None:
    """Replace every row with ``rows``, FK checks off (a replica's apply), in one transaction.

    The fleet's record says its last full pass ran at ``full_pass_at`` (by default its
    last tick, ``judged_to``).
    """
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
        if rows.judged_to is not None:
            read = sorted(rows.read)
            await conn.execute(
                "INSERT INTO stall_nudge.ticks (swept_at, judged_to, last_kind, claims_read_ids,"
                " claims_read_at, full_pass_at) VALUES ($1, $1, 'full', $2, $3, $4)",
                rows.judged_to,
                [todo_id for todo_id, _ in read],
                [at for _, at in read],
                rows.judged_to if full_pass_at is None else full_pass_at,
            )


async def recorded(pool: asyncpg.Pool) -> tuple[datetime | None, set[Claim]]:
    """The fleet's record after a tick: where it judged to, and the claims it read."""
    record = await pool.fetchrow(
        "SELECT judged_to, claims_read_ids, claims_read_at FROM stall_nudge.ticks"
    )
    assert record is not None, "a tick records itself"
    ids, stamps = record["claims_read_ids"] or [], record["claims_read_at"] or []
    assert len(ids) == len(stamps), "the claims read: ids and stamps side by side"
    return record["judged_to"], set(zip(ids, stamps, strict=True))


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
                latest_claim=latest_claim(map(_claim, mine), rows.since, rows.read),
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


@settings(max_examples=examples(60), suppress_health_check=REUSED)
@given(rows=host_rows())
@example(rows=FIRST_EDGE)
async def test_status_holds_each_rule_to_its_core_function(
    writer: asyncpg.Pool, sweeper: asyncpg.Pool, rows: Rows
) -> None:
    """Every fact status shows is the core's function of the same rows."""
    await write(writer, rows)
    now, shown = await PostgresLedger(sweeper, clock=FakeClock(NOW)).status(policy=POLICY)
    facts = core_facts(rows)
    got = {(p.endpoint_id, p.queue): p for p in shown}
    _claims_events(rows, facts)

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
            f"{name}: made_progress, from latest_claim ({core.latest_claim}: the latest claim "
            f"after {rows.since} not read by the last tick) and has_departed "
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


@settings(max_examples=examples(60), suppress_health_check=REUSED)
@given(rows=host_rows())
@example(rows=FIRST_EDGE)
async def test_a_full_pass_charges_clears_and_resets_as_plan_tick(
    writer: asyncpg.Pool, sweeper: asyncpg.Pool, rows: Rows
) -> None:
    """A full pass on the rows charges, clears and resets what plan_tick does on them."""
    await write(writer, rows)
    ledger = PostgresLedger(sweeper, clock=FakeClock(NOW))
    facts = core_facts(rows)
    _claims_events(rows, facts)
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
        assert want.charged_at == got.charged_at == NOW, f"{name}: charge_row stamps now"
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
    assert (NOW, rows.claims) == await recorded(writer), (
        f"claims_read: the tick records every claim stamped after {rows.since}, and only those"
    )


@settings(max_examples=examples(60), suppress_health_check=REUSED)
@given(rows=host_rows(ticked=True))
@example(rows=FIRST_EDGE)
async def test_a_delta_judges_each_pair_a_new_claim_moves_as_decide(
    writer: asyncpg.Pool, sweeper: asyncpg.Pool, rows: Rows
) -> None:
    """A delta finds every ledger row with a new claim (find_changed) and judges it as decide.

    Whatever else it judges, each row it changes is changed as the core's decision
    says (charged, reset, or cleared), and it records the claims of its window.
    """
    ledger = PostgresLedger(sweeper, clock=FakeClock(NOW))
    await writer.execute(CLEAR)
    assert "full" == (await ledger.charge_due(policy=POLICY)).kind, "an instance starts full"
    # The last full pass at NOW: the delta is due now, whenever the last tick was.
    await write(writer, rows, full_pass_at=NOW)
    facts = core_facts(rows)
    _claims_events(rows, facts)
    decisions = {key: decide(f.state, f.row, NOW, POLICY) for key, f in facts.items()}

    outcome = await ledger.charge_due(policy=POLICY)
    after = await ledger.ledger_rows()
    note(f"charged {_keys(outcome.charged)}, cleared {sorted(map(_name, outcome.cleared))}")

    assert ("delta", NOW) == (outcome.kind, outcome.now), "a tick inside the full-pass interval"
    charged = {n.key: n for n in outcome.charged}
    for nudge in outcome.charged:
        want, name = decisions[nudge.key], _name(nudge.key)
        assert isinstance(want, Charge), f"{name}: charged, but decide says {want}"
        assert (want.number, want.todo, NOW) == (nudge.number, nudge.todo, nudge.charged_at), (
            f"{name}: decide's number and todo (effective_nudges, work_of), stamped now"
        )
        assert charge_row(nudge) == after.get(nudge.key), f"{name}: charge_row"
    for key in outcome.cleared:
        assert isinstance(decisions[key], Clear), f"{_name(key)}: cleared; decide: {decisions[key]}"
    for key, row in rows.ledger.items():
        if key in charged or key in outcome.cleared:
            continue
        fact, want, name = facts[key], decisions[key], _name(key)
        # Neither charged nor cleared: as it was (not judged, or idle, waiting or capped), or
        # reset_row (a Reset, or a Charge with progress that the tick limit held back).
        resets = made_progress(fact.state, row) and not isinstance(want, Clear)
        assert after.get(key) in ((row, reset_row(row, NOW)) if resets else (row,)), (
            f"{name}: decide says {want}; the row is {after.get(key)}"
        )
        if row.progressed_at is None and fact.state.latest_claim is not None:
            # A new claim is progress (made_progress): find_changed finds the pair, and judge
            # clears, charges, or resets its row.
            assert reset_row(row, NOW) == after.get(key), (
                f"{name}: a new claim at {fact.state.latest_claim} (latest_claim: after "
                f"{rows.since}, not read by the last tick) is progress; decide says {want}, "
                f"but the delta left {after.get(key)}"
            )
    assert (NOW, rows.claims) == await recorded(writer), (
        f"claims_read: the delta records every claim stamped after {rows.since}, and only those"
    )


def _keys(nudges: Iterable[Nudge]) -> list[str]:
    return [_name(n.key) for n in nudges]


def _claims_events(rows: Rows, facts: dict[PairKey, Facts]) -> None:
    """Say which claim rules the example turns: a new claim, a claim the last tick read."""
    if any(f.row is not None and f.state.latest_claim is not None for f in facts.values()):
        event("a ledger row's pair has a new claim")
    if rows.since == FIRST:
        event("the claims window starts at the first instant")
    if rows.claims & rows.read:
        event("a claim in the window was read by the last tick")
    if any(t.state == "pending" and t.claimed for t in rows.todos):
        event("a pending todo keeps a claim stamp (requeued)")


#: Silences a test plants: (endpoint, queue or None for every queue, ends after NOW).
silences = st.lists(
    st.tuples(
        st.sampled_from(ENDPOINTS[:2]),
        st.sampled_from([None, QUEUES[0], QUEUES[2]]),
        st.booleans(),
    ),
    unique_by=lambda s: s[:2],
    max_size=3,
)


@settings(max_examples=examples(40), suppress_health_check=REUSED)
@given(rows=host_rows(), planted=silences)
async def test_a_silence_holds_in_the_judge_as_silences_pair(
    writer: asyncpg.Pool,
    sweeper: asyncpg.Pool,
    rows: Rows,
    planted: list[tuple[str, str | None, bool]],
) -> None:
    """A full pass leaves out the pairs a silence covers (silences_pair) as plan_tick does."""
    await write(writer, rows)
    await writer.execute("DELETE FROM stall_nudge.silences")
    for endpoint_id, queue, live in planted:
        ends = NOW + minutes(1) if live else NOW  # a silence ending at NOW no longer holds
        await writer.execute(
            "INSERT INTO stall_nudge.silences VALUES ($1, $2, $3, $4, 'ann', 'test')",
            endpoint_id,
            queue,
            T0,
            ends,
        )
    held = [
        Silence(
            endpoint_id=e,
            queue=q,
            starts_at=T0,
            ends_at=NOW + minutes(1) if live else NOW,
            by="ann",
            reason="test",
        )
        for e, q, live in planted
    ]
    facts = core_facts(rows)
    _claims_events(rows, facts)
    states = [
        attrs.evolve(
            f.state, silenced_until=silenced_until(held, f.state.endpoint_id, f.state.queue, NOW)
        )
        for f in facts.values()
    ]
    plan = plan_tick(states, rows.ledger, NOW, POLICY)

    outcome = await PostgresLedger(sweeper, clock=FakeClock(NOW)).charge_due(policy=POLICY)
    after = await PostgresLedger(sweeper, clock=FakeClock(NOW)).ledger_rows()

    event(f"silenced {sum(s.silenced_until is not None for s in states)}")
    assert _keys(plan.charges) == _keys(outcome.charged), (
        "silences_pair: a silenced pair is neither charged nor counted against the tick limit"
    )
    for key in plan.reset:
        assert reset_row(rows.ledger[key], NOW) == after.get(key), f"{_name(key)}: reset_row"
