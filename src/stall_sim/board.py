"""One simulated pair: its pending todos, consumer, ledger row and place in the sweep."""

from __future__ import annotations

import attrs

from stall_core import PairKey

from .events import ConsumerClaims
from .faults import Hang

__all__ = ["NOT_SCHEDULED", "SimHook", "SimPair", "todo_id"]

#: ``SimPair.agenda_tick`` of a pair no tick needs to look at.
NOT_SCHEDULED = -1


def todo_id(number: int) -> str:
    """The id of the run's ``number``-th todo."""
    return f"t{number:09d}"


@attrs.define(eq=False)
class SimPair:
    """The mutable state of one (endpoint, queue) pair during a run.

    Times are whole microseconds since the run's start. Todos are named by
    their number, the order the run created them in; the run keeps each
    one's creation instant (``run``).
    """

    index: int
    endpoint_id: str
    queue: str
    has_receiver: bool
    #: Whether its endpoint is active (a replayed host's endpoints may not be).
    endpoint_active: bool = True
    #: The hooks covering it, enabled or not (kept only when a receiver outage may disable one).
    hooks: list[SimHook] = attrs.field(factory=list)
    #: The windows its receiver is down, as (start_us, end_us, Hang); None when never.
    down: list[tuple[int, int, Hang]] | None = None

    # The host's board. Plain lists, not deques: a pair's queue is short
    # (its consumer claims on every wake that reaches it), and ten thousand
    # deques, a 600-byte block each, cost the run its cache.
    #: Numbers of the pending todos, oldest first, verified or not: what a claim takes.
    pending: list[int] = attrs.field(factory=list)
    #: The subset of ``pending`` that passes the sender gate: the work the sweep sees.
    sendable: list[int] = attrs.field(factory=list)
    #: The latest claim on the pair; -1 before the first.
    last_claim_us: int = -1

    #: The sequence number of its next arrival, for ties with claims at one instant.
    arrival_seq: int = 0

    # The consumer.
    #: It ignores wakes until then (it is already running); -1 when never started.
    busy_until_us: int = -1
    #: What the started consumer will do, while its claim is on its way; None otherwise.
    claim: ConsumerClaims | None = None
    #: The sequence number of that claim, for ties with arrivals at one instant.
    claim_seq: int = 0
    #: When the started consumer claims, while a claim that takes a todo is on its way;
    #: None otherwise. That claim reschedules the pair, so no tick after it needs a look
    #: before it.
    claim_at_us: int | None = None

    # The ledger row, as plain integers; both None without a row.
    #: The row's ``nudges``.
    row_nudges: int | None = None
    #: The row's ``last_nudged_at``.
    charged_us: int | None = None
    #: The first tick at or after the row's ``next_due_at``; None without a row or once capped.
    due_tick: int | None = None
    #: The todo number the row's charge named (a refund compares it); -1 before a charge.
    named: int = -1
    #: The first claim after the row's charge (a refund needs to know if a tick read it).
    progress_us: int = -1

    # The sweep's bookkeeping.
    #: The tick the sweep will look at this pair on, or NOT_SCHEDULED.
    agenda_tick: int = NOT_SCHEDULED
    #: Its rank (``ChargeOrder``) while due but held back by the tick limit; None otherwise.
    held_rank: int | None = None

    #: (endpoint_id, queue).
    key: PairKey = attrs.field(init=False)

    @key.default
    def _key(self) -> PairKey:
        return (self.endpoint_id, self.queue)


@attrs.define(eq=False)
class SimHook:
    """One notify hook while a receiver outage may fail its deliveries and disable it."""

    id: str
    endpoint_id: str
    queues: tuple[str, ...] | None
    enabled: bool = True
    #: Failed deliveries in a row (``consecutive_failures``).
    failures: int = 0
    #: The pairs it covers.
    pairs: list[SimPair] = attrs.field(factory=list)
