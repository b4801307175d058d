"""``stall-nudge simulate --sweep``: a grid of pacing policies, its table and its Pareto front.

``--sweep KEY=V1,V2,...`` gives the values one field of the policy takes
(threshold, backoff, cap, tick_limit; backoff steps joined by ``/``); the
search runs every combination, plus the spec's policy, on the scenario the
other options describe (``stall_sim.search``). Each ``--sweep`` value is
checked by its argparse ``type``, so a bad one is one line naming the key
and the value.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from .common import CliError
from .jsonout import dumps
from .simulate_common import KEYS, human, pacing_value, whole, write_plot

if TYPE_CHECKING:
    from stall_sim import SimPolicy, SimResult
    from stall_sim.search import Grid, Outcome

__all__ = ["add_sweep_arguments", "format_search", "grid_of", "run", "sweep_axis"]

#: One ``--sweep`` option: a key and the values it takes, parsed.
Axis = tuple[str, tuple[Any, ...]]


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--sweep`` and ``--workers`` to ``simulate``'s parser."""
    parser.add_argument(
        "--sweep",
        action="append",
        type=sweep_axis,
        default=[],
        metavar="KEY=V1,V2,...",
        help=(
            "search policies instead of --compare: every combination of the values given, "
            "e.g. --sweep threshold=1m,2m --sweep backoff=5m/20m/1h/6h,2m/10m --sweep cap=3,5 "
            "--sweep tick_limit=4,16 (unswept keys keep the spec's value); repeatable"
        ),
    )
    parser.add_argument(
        "--workers",
        type=whole,
        default=None,
        help="processes a sweep runs on (default: one per core)",
    )


def sweep_axis(text: str) -> Axis:
    """argparse type for ``KEY=V1,V2,...``: the key and its values, each checked."""
    key, eq, values = text.partition("=")
    key = key.strip()
    if not eq:
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2,..., got {text!r}")
    if key not in KEYS:
        raise argparse.ArgumentTypeError(f"unknown key {key!r} ({', '.join(KEYS)})")
    items = [item.strip() for item in values.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"{key}: expected comma-separated values, got {values!r}")
    parsed = tuple(pacing_value(key, item) for item in items)
    for i, value in enumerate(parsed):
        if value in parsed[:i]:
            raise argparse.ArgumentTypeError(f"{key}: {items[i]!r} is listed twice")
    return key, parsed


def grid_of(axes: Sequence[Axis]) -> Grid:
    """The grid the ``--sweep`` options describe; a key given twice is a usage error."""
    from stall_sim.search import Grid

    fields = {"threshold": "thresholds", "backoff": "backoffs", "cap": "caps"}
    chosen: dict[str, tuple[Any, ...]] = {}
    for key, values in axes:
        name = fields.get(key, "tick_limits")
        if name in chosen:
            raise CliError(f"--sweep: {key} is given twice")
        chosen[name] = values
    return Grid(**chosen)


def run(
    args: argparse.Namespace,
    board: Callable[[SimPolicy], SimResult],
    *,
    heading: str,
    board_json: dict[str, Any],
) -> int:
    """Run the sweep ``args`` describe on ``board`` (one policy's run) and print it."""
    from stall_sim.search import run_search

    if args.policy:
        raise CliError("--sweep: --policy cannot be combined with it (sweep its keys instead)")
    outcomes = run_search(board, grid_of(args.sweep).policies(), workers=args.workers)
    if args.plot:
        _plot(args.plot, outcomes, heading)
    if args.json:
        print(dumps({**board_json, "policies": [_json(o) for o in outcomes]}))
    else:
        print(heading)
        print()
        print(format_search(outcomes))
        if args.plot:
            print(f"\nplot written to {args.plot}")
    return 0


def _plot(path: str, outcomes: Sequence[Outcome], heading: str) -> None:
    from stall_sim.plot import plot_front

    write_plot(path, partial(plot_front, path, outcomes, heading=heading))


# -- output --------------------------------------------------------------------


def _p99(o: Outcome) -> str:
    if o.p99_s is None and o.wait.p99 is not None:
        return ">1% unclaimed"
    return human(o.p99_s)


def _backoff(o: Outcome) -> str:
    from stall_core import format_duration

    pacing = o.policy.pacing
    assert pacing is not None  # a sweep runs pacing policies only
    return "/".join(format_duration(step) for step in pacing.backoff)


def _pacing_cell(field: str) -> Callable[[Outcome], str]:
    def cell(o: Outcome) -> str:
        from stall_core import format_duration

        value = getattr(o.policy.pacing, field)
        return format_duration(value) if isinstance(value, timedelta) else str(value)

    return cell


_COLUMNS: tuple[tuple[str, Callable[[Outcome], str], bool], ...] = (
    # (header, cell, right-aligned)
    ("front", lambda o: "front" if o.on_front else "", False),
    ("spec", lambda o: "spec" if o.spec else "", False),
    ("threshold", _pacing_cell("threshold"), False),
    ("backoff", _backoff, False),
    ("cap", _pacing_cell("cap"), True),
    ("tick_limit", _pacing_cell("tick_limit"), True),
    ("starts", lambda o: f"{o.consumers_started:,}", True),
    ("nudges", lambda o: f"{o.nudges:,}", True),
    ("wait p50", lambda o: human(o.wait.p50), True),
    ("p99", _p99, True),
    ("max", lambda o: human(o.wait.max), True),
    ("pending", lambda o: f"{o.pending:,}", True),
)


def _order(o: Outcome) -> tuple[bool, int, float]:
    """The front first, then the rest; each by consumer starts, then p99 wait."""
    return (not o.on_front, o.consumers_started, o.p99_s if o.p99_s is not None else 1e300)


def format_search(outcomes: Sequence[Outcome]) -> str:
    """One row per policy, the front first, and a line on where the spec's policy stands."""
    rows = sorted(outcomes, key=_order)
    header = [title for title, _, _ in _COLUMNS]
    body = [[cell(o) for _, cell, _ in _COLUMNS] for o in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for row in [header, *body]:
        cells = (
            text.rjust(width) if right else text.ljust(width)
            for text, width, (_, _, right) in zip(row, widths, _COLUMNS, strict=True)
        )
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    lines.append(_verdict(outcomes))
    return "\n".join(lines)


def _verdict(outcomes: Sequence[Outcome]) -> str:
    """How many policies ran, how many are on the front, and where the spec's policy is."""
    front = [o for o in outcomes if o.on_front]
    spec = next(o for o in outcomes if o.spec)
    head = f"{len(outcomes)} policies, {len(front)} on the front (fewest starts for a p99 wait)"
    if spec.on_front:
        return f"{head}; the spec's policy is on the front."
    if spec.p99_s is None:
        return f"{head}; the spec's policy left more than 1% of todos unclaimed."
    better = [
        o
        for o in front
        if o.p99_s is not None
        and o.consumers_started <= spec.consumers_started
        and o.p99_s <= spec.p99_s
    ]
    return (
        f"{head}; {len(better)} on the front start no more consumers than the spec's policy "
        "with a p99 wait no longer."
    )


def _json(o: Outcome) -> dict[str, Any]:
    pacing = o.policy.pacing
    assert pacing is not None
    return {
        "policy": o.policy.name,
        "spec": o.spec,
        "front": o.on_front,
        "threshold_s": pacing.threshold.total_seconds(),
        "backoff_s": [step.total_seconds() for step in pacing.backoff],
        "cap": pacing.cap,
        "tick_limit": pacing.tick_limit,
        "consumers_started": o.consumers_started,
        "nudges": o.nudges,
        "claims": o.claims,
        "pending": o.pending,
        "wait_s": {"p50": o.wait.p50, "p90": o.wait.p90, "p99": o.wait.p99, "max": o.wait.max},
        "front_p99_s": o.p99_s,
    }
