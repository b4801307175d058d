"""How fast a policy search runs: 100 pacing policies over a fleet day, on every core.

The grid is 5 thresholds x 5 backoff schedules x 2 caps x 2 tick limits,
the spec's policy among them, each run over the same fleet day as
benchmarks/sim_speed.py's hardest case (Poisson arrivals at 1 todo per
queue per hour, 5% unverified, 5% of pairs hookless, one-shot consumers,
10% of wakes lost, 15 s ticks). Prints the wall seconds, the CPU seconds
the workers spent, the front, and the machine's load average, since the wall
figure is only meaningful next to it. The last line is exactly
``sim_sweep: policies=<int> wall_s=<float>``.

    .venv/bin/python -m benchmarks.sim_sweep                # 10,000 pairs, a day
    .venv/bin/python -m benchmarks.sim_sweep --pairs 100    # a small fleet
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import time
from datetime import timedelta

from stall_sim import Poisson, Scenario
from stall_sim.search import Grid, Outcome, Synthetic, run_search


def _minutes(*steps: int) -> tuple[timedelta, ...]:
    return tuple(timedelta(minutes=m) for m in steps)


GRID = Grid(
    thresholds=_minutes(1, 2, 5, 10, 15),
    backoffs=(
        _minutes(5, 20, 60, 360),  # the spec's
        _minutes(2, 10, 60),
        _minutes(10, 60, 360),
        _minutes(5),
        _minutes(1, 5, 30),
    ),
    caps=(3, 5),
    tick_limits=(4, 16),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000, help="pairs of the fleet day")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    scenario = Scenario(
        pairs=args.pairs,
        duration=timedelta(days=1),
        tick=timedelta(seconds=15),
        arrivals=Poisson(per_hour=1.0),
        unverified_share=0.05,
        hookless_share=0.05,
        wake_loss=0.1,
        samples=1,  # a search reads totals and percentiles only
    )
    policies = GRID.policies()
    wall = time.perf_counter()
    outcomes = run_search(
        Synthetic(scenario=scenario, generator=random.Random, workload_seed="1", chance_seed="2"),
        policies,
        workers=args.workers,
    )
    wall = time.perf_counter() - wall
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = children.ru_utime + children.ru_stime
    front = sorted((o for o in outcomes if o.on_front), key=lambda o: o.consumers_started)
    spec = next(o for o in outcomes if o.spec)
    print(
        f"{len(policies)} policies x {args.pairs:,} pairs x 1 d at 15 s: wall {wall:.2f} s, "
        f"worker cpu {cpu:.2f} s, {len(policies) / wall:.2f} policies/s"
    )
    print(f"front ({len(front)} policies):")
    for o in front:
        print(f"  {o.policy.name}: starts {o.consumers_started:,}, p99 {_p99(o)}")
    print(
        f"spec: starts {spec.consumers_started:,}, p99 {_p99(spec)}, "
        f"{'on' if spec.on_front else 'off'} the front"
    )
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs")
    print(f"sim_sweep: policies={len(policies)} wall_s={wall:.2f}")


def _p99(outcome: Outcome) -> str:
    """The p99 wait, or why there is none: over 1 % more todos left unclaimed than the best."""
    if outcome.p99_s is None:
        return "none (over 1% more todos unclaimed than the best policy)"
    return f"{outcome.p99_s:.1f} s"


if __name__ == "__main__":
    main()
