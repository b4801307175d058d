"""What a run counts as it goes, and the result it hands back."""

from __future__ import annotations

import math
from array import array

import attrs

from stall_core import Nudge, PairKey

from .events import Claimed, Created

__all__ = ["SimResult", "Tally", "Timeseries", "WaitStats", "percentile"]

#: (seconds since start, value) at each sample instant of a run.
Series = tuple[tuple[float, int], ...]


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
    #: Whether the policy paces as the spec's production policy (``PacingPolicy()``): tables
    #: and plots mark it.
    spec: bool = False
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
    backlog: Series
    #: Wakes (creation wakes and nudges) that started an idle consumer.
    consumers_started: int
    #: (seconds since start, nudges charged so far) samples, at the backlog's instants.
    nudges_over_time: Series
    #: (seconds since start, consumers started so far) samples, at the backlog's instants.
    started_over_time: Series
    #: Every charged nudge, in order (only with ``record=True``).
    nudge_log: tuple[Nudge, ...] = ()
    #: Host events in order (only with ``record=True``).
    trace: tuple[Created | Claimed, ...] = ()
    #: Every pair and whether a notify hook covers it (only with ``record=True``).
    layout: tuple[tuple[PairKey, bool], ...] = ()
    #: Creation wakes dropped before any request (``Faults.lost_creation_wakes``).
    creation_wakes_dropped: int = 0
    #: Wakes (creation wakes and nudges) whose every attempt failed: a receiver outage.
    wakes_failed: int = 0
    #: Nudges that reached no receiver and were taken back (``stall_core.refunded_row``).
    refunds: int = 0
    #: Hooks disabled after ``disable_after`` failed deliveries in a row.
    hooks_disabled: int = 0

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


@attrs.define
class Tally:
    """The running counts of one run; times in whole microseconds."""

    todos: int = 0
    creation_wakes: int = 0
    nudges: int = 0
    wakes_lost: int = 0
    consumers_started: int = 0
    claims: int = 0
    max_started_in_tick: int = 0
    held_back_ticks: int = 0
    charged_ticks: int = 0
    creation_wakes_dropped: int = 0
    wakes_failed: int = 0
    refunds: int = 0
    hooks_disabled: int = 0
    #: Creation-to-claim wait of every claimed todo, as doubles (exact below 2**53;
    #: an array, not a list: see ``_Run.created_us``).
    waits_us: array[float] = attrs.field(factory=lambda: array("d"))
    nudge_log: list[Nudge] = attrs.field(factory=list)
    trace: list[Created | Claimed] = attrs.field(factory=list)


@attrs.define
class Timeseries:
    """Samples of a run's tally at ``count`` evenly spaced instants, start and end included.

    An instant's sample is the tally before the events at or after it.
    """

    end_us: int
    count: int
    #: Microseconds from one sample to the next.
    step_us: float = attrs.field(init=False)
    #: The instant of the next sample to take.
    next_at_us: float = 0.0
    instants_us: list[float] = attrs.field(factory=list)
    pending: list[int] = attrs.field(factory=list)
    nudges: list[int] = attrs.field(factory=list)
    started: list[int] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.step_us = self.end_us / (self.count - 1) if self.count > 1 else self.end_us + 1

    def take_before(self, now_us: int, tally: Tally) -> float:
        """Sample every instant before ``now_us`` not sampled yet; return the next instant."""
        while self.next_at_us < now_us:
            self._take(self.next_at_us, tally)
        return self.next_at_us

    def finish(self, tally: Tally) -> None:
        """Sample the instants left, up to the end of the run."""
        while len(self.instants_us) < self.count:
            self._take(min(self.next_at_us, self.end_us), tally)

    def _take(self, at_us: float, tally: Tally) -> None:
        self.instants_us.append(at_us)
        self.pending.append(tally.todos - tally.claims)
        self.nudges.append(tally.nudges)
        self.started.append(tally.consumers_started)
        self.next_at_us = len(self.instants_us) * self.step_us

    def series(self, values: list[int]) -> Series:
        """``values`` paired with their sample instants in seconds."""
        return tuple((at / 1e6, value) for at, value in zip(self.instants_us, values, strict=True))


def percentile(ordered: list[float], q: int) -> float | None:
    """Nearest-rank percentile of sorted microseconds, in seconds."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] / 1e6
