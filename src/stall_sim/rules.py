"""The core's rules, restated in whole microseconds for the simulator's fast path.

The run decides with plain integers: which tick a pair acts on (it is
charged or its row cleared), in what order due pairs wait behind the tick
limit, and which nudge number a charge is. Each rule here names the core
function it mirrors (``# mirrors stall_core.<name>``) and is pinned to it on
random inputs by tests/unit/test_sim_rules.py, which also runs whole
scenarios with ``check=True``: on every tick, ``plan_tick`` over the whole
board must charge and clear exactly what the fast path did. The host's
rules (the gate, receivers, the active endpoint) it does not restate: the
run calls the core's functions.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from stall_core import LedgerRow, PacingPolicy, next_due_at

__all__ = [
    "ChargeOrder",
    "DueTicks",
    "Timeline",
    "first_stalled_tick",
    "has_unconsumed_claim",
    "micros",
    "nudges_spent",
]

MICROSECOND = timedelta(microseconds=1)


def micros(delta: timedelta) -> int:
    """``delta`` in whole microseconds (a timedelta has no finer resolution)."""
    return delta // MICROSECOND


@attrs.frozen(kw_only=True)
class Timeline:
    """A run's virtual time: whole microseconds since ``start``, a sweep every ``tick_us``."""

    start: datetime
    tick_us: int
    end_us: int
    #: The number of the run's last reaper tick (tick 0 is at ``start``).
    last_tick: int = attrs.field(init=False)

    @last_tick.default
    def _last_tick(self) -> int:
        return self.end_us // self.tick_us

    def instant(self, at_us: int) -> datetime:
        """The datetime ``at_us`` microseconds after ``start``."""
        return self.start + timedelta(microseconds=at_us)

    def micros_since_start(self, instant: datetime) -> int:
        """Whole microseconds from ``start`` to ``instant``."""
        return (instant - self.start) // MICROSECOND

    def tick_at_or_after(self, at_us: int) -> int:
        """The first tick whose sweep comes at or after ``at_us``.

        Host events at a tick's instant happen before its sweep, so an event
        at ``k * tick_us`` is seen by tick ``k``.
        """
        return -(-at_us // self.tick_us)


# mirrors stall_core.is_candidate: the threshold, strictly
def first_stalled_tick(oldest_created_us: int, threshold_us: int, tick_us: int) -> int:
    """The first tick whose sweep finds a todo past the threshold.

    The threshold is strict: the todo counts once ``created_at < now -
    threshold``, that is ``k * tick_us > oldest_created_us + threshold_us``.
    """
    return (oldest_created_us + threshold_us) // tick_us + 1


@attrs.define
class DueTicks:
    """The first tick at or after ``next_due_at`` of a row; None once capped.

    How long after its charge a row falls due depends only on its nudge
    count, so each count asks ``next_due_at`` once and the answer is kept.
    """

    policy: PacingPolicy
    timeline: Timeline
    #: Microseconds from a row's charge to its next nudge, by nudge count (None: capped).
    waits_us: dict[int, int | None] = attrs.field(factory=dict)

    def first_due_tick(self, nudges: int, charged_us: int) -> int | None:
        """For a row of ``nudges`` whose ``last_nudged_at`` is ``charged_us`` after the start."""
        if nudges in self.waits_us:
            wait_us = self.waits_us[nudges]
        else:
            row = LedgerRow(
                endpoint_id="", queue="", nudges=nudges, last_nudged_at=self.timeline.start
            )
            due_at = next_due_at(row, self.policy)
            wait_us = None if due_at is None else micros(due_at - row.last_nudged_at)
            self.waits_us[nudges] = wait_us
        return None if wait_us is None else self.timeline.tick_at_or_after(charged_us + wait_us)


# mirrors stall_core.made_progress
def has_unconsumed_claim(last_claim_us: int, charged_us: int | None) -> bool:
    """``stall_core.made_progress``: a ledger row, and a new claim since its charge.

    ``charged_us`` is the row's ``last_nudged_at`` (None without a row). A
    run's claims are stamped when they happen and never lost, and a claim at
    a tick's instant comes before that tick's sweep: so a claim later than
    the charge is one the charging tick did not read, a new one
    (``stall_core.latest_claim``), and one at or before it was read. The
    core's other ways to progress decide nothing else in a run: a consumer
    claims its oldest todos, so the todo a nudge named departs only by a
    claim; and the progress a reset keeps (``reset_row``) the run keeps in
    the claim's stamp, which no todo of a run ever loses.
    """
    return charged_us is not None and last_claim_us > charged_us


# mirrors stall_core.effective_nudges
def nudges_spent(row_nudges: int | None, progressed: bool) -> int:
    """``effective_nudges``: 0 with no row (``row_nudges`` None) or after progress, else the count.

    A charge is nudge ``nudges_spent + 1`` (``decide``'s ``Charge.number``).
    """
    return 0 if row_nudges is None or progressed else row_nudges


# mirrors stall_core.charge_order
@attrs.frozen(kw_only=True)
class ChargeOrder:
    """plan_tick's charge order as one integer per due pair; the smallest is charged first.

    plan_tick orders due pairs by nudges spent, then their oldest sendable todo, then
    (endpoint_id, queue). A rank packs the three into one int, most
    significant first, so the held-back heap compares plain ints (twice as
    fast as tuples). Pair indexes sort as (endpoint_id, queue) do, because
    the layout zero-pads both (see ``pair_keys``) and a replay sorts its
    pairs; creation instants lie in ``origin_us..end_us`` (a replayed todo
    may predate the run's start).
    """

    pairs: int
    end_us: int
    origin_us: int = 0
    #: What one nudge spent adds to a rank: every (creation instant, pair) below it.
    per_nudge: int = attrs.field(init=False)

    @per_nudge.default
    def _per_nudge(self) -> int:
        return (self.end_us - self.origin_us + 1) * self.pairs

    def rank(self, spent: int, oldest_created_us: int, pair_index: int) -> int:
        """The rank of a due pair that spent ``spent`` nudges since progress."""
        return (
            spent * self.per_nudge + (oldest_created_us - self.origin_us) * self.pairs + pair_index
        )

    def pair_index(self, rank: int) -> int:
        """The pair a rank belongs to."""
        return rank % self.pairs

    def spent(self, rank: int) -> int:
        """The nudges spent a rank was made with: its charge is number ``spent + 1``."""
        return rank // self.per_nudge
