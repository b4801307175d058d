"""The event loop: host events in time order, sweeps only on the ticks that can act.

The run moves from one instant to the next: the earliest host event (the
next ``Arrival`` of some pair, or a started consumer's ``ConsumerClaims``)
or the next tick on the sweep's agenda, host events first at a tick's own
instant. Every change to a pair's work or ledger row reschedules it
(``_reschedule``): a pair due on the very next sweep joins ``DuePairs`` at
once under its charge rank; one that acts later goes on the agenda for the
first tick where ``decide`` would charge it or drain its row (``_rules``),
and joins ``DuePairs`` (or has its row deleted) on that tick. Each sweep
then sends the best ``tick_limit`` due pairs through ``plan_tick``, which
charges them. Due pairs left over are the ones the tick limit holds back on
a real board; they keep their rank until their state changes.

A pair is looked at nowhere while it is idle, waiting for work or capped
(``plan_tick`` would not act on it), nor on any tick after a claim already
on its way: that claim reschedules it.
"""

from __future__ import annotations

import heapq

from stall_core._decide import charge_row, effective_nudges, plan_tick
from stall_core._values import PairState, TodoRef

from ._board import NOT_SCHEDULED, SimPair, todo_id
from ._events import Arrival, Claimed, ConsumerClaims, Created, ScheduledClaim
from ._result import SimResult, Tally, Timeseries, WaitStats, percentile
from ._rules import (
    ChargeOrder,
    DueTicks,
    Timeline,
    first_stalled_tick,
    has_unabsorbed_claim,
    micros,
    nudges_spent,
)
from ._scenario import Bursts, ConsumerKind, RandomSource, Scenario, SimPolicy, pair_keys
from ._sweep import DuePairs, SweepAgenda

__all__ = ["simulate"]

_HOUR_US = 3_600_000_000


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    workload: RandomSource,
    chance: RandomSource,
    record: bool = False,
) -> SimResult:
    """Run ``policy`` over ``scenario``; deterministic for given generator states.

    ``workload`` draws the layout and the arrivals only, so every policy sees
    the same todos; ``chance`` draws lost wakes and flaky claims. With
    ``record`` the result keeps every nudge, every host event and the layout.
    """
    return _Run(scenario, policy, workload=workload, chance=chance, record=record).run()


class _Run:
    """One policy over one scenario."""

    def __init__(
        self,
        scenario: Scenario,
        policy: SimPolicy,
        *,
        workload: RandomSource,
        chance: RandomSource,
        record: bool,
    ) -> None:
        self.scenario = scenario
        self.policy = policy
        self.pacing = policy.pacing
        self.sweeping = policy.pacing is not None
        self.workload = workload
        self.chance = chance
        self.record = record
        self.timeline = Timeline(
            start=scenario.start,
            tick_us=micros(scenario.tick),
            end_us=micros(scenario.duration),
        )
        self.threshold_us = micros(self.pacing.threshold) if self.pacing else 0
        self.due_ticks = (
            DueTicks(policy=self.pacing, timeline=self.timeline) if self.pacing else None
        )

        arrivals = scenario.arrivals
        self.arrival = Arrival(todos=arrivals.size if isinstance(arrivals, Bursts) else 1)
        self.arrivals_per_us = arrivals.per_hour / _HOUR_US

        consumer = scenario.consumer
        self.latency_us = micros(consumer.latency)
        self.service_us = micros(consumer.service)
        self.flaky = consumer.kind is ConsumerKind.FLAKY
        self.claim_probability = consumer.claim_probability
        self.unverified_share = scenario.unverified_share
        self.wake_loss = scenario.wake_loss
        #: What a started consumer does; None for a dead one, which exits at once.
        self.claims_when_started: ConsumerClaims | None = {
            ConsumerKind.ONE_SHOT: ConsumerClaims(up_to=1),
            ConsumerKind.BATCH: ConsumerClaims(up_to=consumer.batch),
            ConsumerKind.FLAKY: ConsumerClaims(up_to=1),
            ConsumerKind.DEAD: None,
        }[consumer.kind]
        self.flaky_miss = ConsumerClaims(up_to=0)

        #: Host events wait for their instant in two heaps, both in (instant, pair
        #: index, sequence number) order. ``arrivals`` holds each pair's next
        #: ``self.arrival`` as one int, ``at_us * pairs + index`` (a pair has one
        #: arrival waiting at a time, so keys are unique, and ints sift faster
        #: than tuples); its sequence number is the pair's ``arrival_seq``.
        #: ``claims`` holds each started consumer's claim. ``scheduled`` is the
        #: last sequence number used.
        self.arrivals: list[int] = []
        self.claims: list[ScheduledClaim] = []
        self.scheduled = 0
        self.agenda = SweepAgenda()
        self.due = DuePairs(order=ChargeOrder(pairs=scenario.pairs, end_us=self.timeline.end_us))
        self.tally = Tally()
        self.pairs = self._layout()
        self.pair_count = len(self.pairs)

    def _layout(self) -> list[SimPair]:
        share = self.scenario.hookless_share
        keys = pair_keys(self.scenario.pairs, self.scenario.queues_per_endpoint)
        pairs = []
        for index, (endpoint_id, queue) in enumerate(keys):
            hookless = share > 0 and self.workload.random() < share
            pairs.append(SimPair(index, endpoint_id, queue, not hookless))
        return pairs

    # -- the loop ----------------------------------------------------------------

    def run(self) -> SimResult:
        timeline, tally = self.timeline, self.tally
        for pair in self.pairs:
            for _ in range(self.scenario.backlog):
                self._create(pair, 0)
        if self.arrivals_per_us > 0:
            for pair in self.pairs:
                first_at = int(self.workload.expovariate(self.arrivals_per_us))
                if first_at <= timeline.end_us:
                    self.scheduled += 1
                    pair.arrival_seq = self.scheduled
                    heapq.heappush(self.arrivals, first_at * self.pair_count + pair.index)
        samples = Timeseries(end_us=timeline.end_us, count=self.scenario.samples)
        next_sample_at = samples.next_at_us
        pairs, arrivals, claims = self.pairs, self.arrivals, self.claims
        agenda_ticks = self.agenda.ticks
        pair_count, tick_us, end_us = self.pair_count, timeline.tick_us, timeline.end_us
        never = end_us + 1
        arrival_at, arrival_index = divmod(arrivals[0], pair_count) if arrivals else (never, 0)
        while True:
            # The next host event: the next arrival, unless a claim comes first.
            event_at, claim_next = arrival_at, False
            if claims:
                claim_at = claims[0][0]
                if claim_at < arrival_at or (
                    claim_at == arrival_at != never and self._claim_comes_first(arrival_index)
                ):
                    event_at, claim_next = claim_at, True
            # Host events at a tick's instant come before its sweep.
            sweep_at = agenda_ticks[0] * tick_us if agenda_ticks else never
            if sweep_at < event_at:
                if next_sample_at < sweep_at:
                    next_sample_at = samples.take_before(sweep_at, tally)
                self._sweep(*self.agenda.pop_next())
                continue
            if event_at > end_us:
                break
            if next_sample_at < event_at:
                next_sample_at = samples.take_before(event_at, tally)
            if claim_next:
                _, index, _, claim = heapq.heappop(claims)
                self._claim(pairs[index], event_at, claim.up_to)
            else:
                self._arrive(pairs[arrival_index], event_at)
                arrival_at, arrival_index = (
                    divmod(arrivals[0], pair_count) if arrivals else (never, 0)
                )
        samples.finish(tally)
        return self._result(samples)

    def _claim_comes_first(self, arrival_index: int) -> bool:
        """At one instant, whether the next claim precedes the next arrival.

        Events at one instant run in pair order, then in the order they were
        scheduled.
        """
        _, claim_index, claim_seq, _ = self.claims[0]
        arrival_seq = self.pairs[arrival_index].arrival_seq
        return (claim_index, claim_seq) < (arrival_index, arrival_seq)

    # -- host events ---------------------------------------------------------------

    def _arrive(self, pair: SimPair, now: int) -> None:
        """The pair's next ``Arrival``: create its todos, then draw the one after it.

        It stays at the top of its heap while its todos are created (they
        schedule claims only), then its key is replaced in place.
        """
        todos = self.arrival.todos
        self._create(pair, now)
        while todos > 1:  # the rest of a burst
            self._create(pair, now)
            todos -= 1
        next_at = now + int(self.workload.expovariate(self.arrivals_per_us))
        if next_at <= self.timeline.end_us:
            self.scheduled = pair.arrival_seq = self.scheduled + 1
            heapq.heapreplace(self.arrivals, next_at * self.pair_count + pair.index)
        else:
            heapq.heappop(self.arrivals)

    def _create(self, pair: SimPair, now: int) -> None:
        """A todo arrives: pending, gated if verified, and its creation wake goes out."""
        tally = self.tally
        number = tally.todos
        tally.todos = number + 1
        share = self.unverified_share
        verified = not share or self.workload.random() >= share
        pair.pending.append((now, number, verified))
        if verified:
            pair.gated.append((now, number))
        if self.record:
            tally.trace.append(
                Created(
                    at=self.timeline.instant(now),
                    endpoint_id=pair.endpoint_id,
                    queue=pair.queue,
                    todo_id=todo_id(number),
                    verified=verified,
                )
            )
        if pair.has_receiver:
            tally.creation_wakes += 1
            self._wake(pair, now)
            if verified and len(pair.gated) == 1:
                self._reschedule(pair, now)  # after the wake: it may have a claim on its way

    def _wake(self, pair: SimPair, now: int) -> bool:
        """Deliver one wake; True when it started the consumer.

        A lost wake reached the receiver (its hook answered) but not the
        consumer, so a lost nudge still counts toward the cap. A wake that
        reaches a running consumer is absorbed.
        """
        loss = self.wake_loss
        if loss and self.chance.random() < loss:
            self.tally.wakes_lost += 1
            return False
        if pair.busy_until_us > now:
            return False
        self.tally.consumers_started += 1
        claims = self.claims_when_started
        if claims is None:
            return True
        if self.flaky and self.chance.random() >= self.claim_probability:
            claims = self.flaky_miss
        claim_at = pair.busy_until_us = now + self.latency_us
        if claims.up_to:
            pair.claim_at_us = claim_at
        self.scheduled = sequence = self.scheduled + 1
        heapq.heappush(self.claims, (claim_at, pair.index, sequence, claims))
        return True

    def _claim(self, pair: SimPair, now: int, up_to: int) -> None:
        """The consumer claims up to ``up_to`` oldest pending todos, then serves them."""
        pending, waits = pair.pending, self.tally.waits_us
        pair.claim_at_us = None
        taken = 0
        while taken < up_to and pending:
            created_us, number, verified = pending.popleft()
            if verified:
                pair.gated.popleft()
                pair.oldest_gated_ref = None
            taken += 1
            waits.append(now - created_us)
            if self.record:
                self.tally.trace.append(
                    Claimed(at=self.timeline.instant(now), todo_id=todo_id(number))
                )
        pair.busy_until_us = now + taken * self.service_us
        if taken:
            self.tally.claims += taken
            pair.last_claim_us = now
            self._reschedule(pair, now)

    # -- the sweep -----------------------------------------------------------------

    def _reschedule(self, pair: SimPair, since_us: int) -> None:
        """Find the first tick from ``since_us`` where decide() would charge or drain the pair.

        A pair due on the very next sweep is held at once, as that sweep would
        do first thing; one that acts later goes on the agenda for that tick;
        one that is idle, waits for work or is capped goes nowhere, and so
        does one whose consumer claims before that tick (the claim
        reschedules it).
        """
        if not self.sweeping or not pair.has_receiver:
            return
        if pair.held_rank is not None:
            self.due.drop(pair)  # its state changed: rank it afresh
        row = pair.row
        if not pair.gated and row is None:
            pair.agenda_tick = NOT_SCHEDULED  # nothing to decide until work arrives
            return
        timeline = self.timeline
        tick = next_sweep = timeline.tick_at_or_after(since_us)
        claim_at = pair.claim_at_us
        if claim_at is not None and next_sweep * timeline.tick_us >= claim_at:
            # Its consumer claims before the next sweep, and a claim takes at
            # least one todo (there was work when it was woken and nobody else
            # claims), so it reschedules the pair.
            pair.agenda_tick = NOT_SCHEDULED
            return
        if pair.gated:
            stalled = first_stalled_tick(pair.gated[0][0], self.threshold_us, timeline.tick_us)
            if stalled > tick:
                tick = stalled
        # else: a row without work drains (D5) on the next sweep.
        progressed = row is not None and has_unabsorbed_claim(pair.last_claim_us, pair.charged_us)
        if pair.gated and row is not None and not progressed:
            if pair.due_tick is None:
                pair.agenda_tick = NOT_SCHEDULED  # capped: only progress makes it due again
                return
            tick = max(tick, pair.due_tick)
        claimed_first = claim_at is not None and tick * timeline.tick_us >= claim_at
        if tick > timeline.last_tick or claimed_first:
            pair.agenda_tick = NOT_SCHEDULED
        elif pair.gated and tick == next_sweep:
            pair.agenda_tick = NOT_SCHEDULED
            self.due.add(pair, nudges_spent(row, progressed))
            self.agenda.ensure(tick)
        elif pair.agenda_tick != tick:
            pair.agenda_tick = tick
            self.agenda.add(pair, tick)

    def _sweep(self, tick: int, listed: list[SimPair]) -> None:
        """One tick: hold the pairs due on it, delete drained rows, charge the best due pairs."""
        pacing = self.pacing
        assert pacing is not None  # only a pacing policy puts ticks on the agenda
        for pair in listed:
            if pair.agenda_tick != tick:
                continue  # rescheduled since it was listed
            pair.agenda_tick = NOT_SCHEDULED
            if pair.gated:
                progressed = has_unabsorbed_claim(pair.last_claim_us, pair.charged_us)
                self.due.add(pair, nudges_spent(pair.row, progressed))
            else:
                pair.row = pair.charged_us = pair.due_tick = None  # Drain (D5)
        chosen = self.due.take(pacing.tick_limit, self.pairs)
        if chosen:
            self._charge(tick, chosen)
        if self.due.count:
            self.tally.held_back_ticks += 1
            if tick < self.timeline.last_tick:
                self.agenda.ensure(tick + 1)

    def _charge(self, tick: int, chosen: list[tuple[int, SimPair]]) -> None:
        """Charge the chosen pairs through plan_tick and deliver their nudges."""
        pacing, tally, timeline, due_ticks = self.pacing, self.tally, self.timeline, self.due_ticks
        assert pacing is not None
        assert due_ticks is not None
        now = tick * timeline.tick_us
        now_at = timeline.instant(now)
        pairs = [pair for _, pair in chosen]
        rows = {pair.key: pair.row for pair in pairs if pair.row is not None}
        plan = plan_tick([self._state(pair) for pair in pairs], rows, now_at, pacing)
        charged = [(nudge.key, nudge.number, nudge.charged_at) for nudge in plan.charges]
        # Claims at a tick's instant come before its sweep, so charge_stamp is ``now``.
        expected = [(pair.key, spent + 1, now_at) for spent, pair in chosen]
        if charged != expected or plan.drained:
            raise AssertionError(f"tick {tick}: plan_tick charged {charged}, expected {expected}")
        tally.charged_ticks += 1
        started = 0
        for nudge, pair in zip(plan.charges, pairs, strict=True):
            pair.row = row = charge_row(nudge)
            pair.charged_us = now
            pair.due_tick = due_ticks.first_due_tick(row, now)
            tally.nudges += 1
            if self.record:
                tally.nudge_log.append(nudge)
            if self._wake(pair, now):
                started += 1
        tally.max_started_in_tick = max(tally.max_started_in_tick, started)
        for pair in pairs:
            self._reschedule(pair, now + 1)

    def _state(self, pair: SimPair) -> PairState:
        """The PairState a ledger would read for the pair now."""
        oldest = pair.oldest_gated_ref
        if oldest is None and pair.gated:
            created_us, number = pair.gated[0]
            oldest = TodoRef(id=todo_id(number), created_at=self.timeline.instant(created_us))
            pair.oldest_gated_ref = oldest
        progressed = has_unabsorbed_claim(pair.last_claim_us, pair.charged_us)
        return PairState(
            endpoint_id=pair.endpoint_id,
            queue=pair.queue,
            oldest=oldest,
            endpoint_active=True,
            has_receiver=pair.has_receiver,
            unabsorbed_claim_at=self.timeline.instant(pair.last_claim_us) if progressed else None,
        )

    # -- the result ----------------------------------------------------------------

    def _result(self, samples: Timeseries) -> SimResult:
        tally, end_us = self.tally, self.timeline.end_us
        # Floats sort twice as fast as ints past 2**30 and hold these exactly.
        waits = sorted(map(float, tally.waits_us))
        pending_pairs = capped = 0
        oldest: int | None = None
        for pair in self.pairs:
            if not pair.pending:
                continue
            pending_pairs += 1
            age = end_us - pair.pending[0][0]
            oldest = age if oldest is None else max(oldest, age)
            row, pacing = pair.row, self.pacing
            if (
                pacing
                and row
                and pair.gated
                and effective_nudges(self._state(pair), row) >= pacing.cap
            ):
                capped += 1
        return SimResult(
            policy=self.policy.name,
            pairs=self.scenario.pairs,
            ticks=self.scenario.ticks,
            todos=tally.todos,
            creation_wakes=tally.creation_wakes,
            nudges=tally.nudges,
            wakes_lost=tally.wakes_lost,
            claims=tally.claims,
            wait=WaitStats(
                count=len(waits),
                p50=percentile(waits, 50),
                p90=percentile(waits, 90),
                p99=percentile(waits, 99),
                max=percentile(waits, 100),
            ),
            wait_percentiles=tuple(
                p for p in (percentile(waits, q) for q in range(101)) if p is not None
            ),
            pending=tally.todos - tally.claims,
            pending_pairs=pending_pairs,
            capped_pairs=capped,
            oldest_pending_s=None if oldest is None else oldest / 1e6,
            max_started_in_tick=tally.max_started_in_tick,
            held_back_ticks=tally.held_back_ticks,
            charged_ticks=tally.charged_ticks,
            backlog=samples.series(samples.pending),
            consumers_started=tally.consumers_started,
            nudges_over_time=samples.series(samples.nudges),
            started_over_time=samples.series(samples.started),
            nudge_log=tuple(tally.nudge_log),
            trace=tuple(tally.trace),
            layout=tuple((pair.key, pair.has_receiver) for pair in self.pairs)
            if self.record
            else (),
        )
