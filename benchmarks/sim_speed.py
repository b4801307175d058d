"""How fast the pacing simulator runs: a fleet week and a small day.

Prints, for each run, wall and CPU seconds and simulated pair-ticks per
wall second (pairs x reaper ticks), then the machine's load average, since
the wall figure is only meaningful next to it. The last line is exactly
``sim_speed: fleet_week_s=<float> pair_ticks_per_s=<float>`` for the fleet week.

Workload: Poisson arrivals at 1 todo per queue per hour, 5% unverified
deliveries, 5% of pairs with no covering hook, one-shot consumers (1 s
wake-to-claim, 10 s service), the default policy, and 10% of wakes lost. At
10,000 pairs that loss needs more nudges than the tick limit allows (4 per
15 s tick, 23,040 a day), so due pairs pile up behind it all week: the
simulator's hardest case. A second fleet week with 1% lost wakes, within the
limit, is printed for comparison; the last line is the 10% run.

    .venv/bin/python -m benchmarks.sim_speed                # the fleet week
    .venv/bin/python -m benchmarks.sim_speed --pairs 1000   # a smaller fleet
"""

from __future__ import annotations

import argparse
import os
import random
import time
from datetime import timedelta

from stall_sim import Poisson, Scenario, SimPolicy, SimResult, simulate


def scenario(pairs: int, days: int, loss: float) -> Scenario:
    return Scenario(
        pairs=pairs,
        duration=timedelta(days=days),
        tick=timedelta(seconds=15),
        arrivals=Poisson(per_hour=1.0),
        unverified_share=0.05,
        hookless_share=0.05,
        wake_loss=loss,
    )


def measure(label: str, pairs: int, days: int, loss: float = 0.1) -> tuple[float, float]:
    """Run once; print and return (wall seconds, pair-ticks per wall second)."""
    chosen = scenario(pairs, days, loss)
    wall, cpu = time.perf_counter(), time.process_time()
    result: SimResult = simulate(
        chosen, SimPolicy.default(), workload=random.Random(1), chance=random.Random(2)
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rate = result.pair_ticks / wall
    print(
        f"{label}: {pairs:,} pairs x {days} d at 15 s, {loss:.0%} lost wakes = "
        f"{result.pair_ticks:,} pair-ticks; "
        f"wall {wall:.2f} s, cpu {cpu:.2f} s, {rate:,.0f} pair-ticks/s; "
        f"{result.todos:,} todos, {result.nudges:,} nudges, {result.claims:,} claims, "
        f"{result.charged_ticks:,} of {result.ticks:,} ticks charged"
    )
    return wall, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000, help="pairs of the fleet week")
    pairs = parser.parse_args().pairs
    if pairs < 1:
        parser.error(f"--pairs must be at least 1, got {pairs}")
    measure("small day", 100, 1)
    measure("fleet week, within the tick limit", pairs, 7, loss=0.01)
    wall, rate = measure("fleet week", pairs, 7)
    one, five, fifteen = os.getloadavg()
    print(f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs")
    print(f"sim_speed: fleet_week_s={wall:.2f} pair_ticks_per_s={rate:.0f}")


if __name__ == "__main__":
    main()
