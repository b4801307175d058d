"""A policy search: a grid of pacing policies run on one scenario, and their Pareto front.

Every policy of the grid runs on the same board (a scenario with generators
seeded alike, or a replay), so they all see the same todos; the runs go to
a process pool, one policy a task. The spec's own policy (``PacingPolicy()``) is always run and
marked: the spec fixes the production policy, and a search is where a team
argues for the next one.

The front is of consumer starts against the p99 wait from creation (when a
todo becomes claimable) to claim, both minimised. Waits are those of
claimed todos, so a policy that leaves more than 1% of its todos unclaimed
at the end, beyond the fewest any policy of the search left (a hookless
pair's todos wait under every policy), has no p99 (``p99_s`` None): its
99th-percentile todo was never claimed. It is kept off the front.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta

import attrs

from stall_core import PacingPolicy, format_duration

from .faults import Faults
from .replay import Prepared, replay
from .result import SimResult, WaitStats
from .run import simulate
from .scenario import RandomSource, Scenario, SimPolicy

__all__ = [
    "UNCLAIMED_LIMIT",
    "Grid",
    "Outcome",
    "Replayed",
    "Synthetic",
    "is_spec",
    "pareto_front",
    "policy_name",
    "run_search",
]

#: A policy that leaves this share of its todos unclaimed beyond the search's least has no p99.
UNCLAIMED_LIMIT = 0.01

_SPEC = PacingPolicy()


@attrs.frozen(kw_only=True)
class Grid:
    """The values each field of ``PacingPolicy`` takes; a field left at one value is not varied.

    Each defaults to the spec's own value, so a grid varies only what it names.
    """

    thresholds: tuple[timedelta, ...] = (_SPEC.threshold,)
    backoffs: tuple[tuple[timedelta, ...], ...] = (_SPEC.backoff,)
    caps: tuple[int, ...] = (_SPEC.cap,)
    tick_limits: tuple[int, ...] = (_SPEC.tick_limit,)

    def policies(self) -> list[SimPolicy]:
        """Every combination, the spec's policy added first when the grid leaves it out.

        Raises ValueError from ``PacingPolicy`` for a combination it refuses.
        """
        pacings = [
            PacingPolicy(threshold=t, backoff=b, cap=c, tick_limit=k)
            for t, b, c, k in itertools.product(
                self.thresholds, self.backoffs, self.caps, self.tick_limits
            )
        ]
        if _SPEC not in pacings:
            pacings.insert(0, _SPEC)
        return [SimPolicy(name=policy_name(p), pacing=p) for p in pacings]


def policy_name(pacing: PacingPolicy) -> str:
    """The policy as ``--policy`` reads it back: ``threshold=2m,backoff=5m/20m,cap=5,...``."""
    backoff = "/".join(format_duration(step) for step in pacing.backoff)
    return (
        f"threshold={format_duration(pacing.threshold)},backoff={backoff},"
        f"cap={pacing.cap},tick_limit={pacing.tick_limit}"
    )


def is_spec(policy: SimPolicy) -> bool:
    """Whether ``policy`` paces as the spec's production policy does."""
    return policy.pacing == _SPEC


@attrs.frozen(kw_only=True)
class Outcome:
    """What one policy of a search did: the figures the search compares."""

    policy: SimPolicy
    spec: bool
    consumers_started: int
    nudges: int
    claims: int
    pending: int
    #: Waits of claimed todos, creation to claim, in seconds.
    wait: WaitStats
    #: The p99 wait the front compares; None when over 1% more todos went unclaimed than the
    #: search's least.
    p99_s: float | None
    on_front: bool = False

    @classmethod
    def of(cls, policy: SimPolicy, result: SimResult, *, least_pending: int = 0) -> Outcome:
        """``least_pending``: the fewest todos any policy of the search left unclaimed."""
        extra = result.pending - least_pending
        unclaimed = extra / result.todos if result.todos else 0.0
        return cls(
            policy=policy,
            spec=is_spec(policy),
            consumers_started=result.consumers_started,
            nudges=result.nudges,
            claims=result.claims,
            pending=result.pending,
            wait=result.wait,
            p99_s=result.wait.p99 if unclaimed <= UNCLAIMED_LIMIT else None,
        )


def pareto_front(points: Sequence[tuple[int, float | None]]) -> list[bool]:
    """For each (starts, p99) point, whether no other point is at least as good on both and
    better on one. A point without a p99 is never on the front."""
    scored = [(s, p) for s, p in points if p is not None]
    return [
        p is not None and not any((os <= s and op <= p) and (os < s or op < p) for os, op in scored)
        for s, p in points
    ]


def run_search(
    run: Callable[[SimPolicy], SimResult],
    policies: Sequence[SimPolicy],
    *,
    workers: int | None = None,
) -> list[Outcome]:
    """Run every policy through ``run``; the outcomes in the order given, the front marked.

    ``run`` simulates one policy on the board searched (``Synthetic`` or
    ``Replayed``) and must pickle, since ``workers`` processes call it
    (None: one per core; 1: in this process).
    """
    if workers == 1 or len(policies) == 1:
        results = [run(policy) for policy in policies]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(run, policies))
    least = min((r.pending for r in results), default=0)
    outcomes = [
        Outcome.of(p, r, least_pending=least) for p, r in zip(policies, results, strict=True)
    ]
    front = pareto_front([(o.consumers_started, o.p99_s) for o in outcomes])
    return [attrs.evolve(o, on_front=f) for o, f in zip(outcomes, front, strict=True)]


@attrs.frozen(kw_only=True)
class Synthetic:
    """One policy's run on a scenario, with generators made afresh from their seeds.

    A picklable callable: a worker process builds its own generators
    (``generator`` is a class such as ``random.Random``), since this package
    draws no randomness itself, and every policy sees the same todos.
    """

    scenario: Scenario
    generator: Callable[[str], RandomSource]
    workload_seed: str
    chance_seed: str
    faults: Faults = attrs.field(factory=Faults)

    def __call__(self, policy: SimPolicy) -> SimResult:
        return simulate(
            self.scenario,
            policy,
            workload=self.generator(self.workload_seed),
            chance=self.generator(self.chance_seed),
            faults=self.faults,
        )


@attrs.frozen(kw_only=True)
class Replayed:
    """One policy's run on a prepared history: ``Synthetic``'s twin for a replay."""

    prepared: Prepared
    generator: Callable[[str], RandomSource]
    chance_seed: str
    faults: Faults = attrs.field(factory=Faults)
    samples: int = 1
    record: bool = False

    def __call__(self, policy: SimPolicy) -> SimResult:
        return replay(
            self.prepared,
            policy,
            chance=self.generator(self.chance_seed),
            faults=self.faults,
            record=self.record,
            samples=self.samples,
        )
