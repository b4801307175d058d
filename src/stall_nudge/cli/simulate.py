"""``stall-nudge simulate``: the pacing simulator, policies side by side.

Each option is parsed by its argparse ``type`` (durations by the core's
``parse_duration``), so a bad value is one line naming the option; what
depends on several options (a ``--compare`` name a ``--policy`` defines,
the scenario's own checks) is checked once they are all read. The plot is
the simulator's own (``stall_sim.plot``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .common import CliError, duration, positive_duration
from .jsonout import dumps

if TYPE_CHECKING:
    from stall_sim import ConsumerKind, Scenario, SimPolicy, SimResult

__all__ = ["parse_policy", "register"]

_BUILT_IN = "default, edge-only, fixed-<duration>"
_T = TypeVar("_T")
_N = TypeVar("_N", int, float)


# -- option types (a bad value is argparse's error, one line naming the option) ----


def integer(*, low: int | None = None) -> Callable[[str], int]:
    """argparse type for a whole number, at least ``low``."""
    return lambda text: _at_least(low, text, _parse(int, "an integer", text))


def number(*, low: float | None = None) -> Callable[[str], float]:
    """argparse type for a finite number, at least ``low``."""
    return lambda text: _at_least(low, text, _parse(float, "a number", text))


def share(text: str) -> float:
    """argparse type for a share of the whole, from 0 to 1."""
    value = _parse(float, "a number", text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def days(text: str) -> timedelta:
    """argparse type for a run's length in (fractional) days, above 0."""
    value = _parse(float, "a number", text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    try:
        return timedelta(days=value)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{value!r} days is too long") from None


def consumer_kind(text: str) -> ConsumerKind:
    """argparse type for how every pair's consumer answers a wake."""
    from stall_sim import ConsumerKind

    try:
        return ConsumerKind(text)
    except ValueError:
        kinds = ", ".join(k.value for k in ConsumerKind)
        raise argparse.ArgumentTypeError(f"expected one of {kinds}, got {text!r}") from None


def _parse(kind: Callable[[str], _N], what: str, text: str) -> _N:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _at_least(low: float | None, text: str, value: _N) -> _N:
    if low is not None and value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low:g}, got {text!r}")
    return value


# -- the command ---------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser(
        "simulate",
        help="what-if runs of the nudge pacing policy",
        description=(
            "Simulate queue-stall nudges over a board of (endpoint, queue) pairs and "
            "print the policies side by side. Durations take ms, s, m, h or d, combined "
            "as in 1h30m (a bare number is seconds)."
        ),
    )
    add = p.add_argument
    add("--pairs", type=integer(low=1), default=100, help="(endpoint, queue) pairs (default 100)")
    add(
        "--queues-per-endpoint",
        type=integer(low=1),
        default=4,
        help="queues of each endpoint (default 4)",
    )
    add("--days", type=days, default=timedelta(days=1), help="simulated days (default 1)")
    add(
        "--tick",
        type=positive_duration,
        default=timedelta(seconds=15),
        help="reaper tick (default 15s)",
    )
    add(
        "--rate",
        type=number(low=0),
        default=1.0,
        help="arrivals per queue per hour (default 1; 0 for none)",
    )
    add(
        "--burst",
        type=integer(low=1),
        default=1,
        help="todos per arrival (default 1: Poisson single arrivals)",
    )
    add(
        "--backlog",
        type=integer(low=0),
        default=0,
        help="todos pending on every pair at the start (default 0)",
    )
    add("--unverified", type=share, default=0.0, help="share of unverified deliveries (default 0)")
    add(
        "--hookless",
        type=share,
        default=0.0,
        help="share of pairs no notify hook covers (default 0)",
    )
    add(
        "--consumer",
        type=consumer_kind,
        default="one-shot",
        help="one-shot, batch, flaky or dead (default one-shot)",
    )
    add(
        "--batch",
        type=integer(low=1),
        default=10,
        help="todos a batch consumer claims per wake (default 10)",
    )
    add(
        "--claim-probability",
        type=share,
        default=0.5,
        help="flaky consumer's claim chance (default 0.5)",
    )
    add(
        "--latency",
        type=positive_duration,
        default=timedelta(seconds=1),
        help="wake to claim (default 1s)",
    )
    add(
        "--service",
        type=duration,
        default=timedelta(seconds=10),
        help="consumer busy time per claimed todo (default 10s)",
    )
    add(
        "--wake-loss",
        type=share,
        default=0.0,
        help="share of wakes lost, creation and nudge (default 0)",
    )
    add(
        "--compare",
        default="default,edge-only,fixed-5m",
        help=f"comma-separated policies: {_BUILT_IN}, or a --policy name",
    )
    add(
        "--policy",
        action="append",
        default=[],
        metavar="NAME:SPEC",
        help=(
            "a custom policy, e.g. slow:backoff=10m/1h/6h,cap=4,tick_limit=8,threshold=2m "
            "(unset keys keep the default's); repeatable"
        ),
    )
    add("--seed", type=integer(), default=1, help="random seed (default 1)")
    add("--json", action="store_true", help="print the results as JSON")
    add(
        "--plot",
        metavar="FILE.png",
        help="draw nudges, consumer starts, backlog and waits over time (needs matplotlib)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the scenario and policies from ``args``, simulate each, report."""
    import random

    import attrs

    from stall_sim import simulate
    from stall_sim.plot import SAMPLES

    scenario = _scenario(args)
    if args.plot:  # a plot may zoom in on the first minutes of a long run: sample finely
        scenario = attrs.evolve(scenario, samples=SAMPLES)
    customs = dict(parse_policy(spec) for spec in args.policy)
    policies = [_named_policy(name, customs) for name in _names(args.compare)]
    results = [
        simulate(
            scenario,
            policy,
            workload=random.Random(f"{args.seed}:workload"),
            chance=random.Random(f"{args.seed}:chance"),
        )
        for policy in policies
    ]
    if args.plot:
        _plot(args.plot, scenario, results)
    if args.json:
        print(dumps(_as_json(scenario, args.seed, results)))
    else:
        print(_describe(scenario, args.seed))
        print()
        print(format_table(results))
        if args.plot:
            print(f"\nplot written to {args.plot}")
    return 0


# -- what depends on several options ---------------------------------------------


def _value(option: str, parse: Callable[[str], _T], text: str) -> _T:
    """``parse(text)`` for a value argparse does not see whole, its error naming ``option``."""
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"{option}: {exc}") from None


def parse_policy(spec: str) -> tuple[str, SimPolicy]:
    """Parse ``NAME:key=value,...`` (threshold, backoff, cap, tick_limit) into a named policy."""
    from stall_core import PacingPolicy
    from stall_sim import SimPolicy

    name, sep, body = spec.partition(":")
    name = name.strip()
    if not sep or not name or not body.strip():
        raise CliError(f"--policy: expected NAME:key=value,..., got {spec!r}")
    if name in {"default", "edge-only"} or name.startswith("fixed-"):
        raise CliError(f"--policy: {name!r} is a built-in policy name")
    fields: dict[str, Any] = {}
    for item in body.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        option = f"--policy {name}: {key}"
        if not eq or not value:
            raise CliError(f"--policy {name}: expected key=value, got {item.strip()!r}")
        if key == "threshold":
            fields["threshold"] = _value(option, positive_duration, value)
        elif key == "backoff":
            fields["backoff"] = tuple(
                _value(option, positive_duration, step) for step in value.split("/")
            )
        elif key in ("cap", "tick_limit"):
            fields[key] = _value(option, integer(low=1), value)
        else:
            raise CliError(
                f"--policy {name}: unknown key {key!r} (threshold, backoff, cap, tick_limit)"
            )
    try:
        return name, SimPolicy(name=name, pacing=PacingPolicy(**fields))
    except ValueError as exc:
        raise CliError(f"--policy {name}: {exc}") from None


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise CliError(f"--compare: expected comma-separated policy names, got {text!r}")
    if len(set(names)) != len(names):
        raise CliError(f"--compare: a policy is named twice in {text!r}")
    return names


def _named_policy(name: str, customs: dict[str, SimPolicy]) -> SimPolicy:
    from stall_sim import SimPolicy

    if name in customs:
        return customs[name]
    if name == "default":
        return SimPolicy.default()
    if name == "edge-only":
        return SimPolicy.edge_only()
    if name.startswith("fixed-"):
        every = _value(f"--compare {name}", positive_duration, name.removeprefix("fixed-"))
        return SimPolicy.fixed(every, name=name)
    known = ", ".join([_BUILT_IN, *customs])
    raise CliError(f"--compare: unknown policy {name!r} (known: {known})")


def _scenario(args: argparse.Namespace) -> Scenario:
    from stall_sim import Bursts, Consumer, Poisson, Scenario

    try:
        return Scenario(
            pairs=args.pairs,
            queues_per_endpoint=args.queues_per_endpoint,
            duration=args.days,
            tick=args.tick,
            arrivals=(
                Poisson(per_hour=args.rate)
                if args.burst == 1
                else Bursts(per_hour=args.rate, size=args.burst)
            ),
            backlog=args.backlog,
            unverified_share=args.unverified,
            hookless_share=args.hookless,
            consumer=Consumer(
                kind=args.consumer,
                latency=args.latency,
                service=args.service,
                batch=args.batch,
                claim_probability=args.claim_probability,
            ),
            wake_loss=args.wake_loss,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _plot(path: str, scenario: Scenario, results: Sequence[SimResult]) -> None:
    try:
        from stall_sim.plot import plot

        plot(path, scenario, results, heading=_describe(scenario, seed=None))
    except ImportError:
        raise CliError(
            "--plot needs matplotlib: pip install 'stall-nudge[plot]'", status=1
        ) from None
    except OSError as exc:
        raise CliError(f"--plot: cannot write {path!r}: {exc.strerror or exc}", status=1) from None


# -- output --------------------------------------------------------------------


def _human(seconds: float | None) -> str:
    from stall_core import format_seconds

    return "-" if seconds is None else format_seconds(seconds)


_ROWS: tuple[tuple[str, Callable[[SimResult], str]], ...] = (
    ("todos created", lambda r: f"{r.todos:,}"),
    ("wakes sent", lambda r: f"{r.wakes_sent:,}"),
    ("  creation wakes", lambda r: f"{r.creation_wakes:,}"),
    ("  nudges", lambda r: f"{r.nudges:,}"),
    ("  lost", lambda r: f"{r.wakes_lost:,}"),
    ("consumers started", lambda r: f"{r.consumers_started:,}"),
    ("claims", lambda r: f"{r.claims:,}"),
    ("wakes per claim", lambda r: "-" if r.wakes_per_claim is None else f"{r.wakes_per_claim:.2f}"),
    ("wait p50", lambda r: _human(r.wait.p50)),
    ("wait p90", lambda r: _human(r.wait.p90)),
    ("wait p99", lambda r: _human(r.wait.p99)),
    ("wait max", lambda r: _human(r.wait.max)),
    ("pending at end", lambda r: f"{r.pending:,}"),
    ("  on pairs", lambda r: f"{r.pending_pairs:,}"),
    ("  pairs capped", lambda r: f"{r.capped_pairs:,}"),
    ("  oldest", lambda r: _human(r.oldest_pending_s)),
    ("max started/tick", lambda r: f"{r.max_started_in_tick:,}"),
    ("ticks held back", lambda r: f"{r.held_back_ticks:,}"),
)


def format_table(results: Sequence[SimResult]) -> str:
    """The metrics as rows, one column per policy."""
    header = ["", *(r.policy for r in results)]
    body = [[label, *(cell(r) for r in results)] for label, cell in _ROWS]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for row in [header, *body]:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append("  ".join([first, *rest]).rstrip())
    return "\n".join(lines)


def _describe(scenario: Scenario, seed: int | None) -> str:
    """The scenario in one line, and the seed when given."""
    from stall_sim import Bursts, ConsumerKind

    c = scenario.consumer
    arrivals = scenario.arrivals
    shape = (
        f"bursts of {arrivals.size} at {arrivals.per_hour:g}/h"
        if isinstance(arrivals, Bursts)
        else f"{arrivals.per_hour:g}/h"
    )
    consumer = c.kind.value
    if c.kind is ConsumerKind.BATCH:
        consumer += f" (up to {c.batch})"
    elif c.kind is ConsumerKind.FLAKY:
        consumer += f" (p={c.claim_probability:g})"
    return (
        f"{scenario.pairs:,} pair{'' if scenario.pairs == 1 else 's'} over "
        f"{_human(scenario.duration.total_seconds())}, "
        f"tick {_human(scenario.tick.total_seconds())}, arrivals {shape} per queue, "
        f"backlog {scenario.backlog}, unverified {scenario.unverified_share:g}, "
        f"hookless {scenario.hookless_share:g}, consumer {consumer}, "
        f"latency {_human(c.latency.total_seconds())}, service "
        f"{_human(c.service.total_seconds())}, wake loss {scenario.wake_loss:g}"
        + ("" if seed is None else f", seed {seed}")
    )


def _as_json(scenario: Scenario, seed: int, results: Sequence[SimResult]) -> dict[str, Any]:
    from stall_sim import Bursts

    arrivals = scenario.arrivals
    c = scenario.consumer
    return {
        "scenario": {
            "pairs": scenario.pairs,
            "queues_per_endpoint": scenario.queues_per_endpoint,
            "duration_s": scenario.duration.total_seconds(),
            "tick_s": scenario.tick.total_seconds(),
            "arrivals_per_hour": arrivals.per_hour,
            "burst": arrivals.size if isinstance(arrivals, Bursts) else 1,
            "backlog": scenario.backlog,
            "unverified_share": scenario.unverified_share,
            "hookless_share": scenario.hookless_share,
            "consumer": c.kind.value,
            "batch": c.batch,
            "claim_probability": c.claim_probability,
            "latency_s": c.latency.total_seconds(),
            "service_s": c.service.total_seconds(),
            "wake_loss": scenario.wake_loss,
            "seed": seed,
        },
        "results": [
            {
                "policy": r.policy,
                "todos": r.todos,
                "wakes_sent": r.wakes_sent,
                "creation_wakes": r.creation_wakes,
                "nudges": r.nudges,
                "wakes_lost": r.wakes_lost,
                "consumers_started": r.consumers_started,
                "claims": r.claims,
                "wakes_per_claim": r.wakes_per_claim,
                "wait_s": {
                    "p50": r.wait.p50,
                    "p90": r.wait.p90,
                    "p99": r.wait.p99,
                    "max": r.wait.max,
                },
                "pending": r.pending,
                "pending_pairs": r.pending_pairs,
                "capped_pairs": r.capped_pairs,
                "oldest_pending_s": r.oldest_pending_s,
                "max_started_in_tick": r.max_started_in_tick,
                "held_back_ticks": r.held_back_ticks,
                "pair_ticks": r.pair_ticks,
                "charged_ticks": r.charged_ticks,
            }
            for r in results
        ],
    }
