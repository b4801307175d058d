"""The simulator's results drawn side by side: nudges, consumer starts, backlog and waits.

matplotlib is an optional extra (``stall-nudge[plot]``), imported only when
a plot is drawn, so the simulator itself needs nothing beyond the core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stall_core import format_seconds

from .result import Series, SimResult
from .scenario import Scenario

__all__ = ["SAMPLES", "plot"]

#: Samples of each series a plotted run takes: a plot may zoom in on the first minutes.
SAMPLES = 4_000

#: Dashes per policy: policies often coincide, so they differ by dash as well as colour.
_DASHES = ("-", "--", ":", "-.")


def plot(path: str, scenario: Scenario, results: Sequence[SimResult], *, heading: str) -> None:
    """Draw what the policies differ on (nudges, consumer starts, backlog, waits) into ``path``.

    ``heading`` describes the scenario above the four panels. Raises
    ImportError without matplotlib (the ``plot`` extra), OSError when
    ``path`` cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        settled, run = format_seconds(settled_s), format_seconds(run_s)
        xlabel += f" (nothing changes after {settled}; the run lasts {run})"
    panels: tuple[tuple[Any, str, str, Callable[[SimResult], Series]], ...] = (
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
    fig.suptitle(heading, fontsize=8, wrap=True)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def _settled_at(series: Series) -> float:
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
