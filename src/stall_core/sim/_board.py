"""One simulated pair: its pending todos, consumer, ledger row and place in the sweep."""

from __future__ import annotations

from collections import deque

import attrs

from stall_core._values import LedgerRow, PairKey, TodoRef

__all__ = ["NOT_SCHEDULED", "GatedTodo", "PendingTodo", "SimPair", "todo_id"]

#: ``SimPair.agenda_tick`` of a pair no tick needs to look at.
NOT_SCHEDULED = -1

#: A pending todo: (creation in microseconds since start, todo number, verified).
PendingTodo = tuple[int, int, bool]
#: A pending todo that passes the sender gate: (creation in microseconds, todo number).
GatedTodo = tuple[int, int]


def todo_id(number: int) -> str:
    """The id of the run's ``number``-th todo."""
    return f"t{number:09d}"


@attrs.define(eq=False)
class SimPair:
    """The mutable state of one (endpoint, queue) pair during a run.

    Times are whole microseconds since the run's start.
    """

    index: int
    endpoint_id: str
    queue: str
    has_receiver: bool

    # The host's board.
    #: Pending todos, oldest first, verified or not: what a claim takes.
    pending: deque[PendingTodo] = attrs.field(factory=deque)
    #: The verified subset of ``pending``: the gated work the sweep sees.
    gated: deque[GatedTodo] = attrs.field(factory=deque)
    #: The TodoRef of ``gated[0]`` once built for a charge; None until then.
    oldest_gated_ref: TodoRef | None = None
    #: The latest claim on the pair; -1 before the first.
    last_claim_us: int = -1

    #: The sequence number of its next arrival, for ties with claims at one instant.
    arrival_seq: int = 0

    # The consumer.
    #: It absorbs wakes until then (it is already running); -1 when never started.
    busy_until_us: int = -1
    #: When the started consumer claims, while that claim is on its way; None otherwise.
    #: The claim reschedules the pair, so no tick after it needs a look before it.
    claim_at_us: int | None = None

    # The ledger.
    row: LedgerRow | None = None
    #: The row's ``last_nudged_at``; None without a row.
    charged_us: int | None = None
    #: The first tick at or after the row's ``next_due_at``; None without a row or once capped.
    due_tick: int | None = None

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
