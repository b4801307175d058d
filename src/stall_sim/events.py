"""Host events: what the simulated host does between sweeps, and what a run records of it.

``Arrival`` and ``ConsumerClaims`` are scheduled: each pair has at most one
of each on its way, which waits in the run's heaps until its instant (see
``run``). ``Created`` and ``Claimed`` are the trace a recorded run keeps
of what happened, in order.
"""

from __future__ import annotations

from datetime import datetime

import attrs

__all__ = ["Arrival", "Claimed", "ConsumerClaims", "Created"]


@attrs.frozen(kw_only=True)
class Arrival:
    """``todos`` todos arrive on a pair at once, each sending its creation wake."""

    todos: int


@attrs.frozen(kw_only=True)
class ConsumerClaims:
    """A started consumer claims up to ``up_to`` of its pair's oldest pending todos.

    ``up_to`` 0 is a consumer that ran and claimed nothing (a flaky miss).
    """

    up_to: int


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
