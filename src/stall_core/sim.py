"""The pacing simulator: what-if runs of a nudge policy on the sweep's own decisions.

Theory of operation
-------------------
A run is a board of ``pairs`` (endpoint, queue) pairs, each with one
consumer, over ``duration`` of virtual time. Instants are whole microseconds
since ``start``; sweeps happen only on reaper ticks (``start + k * tick``).

Host events are arrivals (a todo is created and its creation wake sent to
the pair's notify hook, if it has one) and claims. A wake is lost with
probability ``wake_loss``; a wake that reaches a running consumer is absorbed
(it is already running: the one-shot shape of the spec's reported case); a
wake that reaches an idle consumer starts it, and it claims ``latency``
later: one todo (one-shot), up to ``batch`` (batch), one with probability
``claim_probability`` (flaky) or none (dead: it exits at once). A consumer
stays busy ``service`` per claimed todo, then exits. Claims take the pair's
oldest pending todo, verified or not, as the host's claim verb does.

The run is event-driven: it never steps every tick. Host events sit in one
heap; each pair also knows the first tick at which ``decide`` could charge
or drain it (its stalled instant, its ``next_due_at``, the tick after
progress or after its last gated todo went), and only those ticks are
looked at. There each queued pair is decided with ``decide``; a due pair
joins a heap ordered as ``plan_tick`` orders charges, and the best
``tick_limit`` of that heap go through ``plan_tick`` itself, which charges
them. Due pairs left over are exactly the ones the tick limit holds back on
a real board; they keep their place until their state changes. A pair not
looked at could only be idle, waiting or capped, which plan_tick would not
act on either. Host events at a tick's instant happen before its sweep.

Randomness comes from two generators the caller seeds (``random.Random``
satisfies ``RandomSource``): ``workload`` draws the layout and arrivals
only, so every policy sees the same todos; ``chance`` draws wake losses and
flaky claims.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Protocol

import attrs

from ._decide import Charge, Drain, charge_row, decide, effective_nudges, next_due_at, plan_tick
from ._policy import PacingPolicy
from ._values import LedgerRow, Nudge, PairKey, PairState, TodoRef, aware

__all__ = [
    "UNCAPPED",
    "Bursts",
    "Claimed",
    "Consumer",
    "ConsumerKind",
    "Created",
    "Poisson",
    "RandomSource",
    "Scenario",
    "SimPolicy",
    "SimResult",
    "WaitStats",
    "simulate",
]

#: The cap of a policy that never falls silent (the fixed-repeat baselines).
UNCAPPED = 1_000_000_000

_US = timedelta(microseconds=1)
_HOUR_US = 3_600_000_000


class RandomSource(Protocol):
    """The two draws the simulator makes; ``random.Random(seed)`` satisfies it."""

    def random(self) -> float: ...

    def expovariate(self, lambd: float, /) -> float: ...


def _us(delta: timedelta) -> int:
    return delta // _US


def _share(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")


def _rate(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be a finite rate >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Poisson:
    """Todos arrive one at a time, ``per_hour`` on average per queue."""

    per_hour: float = attrs.field(validator=_rate)


@attrs.frozen(kw_only=True)
class Bursts:
    """Bursts of ``size`` todos arrive at one instant, ``per_hour`` bursts on average per queue."""

    per_hour: float = attrs.field(validator=_rate)
    size: int = attrs.field(validator=attrs.validators.ge(1))


class ConsumerKind(enum.Enum):
    """How the consumer of every pair responds to a wake."""

    ONE_SHOT = "one-shot"
    BATCH = "batch"
    FLAKY = "flaky"
    DEAD = "dead"


@attrs.frozen(kw_only=True)
class Consumer:
    """One pair's consumer: its kind, wake-to-claim latency and busy time per todo."""

    kind: ConsumerKind = ConsumerKind.ONE_SHOT
    latency: timedelta = timedelta(seconds=1)
    service: timedelta = timedelta(seconds=10)
    batch: int = 10
    claim_probability: float = 0.5

    def __attrs_post_init__(self) -> None:
        # A claim must come strictly after the wake, or a nudge's own claim
        # would not count as progress (claimed_at > last_nudged_at).
        if self.latency < _US:
            raise ValueError(f"latency must be at least 1 microsecond, got {self.latency}")
        if self.service < timedelta(0):
            raise ValueError(f"service must not be negative, got {self.service}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        _share("claim_probability", self.claim_probability)


@attrs.frozen(kw_only=True)
class Scenario:
    """The board, its workload and consumers, and how long to run."""

    pairs: int
    duration: timedelta
    tick: timedelta = timedelta(seconds=15)
    queues_per_endpoint: int = 4
    arrivals: Poisson | Bursts = Poisson(per_hour=1.0)
    #: Todos already pending on every pair at the start, each with its creation wake.
    backlog: int = 0
    unverified_share: float = 0.0
    hookless_share: float = 0.0
    consumer: Consumer = Consumer()
    wake_loss: float = 0.0
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    #: Backlog samples over the run (for plots), start and end included.
    samples: int = 400

    def __attrs_post_init__(self) -> None:
        for name in ("pairs", "queues_per_endpoint", "samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.backlog < 0:
            raise ValueError(f"backlog must be >= 0, got {self.backlog!r}")
        if self.tick < _US or self.tick % _US:
            raise ValueError(f"tick must be a positive whole number of microseconds: {self.tick}")
        if self.duration < self.tick:
            raise ValueError(f"duration ({self.duration}) must be at least one tick ({self.tick})")
        _share("unverified_share", self.unverified_share)
        _share("hookless_share", self.hookless_share)
        _share("wake_loss", self.wake_loss)
        aware("start", self.start)

    @property
    def ticks(self) -> int:
        """Reaper ticks in the run, the one at ``start`` included."""
        return self.duration // self.tick + 1


@attrs.frozen(kw_only=True)
class SimPolicy:
    """A named policy to simulate; ``pacing`` None is the edge-only baseline (no sweep)."""

    name: str
    pacing: PacingPolicy | None

    @classmethod
    def default(cls) -> SimPolicy:
        """The spec's policy, as switchboard runs it."""
        return cls(name="default", pacing=PacingPolicy())

    @classmethod
    def edge_only(cls) -> SimPolicy:
        """Creation wakes only: what switchboard did before SPEC-0038."""
        return cls(name="edge-only", pacing=None)

    @classmethod
    def fixed(cls, every: timedelta, *, name: str | None = None) -> SimPolicy:
        """Alertmanager-style: nudge every ``every`` while stalled, never capped.

        Threshold and tick limit stay the default's, so only the repeat differs.
        """
        label = name if name is not None else f"fixed-{_short(every)}"
        return cls(name=label, pacing=PacingPolicy(backoff=(every,), cap=UNCAPPED))


def _short(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{delta.total_seconds():g}s"


@attrs.frozen(kw_only=True)
class Created:
    """Trace: a todo was created (its creation wake, if any, went out at once)."""

    at: datetime
    endpoint_id: str
    queue: str
    todo_id: str
    verified: bool


@attrs.frozen(kw_only=True)
class Claimed:
    """Trace: a consumer claimed a todo."""

    at: datetime
    todo_id: str


@attrs.frozen(kw_only=True)
class WaitStats:
    """Creation-to-claim wait of the claimed todos, in seconds (None with no claims)."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


@attrs.frozen(kw_only=True)
class SimResult:
    """What one policy did over one scenario."""

    policy: str
    pairs: int
    ticks: int
    todos: int
    creation_wakes: int
    nudges: int
    wakes_lost: int
    claims: int
    wait: WaitStats
    #: Wait (seconds) at each whole percentile 0..100 of claimed todos; empty with no claims.
    wait_percentiles: tuple[float, ...]
    pending: int
    pending_pairs: int
    #: Pairs with pending work whose nudges reached the cap without progress.
    capped_pairs: int
    oldest_pending_s: float | None
    #: Most consumers that one sweep tick's nudges started.
    max_started_in_tick: int
    #: Ticks where the tick limit held back pairs that were due.
    held_back_ticks: int
    #: Ticks on which some pair was charged.
    charged_ticks: int
    #: (seconds since start, pending todos) samples.
    backlog: tuple[tuple[float, int], ...]
    #: Every charged nudge, in order (only with ``record=True``).
    nudge_log: tuple[Nudge, ...] = ()
    #: Host events in order (only with ``record=True``).
    trace: tuple[Created | Claimed, ...] = ()
    #: Every pair and whether a notify hook covers it (only with ``record=True``).
    layout: tuple[tuple[PairKey, bool], ...] = ()

    @property
    def wakes_sent(self) -> int:
        """Creation wakes and nudges sent, lost ones included."""
        return self.creation_wakes + self.nudges

    @property
    def wakes_per_claim(self) -> float | None:
        return self.wakes_sent / self.claims if self.claims else None

    @property
    def pair_ticks(self) -> int:
        return self.pairs * self.ticks


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    workload: RandomSource,
    chance: RandomSource,
    record: bool = False,
) -> SimResult:
    """Run ``policy`` over ``scenario``; deterministic for given generator states."""
    return _Run(scenario, policy, workload, chance, record).run()


class _Pair:
    __slots__ = (
        "busy_until",
        "endpoint_id",
        "gated",
        "head",
        "held",
        "held_state",
        "index",
        "key",
        "last_claim",
        "look",
        "pending",
        "queue",
        "receiver",
        "row",
        "row_at",
    )

    def __init__(self, index: int, endpoint_id: str, queue: str, receiver: bool) -> None:
        self.index = index
        self.endpoint_id = endpoint_id
        self.queue = queue
        self.key: PairKey = (endpoint_id, queue)
        self.receiver = receiver
        #: Pending todos, oldest first: (created µs, todo number, verified).
        self.pending: deque[tuple[int, int, bool]] = deque()
        #: The verified subset of ``pending``: (created µs, todo number).
        self.gated: deque[tuple[int, int]] = deque()
        #: The TodoRef of ``gated[0]`` once built; None until then.
        self.head: TodoRef | None = None
        self.last_claim = -1
        self.row: LedgerRow | None = None
        self.row_at = 0
        self.busy_until = -1
        #: The tick this pair waits to be swept at; -1 for none.
        self.look = -1
        #: Nonzero while due but held back by the tick limit: its entry's stamp.
        self.held = 0
        self.held_state: PairState | None = None


def _todo_id(number: int) -> str:
    return f"t{number:09d}"


class _Run:
    def __init__(
        self,
        scenario: Scenario,
        policy: SimPolicy,
        workload: RandomSource,
        chance: RandomSource,
        record: bool,
    ) -> None:
        self.s = scenario
        self.policy = policy
        self.pacing = policy.pacing
        self.workload = workload
        self.chance = chance
        self.record = record
        self.tick_us = _us(scenario.tick)
        self.end_us = _us(scenario.duration)
        self.last_tick = self.end_us // self.tick_us
        self.threshold_us = _us(self.pacing.threshold) if self.pacing else 0
        consumer = scenario.consumer
        self.kind = consumer.kind
        self.latency_us = _us(consumer.latency)
        self.service_us = _us(consumer.service)
        arrivals = scenario.arrivals
        self.burst = arrivals.size if isinstance(arrivals, Bursts) else 1
        self.rate_per_us = arrivals.per_hour / _HOUR_US
        self.unverified = scenario.unverified_share
        self.loss = scenario.wake_loss
        self.start = scenario.start
        # Host events: (µs, pair index, sequence, what); what = -1 is an
        # arrival, n >= 0 a consumer claiming up to n todos.
        self.events: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.todos = 0
        self.looks: dict[int, list[_Pair]] = {}
        self.held: list[tuple[tuple[int, int, str, str], int, int]] = []
        self.held_count = self.stamp = 0
        self.look_heap: list[int] = []
        self.pending_total = 0
        self.creation_wakes = self.nudges = self.lost = self.claims = 0
        self.max_started = self.held_back_ticks = self.charged_ticks = 0
        self.waits: list[int] = []
        self.nudge_log: list[Nudge] = []
        self.trace: list[Created | Claimed] = []
        self.pairs = self._layout()

    # -- set-up --------------------------------------------------------------

    def _layout(self) -> list[_Pair]:
        q = self.s.queues_per_endpoint
        width = len(str(max(0, (self.s.pairs - 1) // q)))
        pairs = []
        for i in range(self.s.pairs):
            hookless = self.s.hookless_share > 0 and self.workload.random() < self.s.hookless_share
            endpoint_id = f"e{i // q:0{width}d}"
            queue = f"q{i % q:0{len(str(q - 1))}d}"
            pairs.append(_Pair(i, endpoint_id, queue, not hookless))
        return pairs

    def dt(self, us: int) -> datetime:
        return self.start + timedelta(microseconds=us)

    # -- the run ---------------------------------------------------------------

    def run(self) -> SimResult:
        for pair in self.pairs:
            for _ in range(self.s.backlog):
                self.create(pair, 0)
        if self.rate_per_us > 0:
            for pair in self.pairs:
                at = int(self.workload.expovariate(self.rate_per_us))
                if at <= self.end_us:
                    self.push(at, pair.index, -1)
        samples: list[tuple[float, int]] = []
        step = self.end_us / (self.s.samples - 1) if self.s.samples > 1 else self.end_us + 1
        next_sample, sample_no = 0.0, 0
        events, look_heap, tick_us, end_us = self.events, self.look_heap, self.tick_us, self.end_us
        while True:
            te = events[0][0] if events else end_us + 1
            tk = look_heap[0] * tick_us if look_heap else end_us + 1
            now = min(te, tk)
            if now > end_us:
                break
            while next_sample < now:
                samples.append((next_sample / 1e6, self.pending_total))
                sample_no += 1
                next_sample = sample_no * step
            if te > tk:
                self.sweep(heapq.heappop(look_heap))
                continue
            t, index, _, what = events[0]
            pair = self.pairs[index]
            if what >= 0:
                heapq.heappop(events)
                self.claim(pair, t, what)
                continue
            # An arrival: create its todos while it still heads the heap (what they
            # push comes later), then replace it with the pair's next arrival.
            for _ in range(self.burst):
                self.create(pair, t)
            at = t + int(self.workload.expovariate(self.rate_per_us))
            if at <= end_us:
                self.seq += 1
                heapq.heapreplace(events, (at, index, self.seq, -1))
            else:
                heapq.heappop(events)
        while sample_no < self.s.samples:
            samples.append((min(next_sample, end_us) / 1e6, self.pending_total))
            sample_no += 1
            next_sample = sample_no * step
        return self.result(tuple(samples))

    def push(self, t: int, index: int, what: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, index, self.seq, what))

    def create(self, pair: _Pair, t: int) -> None:
        number = self.todos
        self.todos = number + 1
        self.pending_total += 1
        verified = not (self.unverified and self.workload.random() < self.unverified)
        pair.pending.append((t, number, verified))
        if verified:
            gated = pair.gated
            gated.append((t, number))
            if len(gated) == 1 and self.pacing is not None:
                self.reschedule(pair, -(-t // self.tick_us))
        if self.record:
            self.trace.append(
                Created(
                    at=self.dt(t),
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    todo_id=_todo_id(number),
                    verified=verified,
                )
            )
        if pair.receiver:
            self.creation_wakes += 1
            self.wake(pair, t)

    def wake(self, pair: _Pair, t: int) -> bool:
        """Deliver one wake at ``t``; True when it started the consumer."""
        loss = self.loss
        if loss and self.chance.random() < loss:
            self.lost += 1
            return False
        if pair.busy_until > t:
            return False
        kind = self.kind
        if kind is ConsumerKind.DEAD:
            return True
        take = 1
        if kind is ConsumerKind.BATCH:
            take = self.s.consumer.batch
        elif (
            kind is ConsumerKind.FLAKY and self.chance.random() >= self.s.consumer.claim_probability
        ):
            take = 0
        pair.busy_until = t + self.latency_us
        self.push(pair.busy_until, pair.index, take)
        return True

    def claim(self, pair: _Pair, t: int, take: int) -> None:
        pending = pair.pending
        taken = 0
        while taken < take and pending:
            created, number, verified = pending.popleft()
            if verified:
                pair.gated.popleft()
                pair.head = None
            taken += 1
            self.waits.append(t - created)
            if self.record:
                self.trace.append(Claimed(at=self.dt(t), todo_id=_todo_id(number)))
        pair.busy_until = t + taken * self.service_us
        if taken:
            self.claims += taken
            self.pending_total -= taken
            pair.last_claim = t
            if self.pacing is not None:
                self.progressed(pair, -(-t // self.tick_us))

    # -- the sweep ---------------------------------------------------------------

    def reschedule(self, pair: _Pair, min_tick: int) -> None:
        """Queue the pair for the first tick from ``min_tick`` where it may charge or drain."""
        pacing = self.pacing
        if pacing is None or not pair.receiver:
            return
        if pair.held:
            self.unhold(pair)  # its state changed: plan it afresh
        if not pair.gated:
            if pair.row is None:
                pair.look = -1  # nothing to decide until work arrives
                return
            tick = min_tick  # drain the row
        else:
            # Stalled once created_at < now - threshold, strictly.
            tick = max(min_tick, (pair.gated[0][0] + self.threshold_us) // self.tick_us + 1)
            row = pair.row
            if row is not None and pair.last_claim <= pair.row_at:
                due = next_due_at(row, pacing)
                if due is None:
                    pair.look = -1  # capped: only progress wakes it again
                    return
                tick = max(tick, -(-_us(due - self.start) // self.tick_us))
        if tick > self.last_tick:
            pair.look = -1
            return
        if pair.look == tick:
            return
        pair.look = tick
        bucket = self.looks.get(tick)
        if bucket is None:
            self.looks[tick] = [pair]
            heapq.heappush(self.look_heap, tick)
        else:
            bucket.append(pair)

    def progressed(self, pair: _Pair, tick: int) -> None:
        """After a claim, queue the pair as ``reschedule`` does, skipping a foregone decision.

        A claim between sweeps is progress, so when the pair's oldest gated todo
        is stalled by the next tick, decide() can only answer Charge(number=1)
        for it from then on: it joins ``held`` under that order directly, and
        plan_tick decides it when it comes up (``charge`` checks it agrees).
        """
        if (
            pair.receiver
            and pair.gated
            and tick <= self.last_tick
            and (pair.row is None or pair.last_claim > pair.row_at)
            and (pair.gated[0][0] + self.threshold_us) // self.tick_us + 1 <= tick
        ):
            if pair.held:
                self.unhold(pair)
            pair.look = -1
            self.hold(pair, None, 1)
            if tick not in self.looks:
                self.looks[tick] = []
                heapq.heappush(self.look_heap, tick)
            return
        self.reschedule(pair, tick)

    def state(self, pair: _Pair) -> PairState:
        oldest = pair.head
        if oldest is None and pair.gated:
            created, number = pair.gated[0]
            oldest = pair.head = TodoRef(id=_todo_id(number), created_at=self.dt(created))
        return PairState(
            endpoint_id=pair.endpoint_id,
            queue=pair.queue,
            oldest=oldest,
            endpoint_active=True,
            has_receiver=pair.receiver,
            # Host events at a tick's instant come before its sweep, so a claim at the
            # charge's own instant was absorbed by it.
            unabsorbed_claim_at=self.dt(pair.last_claim)
            if pair.row is not None and pair.last_claim > pair.row_at
            else None,
        )

    def sweep(self, tick: int) -> None:
        """Sweep one tick: decide the pairs that may act, charge the best due ones.

        Each pair queued for this tick is decided once; a drain deletes its
        row, a due pair joins ``held``, ordered as plan_tick orders charges.
        The best ``tick_limit`` held pairs then go through plan_tick itself,
        which charges them; the rest stay held for the next tick, as the
        tick limit holds them back on the real board.
        """
        pacing = self.pacing
        assert pacing is not None  # only a pacing policy queues ticks
        t = tick * self.tick_us
        now = self.dt(t)
        for pair in self.looks.pop(tick):
            if pair.look != tick:
                continue  # stale, or listed twice
            pair.look = -1
            state = self.state(pair)
            decision = decide(state, pair.row, now, pacing)
            if isinstance(decision, Charge):
                self.hold(pair, state, decision.number)
                continue
            if isinstance(decision, Drain):
                pair.row = None
            self.reschedule(pair, tick + 1)
        chosen: list[_Pair] = []
        held = self.held
        while held and len(chosen) < pacing.tick_limit:
            _, stamp, index = heapq.heappop(held)
            pair = self.pairs[index]
            if pair.held == stamp:
                self.unhold(pair)
                chosen.append(pair)
        if chosen:
            self.charge(chosen, tick, now, pacing)
        if self.held_count:
            self.held_back_ticks += 1
            if tick + 1 <= self.last_tick and tick + 1 not in self.looks:
                self.looks[tick + 1] = []
                heapq.heappush(self.look_heap, tick + 1)

    def charge(self, chosen: list[_Pair], tick: int, now: datetime, pacing: PacingPolicy) -> None:
        self.charged_ticks += 1
        t = tick * self.tick_us
        by_key = {pair.key: pair for pair in chosen}
        rows = {pair.key: pair.row for pair in chosen if pair.row is not None}
        states = [pair.held_state or self.state(pair) for pair in chosen]
        plan = plan_tick(states, rows, now, pacing)
        if len(plan.charges) != len(chosen) or plan.deletions:
            raise AssertionError(f"tick {tick}: plan_tick did not charge every due pair chosen")
        started = 0
        for nudge in plan.charges:
            pair = by_key[nudge.key]
            pair.row = charge_row(nudge)
            pair.row_at = t
            self.nudges += 1
            if self.record:
                self.nudge_log.append(nudge)
            if self.wake(pair, t):
                started += 1
        self.max_started = max(self.max_started, started)
        for pair in chosen:
            pair.held_state = None
            self.reschedule(pair, tick + 1)

    def hold(self, pair: _Pair, state: PairState | None, number: int) -> None:
        """Keep a due pair until the tick limit lets it through, under plan_tick's order."""
        self.stamp += 1
        pair.held = self.stamp
        pair.held_state = state
        self.held_count += 1
        order = (number - 1, pair.gated[0][0], pair.endpoint_id, pair.queue)
        heapq.heappush(self.held, (order, self.stamp, pair.index))

    def unhold(self, pair: _Pair) -> None:
        pair.held = 0
        self.held_count -= 1

    # -- results -----------------------------------------------------------------

    def result(self, backlog: tuple[tuple[float, int], ...]) -> SimResult:
        waits = sorted(self.waits)
        pending_pairs = capped = 0
        oldest: int | None = None
        for pair in self.pairs:
            if not pair.pending:
                continue
            pending_pairs += 1
            age = self.end_us - pair.pending[0][0]
            oldest = age if oldest is None else max(oldest, age)
            if self.pacing is not None and pair.row is not None and pair.gated:
                spent = effective_nudges(self.state(pair), pair.row)
                if spent >= self.pacing.cap:
                    capped += 1
        return SimResult(
            policy=self.policy.name,
            pairs=self.s.pairs,
            ticks=self.s.ticks,
            todos=self.todos,
            creation_wakes=self.creation_wakes,
            nudges=self.nudges,
            wakes_lost=self.lost,
            claims=self.claims,
            wait=WaitStats(
                count=len(waits),
                p50=_percentile(waits, 50),
                p90=_percentile(waits, 90),
                p99=_percentile(waits, 99),
                max=_percentile(waits, 100),
            ),
            wait_percentiles=tuple(
                p for p in (_percentile(waits, q) for q in range(101)) if p is not None
            ),
            pending=self.pending_total,
            pending_pairs=pending_pairs,
            capped_pairs=capped,
            oldest_pending_s=None if oldest is None else oldest / 1e6,
            max_started_in_tick=self.max_started,
            held_back_ticks=self.held_back_ticks,
            charged_ticks=self.charged_ticks,
            backlog=backlog,
            nudge_log=tuple(self.nudge_log),
            trace=tuple(self.trace),
            layout=tuple((pair.key, pair.receiver) for pair in self.pairs) if self.record else (),
        )


def _percentile(ordered: list[int], q: int) -> float | None:
    """Nearest-rank percentile of sorted microseconds, in seconds."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] / 1e6
