"""``stall-nudge simulate``: the pacing simulator, policies side by side."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .common import CliError
from .jsonout import dumps

if TYPE_CHECKING:
    from stall_sim import Scenario, SimPolicy, SimResult

__all__ = ["parse_duration", "parse_policy", "register"]

_BUILT_IN = "default, edge-only, fixed-<duration>"


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
    add("--pairs", default="100", help="(endpoint, queue) pairs (default 100)")
    add("--queues-per-endpoint", default="4", help="queues of each endpoint (default 4)")
    add("--days", default="1", help="simulated days (default 1)")
    add("--tick", default="15s", help="reaper tick (default 15s)")
    add("--rate", default="1", help="arrivals per queue per hour (default 1; 0 for none)")
    add("--burst", default="1", help="todos per arrival (default 1: Poisson single arrivals)")
    add("--backlog", default="0", help="todos pending on every pair at the start (default 0)")
    add("--unverified", default="0", help="share of unverified deliveries (default 0)")
    add("--hookless", default="0", help="share of pairs no notify hook covers (default 0)")
    add(
        "--consumer",
        default="one-shot",
        help="one-shot, batch, flaky or dead (default one-shot)",
    )
    add("--batch", default="10", help="todos a batch consumer claims per wake (default 10)")
    add("--claim-probability", default="0.5", help="flaky consumer's claim chance (default 0.5)")
    add("--latency", default="1s", help="wake to claim (default 1s)")
    add("--service", default="10s", help="consumer busy time per claimed todo (default 10s)")
    add("--wake-loss", default="0", help="share of wakes lost, creation and nudge (default 0)")
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
    add("--seed", default="1", help="random seed (default 1)")
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

    scenario = _scenario(args)
    if args.plot:  # a plot may zoom in on the first minutes of a long run: sample finely
        scenario = attrs.evolve(scenario, samples=_PLOT_SAMPLES)
    customs = dict(parse_policy(spec) for spec in args.policy)
    policies = [_named_policy(name, customs) for name in _names(args.compare)]
    seed = _number("--seed", args.seed, int)
    results = [
        simulate(
            scenario,
            policy,
            workload=random.Random(f"{seed}:workload"),
            chance=random.Random(f"{seed}:chance"),
        )
        for policy in policies
    ]
    if args.plot:
        _plot(args.plot, scenario, results)
    if args.json:
        print(dumps(_as_json(scenario, seed, results)))
    else:
        print(_describe(scenario, seed))
        print()
        print(format_table(results))
        if args.plot:
            print(f"\nplot written to {args.plot}")
    return 0


# -- parsing -----------------------------------------------------------------


def parse_duration(option: str, text: str) -> timedelta:
    """A positive duration (``90s``, ``5m``, ``1h30m``, plain seconds); CliError otherwise."""
    duration = _duration(option, text)
    if duration <= timedelta(0):
        raise CliError(f"{option}: must be positive, got {text!r}")
    return duration


def _duration(option: str, text: str) -> timedelta:
    from stall_core import parse_duration as parse_any_duration

    try:
        return parse_any_duration(text)
    except ValueError as exc:
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
            fields["threshold"] = parse_duration(option, value)
        elif key == "backoff":
            fields["backoff"] = tuple(parse_duration(option, step) for step in value.split("/"))
        elif key == "cap":
            fields["cap"] = _number(option, value, int, low=1)
        elif key == "tick_limit":
            fields["tick_limit"] = _number(option, value, int, low=1)
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
        every = parse_duration(f"--compare {name}", name.removeprefix("fixed-"))
        return SimPolicy.fixed(every, name=name)
    known = ", ".join([_BUILT_IN, *customs])
    raise CliError(f"--compare: unknown policy {name!r} (known: {known})")


_N = TypeVar("_N", int, float)


def _number(option: str, text: str, kind: Callable[[str], _N], *, low: float | None = None) -> _N:
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise CliError(f"{option}: expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CliError(f"{option}: expected a finite number, got {text!r}")
    if low is not None and value < low:
        raise CliError(f"{option}: must be at least {low:g}, got {text!r}")
    return value


def _share(option: str, text: str) -> float:
    value = _number(option, text, float)
    if not 0 <= value <= 1:
        raise CliError(f"{option}: expected a share between 0 and 1, got {text!r}")
    return value


def _scenario(args: argparse.Namespace) -> Scenario:
    from stall_sim import Bursts, Consumer, ConsumerKind, Poisson, Scenario

    try:
        kind = ConsumerKind(args.consumer)
    except ValueError:
        kinds = ", ".join(k.value for k in ConsumerKind)
        raise CliError(f"--consumer: expected one of {kinds}, got {args.consumer!r}") from None
    rate = _number("--rate", args.rate, float, low=0)
    burst = _number("--burst", args.burst, int, low=1)
    days = _number("--days", args.days, float)
    if days <= 0:
        raise CliError(f"--days: must be positive, got {args.days!r}")
    consumer = Consumer(
        kind=kind,
        latency=parse_duration("--latency", args.latency),
        service=_non_negative_duration("--service", args.service),
        batch=_number("--batch", args.batch, int, low=1),
        claim_probability=_share("--claim-probability", args.claim_probability),
    )
    try:
        return Scenario(
            pairs=_number("--pairs", args.pairs, int, low=1),
            queues_per_endpoint=_number(
                "--queues-per-endpoint", args.queues_per_endpoint, int, low=1
            ),
            duration=_days("--days", days),
            tick=parse_duration("--tick", args.tick),
            arrivals=Poisson(per_hour=rate) if burst == 1 else Bursts(per_hour=rate, size=burst),
            backlog=_number("--backlog", args.backlog, int, low=0),
            unverified_share=_share("--unverified", args.unverified),
            hookless_share=_share("--hookless", args.hookless),
            consumer=consumer,
            wake_loss=_share("--wake-loss", args.wake_loss),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _days(option: str, days: float) -> timedelta:
    try:
        return timedelta(days=days)
    except OverflowError:
        raise CliError(f"{option}: {days!r} days is too long") from None


def _non_negative_duration(option: str, text: str) -> timedelta:
    return _duration(option, text)


# -- output --------------------------------------------------------------------


def _human(seconds: float | None) -> str:
    from stall_core import format_duration

    return "-" if seconds is None else format_duration(timedelta(seconds=seconds))


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


def _describe(scenario: Scenario, seed: int) -> str:
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
        f"{_human(c.service.total_seconds())}, wake loss {scenario.wake_loss:g}, seed {seed}"
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


_Series = tuple[tuple[float, int], ...]

#: Samples of each series over the run when plotting.
_PLOT_SAMPLES = 4_000

#: Dashes per policy: policies often coincide, so they differ by dash as well as colour.
_DASHES = ("-", "--", ":", "-.")


def _plot(path: str, scenario: Scenario, results: Sequence[SimResult]) -> None:
    """Draw what the policies differ on: nudges, consumer starts, backlog and waits."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError(
            "--plot needs matplotlib: pip install 'stall-nudge[plot]'", status=1
        ) from None
    fig, ((nudges, starts), (backlog, waits)) = plt.subplots(2, 2, figsize=(12, 8.5))
    run_s = scenario.duration.total_seconds()
    settled_s = max(
        _settled_at(series)
        for r in results
        for series in (r.nudges_over_time, r.started_over_time, r.backlog)
    )
    # When every series is flat long before the end, show the part that moves.
    shown_s = min(run_s, settled_s * 1.15) if settled_s < run_s / 2 else run_s
    scale, unit = (3_600.0, "hours") if shown_s >= 3 * 3_600 else (60.0, "minutes")
    xlabel = f"simulated {unit}"
    if shown_s < run_s:
        xlabel += f" (nothing changes after {_human(settled_s)}; the run lasts {_human(run_s)})"
    panels: tuple[tuple[Any, str, str, Callable[[SimResult], _Series]], ...] = (
        (nudges, "Nudges sent (cumulative)", "nudges", lambda r: r.nudges_over_time),
        (
            starts,
            "Consumers started by a wake (cumulative)",
            "starts",
            lambda r: r.started_over_time,
        ),
        (backlog, "Pending todos", "todos", lambda r: r.backlog),
    )
    for ax, title, what, series in panels:
        for i, r in enumerate(results):
            points = series(r)
            ax.plot(
                [t / scale for t, _ in points],
                [n for _, n in points],
                _DASHES[i % len(_DASHES)],
                label=f"{r.policy} ({points[-1][1]:,} at the end)",
            )
        _count_axis(ax, [max(n for _, n in series(r)) for r in results], what)
        ax.set(title=title, xlabel=xlabel)
        ax.set_xlim(0, shown_s / scale)
    _wait_panel(waits, results)
    for ax in (nudges, starts, backlog, waits):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(_describe(scenario, seed=0).rsplit(", seed", 1)[0], fontsize=8, wrap=True)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise CliError(f"--plot: cannot write {path!r}: {exc.strerror or exc}", status=1) from None
    finally:
        plt.close(fig)


def _settled_at(series: _Series) -> float:
    """The first sample instant (seconds) from which ``series`` no longer changes."""
    last = series[-1][1]
    settled = series[-1][0]
    for at, value in reversed(series):
        if value != last:
            break
        settled = at
    return settled


def _count_axis(ax: Any, values: Sequence[int], what: str) -> None:
    """A count axis from 0; logarithmic above 10 when the policies differ 100-fold or more.

    From 0, a constant count reads as what it is (a dead consumer's 10
    pending todos), not as a flat line on a degenerate axis; the log scale
    keeps a capped policy's few nudges visible next to an uncapped one's
    thousands.
    """
    top = max(values, default=0)
    smallest = min((v for v in values if v > 0), default=0)
    if smallest and top >= 100 * smallest:
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylim(0, top * 2)
        ax.set_ylabel(f"{what} (log above 10)")
    else:
        ax.set_ylim(0, max(1, top) * 1.1)
        ax.set_ylabel(what)


def _wait_panel(ax: Any, results: Sequence[SimResult]) -> None:
    """The creation-to-claim wait of claimed todos as a CDF on a log time axis."""
    floor = 0.1  # log axis: sub-tenth-second waits are drawn at 0.1 s
    for i, r in enumerate(results):
        if r.wait_percentiles:
            xs = [max(w, floor) for w in r.wait_percentiles]
            ax.step(
                xs,
                range(len(xs)),
                _DASHES[i % len(_DASHES)],
                where="post",
                label=f"{r.policy} ({r.claims:,} claimed, {r.pending:,} pending)",
            )
    ax.set(
        title="Wait from creation to claim (claimed todos)",
        xlabel="seconds (log)",
        ylabel="% of claimed todos (cumulative)",
        ylim=(0, 101),
    )
    if ax.get_legend_handles_labels()[0]:
        ax.set_xscale("log")
    else:
        pending = ", ".join(f"{r.policy}: {r.pending:,}" for r in results)
        ax.text(
            0.5,
            0.5,
            f"No todo was claimed under any policy.\nStill pending at the end: {pending}.",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
