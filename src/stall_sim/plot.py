"""The simulator's results drawn to be read at a glance: policies side by side, and a search.

``plot`` draws compared policies in four panels (nudges, consumer starts,
pending todos, waits); ``plot_front`` draws a policy search's consumer
starts against p99 wait. Policies whose series are equal on a panel are
drawn once there and labelled together (``default = fixed-5m``), since
lines drawn on top of each other read as one policy. Each figure has a
one-line caption saying what it shows.

matplotlib is an optional extra (``stall-nudge[plot]``), imported only when
a plot is drawn, so the simulator itself needs nothing beyond the core; the
helpers that decide what to draw need no matplotlib and are tested alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from stall_core import format_duration, format_seconds

from .result import Series, SimResult
from .scenario import Scenario

if TYPE_CHECKING:
    from .search import Outcome

__all__ = [
    "NEAR",
    "SAMPLES",
    "WAIT_FLOOR_S",
    "bin_width",
    "binned_max",
    "coinciding",
    "log_counts",
    "near_counts",
    "near_waits",
    "panel_groups",
    "plot",
    "plot_front",
    "same_on_every_panel",
]

_T = TypeVar("_T")

#: Samples of each series a plotted run takes: a plot may zoom in on the first minutes.
SAMPLES = 4_000

#: Lines closer than this share of their panel's height (of its width, for waits) at every
#: point are drawn as one: apart, they would read as one line drawn over another.
NEAR = 0.01

#: Waits shorter than this are drawn at it (a log axis has no 0).
WAIT_FLOOR_S = 0.1

#: Dashes per line: a colour-blind reader tells lines apart by dash as well as colour.
_DASHES = ("-", "--", ":", "-.")

#: Widths a pending-todos bin may take, in seconds: each a span a person names.
_BIN_WIDTHS_S = (
    1,
    5,
    10,
    15,
    30,
    60,
    2 * 60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    3_600,
    2 * 3_600,
    3 * 3_600,
    6 * 3_600,
    12 * 3_600,
    86_400,
)

#: Named durations (seconds) a wait axis may mark.
_DURATION_TICKS_S = (
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    2 * 60,
    5 * 60,
    10 * 60,
    20 * 60,
    30 * 60,
    3_600,
    2 * 3_600,
    6 * 3_600,
    12 * 3_600,
    86_400,
    2 * 86_400,
    7 * 86_400,
)

#: At most this many bins across the pending-todos panel: a step a person can follow.
_MAX_BINS = 120


def coinciding(values: Sequence[_T], close: Callable[[_T, _T], bool]) -> list[list[int]]:
    """Indices of ``values`` in groups drawn as one line: each value joins the first group
    whose first member it is ``close`` to. Groups and members keep their order."""
    groups: list[list[int]] = []
    for i, value in enumerate(values):
        for group in groups:
            if close(values[group[0]], value):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def log_counts(values: Sequence[int]) -> bool:
    """Whether a count axis is logarithmic above 10: the policies differ 100-fold or more."""
    top = max(values, default=0)
    smallest = min((v for v in values if v > 0), default=0)
    return bool(smallest) and top >= 100 * smallest


def near_counts(values: Sequence[int]) -> Callable[[Series, Series], bool]:
    """Whether two count series on an axis for ``values`` (each series' top) are drawn less
    than ``NEAR`` of the axis' height apart at every sample."""
    top = max(values, default=0)

    def height(v: float) -> float:  # symlog, linear up to 10 (``_count_axis``)
        return v / 10 if v <= 10 else 1 + math.log10(v / 10)

    log = log_counts(values)
    span = (height(top) if log else top) or 1

    def close(a: Series, b: Series) -> bool:
        if len(a) != len(b):
            return False
        if log:
            return all(
                abs(height(x) - height(y)) <= NEAR * span
                for (_, x), (_, y) in zip(a, b, strict=True)
            )
        return all(abs(x - y) <= NEAR * span for (_, x), (_, y) in zip(a, b, strict=True))

    return close


def near_waits(
    floor: float, longest: float
) -> Callable[[tuple[float, ...], tuple[float, ...]], bool]:
    """Whether two wait distributions (whole percentiles, seconds) on a log axis from ``floor``
    to ``longest`` are drawn less than ``NEAR`` of its width apart at every percentile."""
    span = math.log10(max(longest, floor * 10) / floor)

    def close(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        if len(a) != len(b):
            return False
        return all(
            abs(math.log10(max(x, floor) / max(y, floor))) <= NEAR * span
            for x, y in zip(a, b, strict=True)
        )

    return close


def same_on_every_panel(
    results: Sequence[SimResult], width_s: float
) -> list[tuple[list[str], bool]]:
    """Policies drawn as one line on every panel (groups of two or more), and whether their
    series are equal throughout, not only near."""
    panels = panel_groups(results, width_s)
    together: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(results)):
        where = tuple(next(g for g, group in enumerate(p) if i in group) for p in panels)
        together.setdefault(where, []).append(i)
    return [
        (
            [results[i].policy for i in members],
            all(_series(results[i]) == _series(results[members[0]]) for i in members),
        )
        for members in together.values()
        if len(members) > 1
    ]


def _series(r: SimResult) -> tuple[Series | tuple[float, ...], ...]:
    return (r.nudges_over_time, r.started_over_time, r.backlog, r.wait_percentiles)


def panel_groups(results: Sequence[SimResult], width_s: float) -> list[list[list[int]]]:
    """For each panel (nudges, starts, pending binned by ``width_s``, waits), the policies
    drawn as one line there."""
    groups = []
    for series in (
        [r.nudges_over_time for r in results],
        [r.started_over_time for r in results],
        [tuple(binned_max(r.backlog, width_s)) for r in results],
    ):
        groups.append(coinciding(series, near_counts([max(n for _, n in s) for s in series])))
    longest = max((r.wait.max or 0.0 for r in results), default=0.0)
    waits = [r.wait_percentiles for r in results]
    groups.append(coinciding(waits, near_waits(WAIT_FLOOR_S, longest)))
    return groups


def bin_width(shown_s: float, sample_step_s: float) -> float:
    """The narrowest named span that splits ``shown_s`` into at most ``_MAX_BINS`` bins, and
    holds at least one sample."""
    for width in _BIN_WIDTHS_S:
        if width >= sample_step_s and shown_s / width <= _MAX_BINS:
            return float(width)
    return float(_BIN_WIDTHS_S[-1])


def binned_max(series: Series, width_s: float) -> list[tuple[float, int]]:
    """The most of ``series`` in each ``width_s`` bin from 0: (bin start, max), in order."""
    bins: dict[int, int] = {}
    for at, value in series:
        k = int(at // width_s)
        bins[k] = max(bins.get(k, value), value)
    return [(k * width_s, value) for k, value in sorted(bins.items())]


def plot(
    path: str,
    scenario: Scenario,
    results: Sequence[SimResult],
    *,
    heading: str,
    caption: str | None = None,
) -> None:
    """Draw what the policies differ on (nudges, consumer starts, backlog, waits) into ``path``.

    ``heading`` describes the scenario above the four panels; ``caption``,
    one line below them, says what they show (a default one is written).
    Raises ImportError without matplotlib (the ``plot`` extra), OSError when
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
    width_s = bin_width(shown_s, run_s / max(1, scenario.samples - 1))
    panels: tuple[tuple[Any, str, str, Callable[[SimResult], Series]], ...] = (
        (nudges, "Nudges sent (cumulative)", "nudges", lambda r: r.nudges_over_time),
        (
            starts,
            "Consumers started by a wake (cumulative)",
            "starts",
            lambda r: r.started_over_time,
        ),
        (
            backlog,
            f"Pending todos (the most sampled in each {format_seconds(width_s)})",
            "todos",
            lambda r: r.backlog,
        ),
    )
    groups = panel_groups(results, width_s)
    for (ax, title, what, series), panel in zip(panels, groups, strict=False):
        binned = ax is backlog
        for group in panel:
            first = results[group[0]]
            points = binned_max(series(first), width_s) if binned else list(series(first))
            if binned:  # each bin's value holds until the next bin starts
                points.append((points[-1][0] + width_s, points[-1][1]))
            ends = _span([series(results[i])[-1][1] for i in group], lambda n: f"{n:,}")
            ax.plot(
                [t / scale for t, _ in points],
                [n for _, n in points],
                _DASHES[group[0] % len(_DASHES)],
                color=f"C{group[0]}",
                drawstyle="steps-post" if binned else "default",
                label=f"{_names(results, group, series)} ({ends} at the end)",
            )
        _count_axis(ax, [max(n for _, n in series(r)) for r in results], what)
        ax.set(title=title, xlabel=xlabel)
        ax.set_xlim(0, shown_s / scale)
    _wait_panel(waits, results, groups[3])
    for ax in (nudges, starts, backlog, waits):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(heading, fontsize=8, wrap=True)
    _caption_line(fig, caption or _caption(results, width_s))
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(plt, fig, path)


def _names(
    results: Sequence[SimResult], group: Sequence[int], drawn: Callable[[SimResult], object]
) -> str:
    """The policies of one line: ``default = fixed-5m`` when what is ``drawn`` of them is
    equal, ``default ≈ fixed-5m`` when only near."""
    same = all(drawn(results[i]) == drawn(results[group[0]]) for i in group)
    return (" = " if same else " ≈ ").join(_label(results[i]) for i in group)


def _label(result: SimResult) -> str:
    """A policy's name in a legend, the spec's production policy marked."""
    return f"{result.policy} (spec)" if result.spec else result.policy


def _span(values: Sequence[float], show: Callable[[float], str]) -> str:
    """One figure when the values are equal, else the least and the most: ``4m41s-5m23s``."""
    low, high = min(values), max(values)
    return show(low) if low == high else f"{show(low)}-{show(high)}"


def _caption(results: Sequence[SimResult], width_s: float) -> str:
    """The default caption: what the panels show, and which policies are one line throughout."""
    text = (
        "Nudges and consumer starts so far, pending todos, and how long claimed todos "
        "waited (the tail to the right)."
    )
    alike = same_on_every_panel(results, width_s)
    if alike:
        text += " " + "; ".join(
            (" and ".join(names)) + (" coincide" if same else " are within 1%")
            for names, same in alike
        )
        text += " on every panel."
    return text


def _caption_line(fig: Any, text: str) -> None:
    """``text`` in one line under the panels, smaller when it is long, so it stays one line."""
    width = fig.get_figwidth()
    fig.text(0.5, 0.01, text, ha="center", fontsize=min(9.0, 115 * width / max(1, len(text))))


def _save(plt: Any, fig: Any, path: str) -> None:
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


#: The percentiles marked on each wait curve, and their markers.
_MARKED = ((50, "o"), (90, "s"), (99, "D"), (100, "^"))


def _wait_panel(ax: Any, results: Sequence[SimResult], groups: Sequence[Sequence[int]]) -> None:
    """The share of claimed todos that waited longer than each wait, both axes logarithmic.

    The log share stretches the tail: the last percent of todos, out to the
    longest wait, takes as much height as the first 90. p50, p90, p99 and
    the longest wait are marked on each curve.
    """
    floor = WAIT_FLOOR_S
    drawn = False
    for group in groups:
        r = results[group[0]]
        if not r.wait_percentiles:
            continue
        drawn = True
        waits = [max(w, floor) for w in r.wait_percentiles]
        # Percentile q: 100 - q % of todos waited longer. Past p99 the share is
        # below 1%: drawn at 1% out to the longest wait.
        shares = [100.0 - q for q in range(100)] + [1.0]
        colour, dash = f"C{group[0]}", _DASHES[group[0] % len(_DASHES)]
        ax.step(waits, shares, dash, where="post", color=colour)
        for q, marker in _MARKED:
            ax.plot(waits[q], shares[q], marker, color=colour, markersize=5)
        members = [results[i].wait for i in group]
        p50, p99, top = (
            _span([getattr(w, field) or 0.0 for w in members], format_seconds)
            for field in ("p50", "p99", "max")
        )
        ax.plot(
            [],
            [],
            dash,
            color=colour,
            label=f"{_names(results, group, lambda r: r.wait_percentiles)}: "
            f"p50 {p50}, p99 {p99}, max {top}",
        )
    ax.set(
        title="Wait from creation to claim (markers: p50, p90, p99, max)",
        xlabel="wait (log)",
        ylabel="claimed todos that waited longer (log)",
    )
    if drawn:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.7, 140)
        ax.set_yticks([100, 10, 1], ["100%", "10%", "1%"])
        ticks = [0.1, 1, 10, 60, 600, 3_600, 6 * 3_600, 86_400, 7 * 86_400]
        ax.set_xticks(ticks, [format_seconds(t) for t in ticks])
        longest = max(r.wait.max or floor for r in results)
        ax.set_xlim(floor * 0.7, max(longest * 1.5, 10))
        pending = [r for r in results if r.pending]
        if pending:
            left = ", ".join(f"{r.policy} {r.pending:,}" for r in pending)
            ax.text(
                0.98,
                0.97,
                f"still pending at the end: {left}",
                ha="right",
                va="top",
                fontsize=7,
                transform=ax.transAxes,
            )
    else:
        pending_text = ", ".join(f"{r.policy}: {r.pending:,}" for r in results)
        ax.text(
            0.5,
            0.5,
            f"No todo was claimed under any policy.\nStill pending at the end: {pending_text}.",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set(xticks=[], yticks=[], xlabel="", ylabel="")


# -- a policy search -------------------------------------------------------------


def _pacing_label(o: Outcome) -> str:
    """A search policy in a few characters: ``2m 5m/20m/1h/6h cap 5 limit 4``."""
    p = o.policy.pacing
    if p is None:
        return o.policy.name
    backoff = "/".join(format_duration(step) for step in p.backoff)
    return f"{format_duration(p.threshold)} {backoff} cap {p.cap} limit {p.tick_limit}"


def plot_front(path: str, outcomes: Sequence[Outcome], *, heading: str) -> None:
    """Draw a search's consumer starts against p99 wait, its front joined and the spec's marked.

    Raises ImportError without matplotlib, OSError when ``path`` cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig, ax = plt.subplots(figsize=(10, 6.5))
    shown = [o for o in outcomes if o.p99_s is not None]
    # Policies with the same outcome share a point: say how many.
    alike: dict[tuple[int, float], list[Outcome]] = {}
    for o in shown:
        assert o.p99_s is not None
        alike.setdefault((o.consumers_started, o.p99_s), []).append(o)
    ax.scatter(
        [s for s, _ in alike],
        [p for _, p in alike],
        s=[18 + 6 * len(group) for group in alike.values()],
        color="0.6",
        label="a policy (bigger: several alike)",
        zorder=2,
    )
    # One point per outcome on the front, whichever alike policy stands for it.
    points: dict[tuple[int, float], Outcome] = {}
    for o in shown:
        if o.on_front and o.p99_s is not None:
            points.setdefault((o.consumers_started, o.p99_s), o)
    front = sorted(points.items(), key=lambda item: item[0])
    if front:
        ax.plot(
            [s for (s, _), _ in front],
            [p for (_, p), _ in front],
            "o-",
            color="C0",
            drawstyle="steps-post",
            label="Pareto front: no policy starts fewer consumers and waits less",
            zorder=3,
        )
        for (started, p99), o in front:
            group = alike[(started, p99)]
            more = f" (+{len(group) - 1} alike)" if len(group) > 1 else ""
            ax.annotate(
                _pacing_label(o) + more,
                (started, p99),
                xytext=(6, 4),
                textcoords="offset points",
                fontsize=7,
                color="C0",
            )
    spec = next((o for o in outcomes if o.spec), None)
    if spec is not None and spec.p99_s is not None:
        ax.plot(
            spec.consumers_started,
            spec.p99_s,
            "*",
            color="C3",
            markersize=16,
            label=f"the spec's policy ({_pacing_label(spec)})",
            zorder=4,
        )
    p99s = [p for _, p in alike]
    wide = bool(p99s) and max(p99s) >= 10 * min(p99s)
    ax.set(
        title="Consumer starts against p99 wait, one point per policy",
        xlabel="consumers started by a wake over the run",
        ylabel="p99 wait from creation to claim" + (" (log)" if wide else ""),
    )
    if wide:
        ax.set_yscale("log")
        ticks = [t for t in _DURATION_TICKS_S if min(p99s) / 2 <= t <= max(p99s) * 2]
        ax.set_yticks(ticks, [format_seconds(t) for t in ticks])
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    else:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_seconds(max(v, 0))))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.margins(x=0.2, y=0.1)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="best")
    on_front = sum(o.on_front for o in outcomes)
    caption = (
        f"{len(outcomes)} policies on one board, down and to the left is better: "
        f"{on_front} are on the front (at {len(front)} points); the star is the spec's policy"
    )
    unclaimed = len(outcomes) - len(shown)
    caption += (
        f"; {unclaimed} left over 1% of todos unclaimed and are not drawn." if unclaimed else "."
    )
    fig.suptitle(heading, fontsize=8, wrap=True)
    _caption_line(fig, caption)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(plt, fig, path)
