"""What a simulation is asked: the board, its workload, its consumers and the policy."""

from __future__ import annotations

import enum
import math
from datetime import UTC, datetime, timedelta
from typing import Protocol

import attrs

from stall_core import PacingPolicy, PairKey, aware, format_duration

__all__ = [
    "UNCAPPED",
    "Bursts",
    "Consumer",
    "ConsumerKind",
    "Poisson",
    "RandomSource",
    "Scenario",
    "SimPolicy",
    "pair_keys",
]

#: The cap of a policy that never falls silent (the fixed-repeat baselines).
UNCAPPED = 1_000_000_000

_MICROSECOND = timedelta(microseconds=1)


class RandomSource(Protocol):
    """The two draws the simulator makes; ``random.Random(seed)`` satisfies it."""

    def random(self) -> float: ...

    def expovariate(self, lambd: float, /) -> float: ...


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
        if self.latency < _MICROSECOND:
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
    #: Share of wakes (creation wakes and nudges) the consumer misses after its
    #: notify hook answered: the nudge counts toward the cap all the same.
    wake_loss: float = 0.0
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    #: Samples over the run (for plots), start and end included.
    samples: int = 400

    def __attrs_post_init__(self) -> None:
        for name in ("pairs", "queues_per_endpoint", "samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.backlog < 0:
            raise ValueError(f"backlog must be >= 0, got {self.backlog!r}")
        if self.tick < _MICROSECOND or self.tick % _MICROSECOND:
            tick = format_duration(self.tick)
            raise ValueError(f"tick must be a positive whole number of microseconds: {tick}")
        if self.duration < self.tick:
            raise ValueError(
                f"duration ({format_duration(self.duration)}) must be at least one tick "
                f"({format_duration(self.tick)})"
            )
        _share("unverified_share", self.unverified_share)
        _share("hookless_share", self.hookless_share)
        _share("wake_loss", self.wake_loss)
        aware("start", self.start)

    @property
    def ticks(self) -> int:
        """Reaper ticks in the run, the one at ``start`` included."""
        return self.duration // self.tick + 1


def pair_keys(pairs: int, queues_per_endpoint: int) -> list[PairKey]:
    """The (endpoint_id, queue) of each pair, by pair index.

    Both parts are zero-padded numbers (``e07``, ``q2``), so the index order
    is the code-point order in which ``plan_tick`` breaks ties.
    """
    endpoint_width = len(str(max(0, (pairs - 1) // queues_per_endpoint)))
    queue_width = len(str(queues_per_endpoint - 1))
    return [
        (
            f"e{index // queues_per_endpoint:0{endpoint_width}d}",
            f"q{index % queues_per_endpoint:0{queue_width}d}",
        )
        for index in range(pairs)
    ]


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
        label = name if name is not None else f"fixed-{format_duration(every)}"
        return cls(name=label, pacing=PacingPolicy(backoff=(every,), cap=UNCAPPED))
