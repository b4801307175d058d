"""``stall-nudge simulate``: the pacing simulator, policies side by side.

Each option is parsed by its argparse ``type`` (durations by the core's
``parse_duration``), so a bad value is one line naming the option; what
depends on several options (a ``--compare`` name a ``--policy`` defines,
the scenario's own checks) is checked once they are all read. The plot is
the simulator's own (``stall_sim.plot``).

A run is a synthetic scenario, or with ``--replay`` a host's own history
(a file, or the database read as a guest by ``adapters.postgres.read_history``,
glued here to ``stall_sim.history``). Either way ``run`` builds a board
(``_Board``), the policies to compare, and runs each policy on the board;
fault flags apply to both. The dispatcher's retry numbers come from
``adapters.http.DeliveryPolicy``, never restated.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from . import simulate_sweep
from .common import CliError, add_dsn_argument, duration, positive_duration
from .jsonout import dumps
from .simulate_common import KEYS, human, pacing_value, write_plot

if TYPE_CHECKING:
    from stall_sim import ConsumerKind, Scenario, SimPolicy, SimResult
    from stall_sim.faults import Faults, ReceiverOutage, Window

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


def window(text: str) -> Window:
    """argparse type for FROM-UNTIL, two durations after the run's start (``1h-3h``)."""
    from stall_sim.faults import Window

    start, dash, end = text.partition("-")
    if not dash:
        raise argparse.ArgumentTypeError(f"expected FROM-UNTIL, e.g. 1h-3h, got {text!r}")
    try:
        return Window(start=duration(start.strip()), end=duration(end.strip()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def receiver_outage(text: str) -> ReceiverOutage:
    """argparse type for ENDPOINT:FROM-UNTIL[:hang]: one endpoint's hooks down in a window."""
    from stall_sim.faults import Hang, ReceiverOutage

    endpoint_id, _, rest = text.partition(":")
    span, _, mode = rest.partition(":")
    if not endpoint_id or not span:
        raise argparse.ArgumentTypeError(
            f"expected ENDPOINT:FROM-UNTIL[:fail|:hang], e.g. e0:1h-3h, got {text!r}"
        )
    try:
        hang = Hang(mode or "fail")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fail or hang, got {mode!r}") from None
    return ReceiverOutage(endpoint_id=endpoint_id, window=window(span), mode=hang)


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
    replay = p.add_argument_group(
        "replay",
        "replay a host's own history instead of a synthetic board: from a JSON lines or CSV "
        "file (.csv), or with no FILE from the database at --dsn, read-only",
    )
    replay.add_argument(
        "--replay",
        nargs="?",
        const="",
        metavar="FILE",
        help="replay FILE, or the database's last --since with no FILE",
    )
    add_dsn_argument(replay)
    replay.add_argument(
        "--since",
        type=positive_duration,
        default=timedelta(days=7),
        help="how far back the database replay reads (default 7d)",
    )
    replay.add_argument(
        "--nudges",
        metavar="FILE",
        help="nudges the real sweep sent, to compare with: a `sweep --json` log",
    )
    replay.add_argument(
        "--wake-window",
        type=positive_duration,
        default=timedelta(minutes=1),
        help="a claim this soon after a wake followed it (default 1m)",
    )
    faults = p.add_argument_group("faults", "each applies to a synthetic run and a replay alike")
    faults.add_argument(
        "--receiver-outage",
        type=receiver_outage,
        action="append",
        default=[],
        metavar="ENDPOINT:FROM-UNTIL[:hang]",
        help="the endpoint's hooks fail (or hang) from FROM to UNTIL after the start; repeatable",
    )
    faults.add_argument(
        "--sweeper-outage",
        type=window,
        action="append",
        default=[],
        metavar="FROM-UNTIL",
        help="no sweep tick from FROM to UNTIL after the start; repeatable",
    )
    faults.add_argument(
        "--lost-creation-wakes",
        type=share,
        default=0.0,
        metavar="SHARE",
        help="share of creation wakes dropped before any request (default 0)",
    )
    add("--seed", type=integer(), default=1, help="random seed (default 1)")
    add("--json", action="store_true", help="print the results as JSON")
    add(
        "--plot",
        metavar="FILE.png",
        help="draw nudges, consumer starts, backlog and waits over time (needs matplotlib)",
    )
    simulate_sweep.add_sweep_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the board and policies from ``args``, simulate each, report."""
    board = _replay_board(args) if args.replay is not None else _synthetic_board(args)
    if args.sweep:
        return simulate_sweep.run(
            args, board.run, heading=board.describe, board_json=board.as_json()
        )
    customs = dict(parse_policy(spec) for spec in args.policy)
    policies = [_named_policy(name, customs) for name in _names(args.compare)]
    results = [board.run(policy) for policy in policies]
    if args.plot:
        _plot(args.plot, board.scenario, results, board.heading)
    if args.json:
        print(dumps({**board.as_json(), "results": [_result_json(r) for r in results]}))
    else:
        print(board.describe)
        for line in board.notes:
            print(line)
        print()
        print(format_table(results, faults=board.faults.any))
        for line in board.after(results) if board.after else ():
            print(line)
        if args.plot:
            print(f"\nplot written to {args.plot}")
    return 0


class _Board(NamedTuple):
    """What every policy runs on: a synthetic scenario or a prepared history, and the faults.

    A NamedTuple, not an attrs value: this module loads at every start.
    """

    scenario: Scenario
    faults: Faults
    #: Runs one policy.
    run: Callable[[SimPolicy], SimResult]
    describe: str
    heading: str
    as_json: Callable[[], dict[str, Any]]
    notes: tuple[str, ...] = ()
    #: Lines printed after the table, from the results; None: none.
    after: Callable[[Sequence[SimResult]], list[str]] | None = None


def _faults(args: argparse.Namespace) -> Faults:
    from adapters.http import DeliveryPolicy
    from stall_sim.faults import Delivery, Faults

    dispatcher = DeliveryPolicy()
    try:
        return Faults(
            receiver_outages=tuple(args.receiver_outage),
            sweeper_outages=tuple(args.sweeper_outage),
            lost_creation_wakes=args.lost_creation_wakes,
            delivery=Delivery(
                retry_delays=dispatcher.retry_delays,
                timeout=dispatcher.timeout,
                disable_after=dispatcher.disable_after,
            ),
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _faults_json(faults: Faults) -> dict[str, Any]:
    return {
        "receiver_outages": [
            {
                "endpoint_id": o.endpoint_id,
                "from_s": o.window.start.total_seconds(),
                "until_s": o.window.end.total_seconds(),
                "mode": o.mode.value,
            }
            for o in faults.receiver_outages
        ],
        "sweeper_outages": [
            {"from_s": w.start.total_seconds(), "until_s": w.end.total_seconds()}
            for w in faults.sweeper_outages
        ],
        "lost_creation_wakes": faults.lost_creation_wakes,
    }


def _describe_faults(faults: Faults) -> str:
    from stall_core import format_duration

    parts = [
        f"{o.endpoint_id} receiver {'hangs' if o.mode.value == 'hang' else 'fails'} "
        f"{format_duration(o.window.start)}-{format_duration(o.window.end)}"
        for o in faults.receiver_outages
    ]
    parts += [
        f"sweeper down {format_duration(w.start)}-{format_duration(w.end)}"
        for w in faults.sweeper_outages
    ]
    if faults.lost_creation_wakes:
        parts.append(f"creation wakes dropped {faults.lost_creation_wakes:g}")
    return "faults: " + ", ".join(parts) if parts else ""


def _synthetic_board(args: argparse.Namespace) -> _Board:
    import random

    import attrs

    from stall_sim.plot import SAMPLES
    from stall_sim.search import Synthetic

    scenario = _scenario(args)
    if args.sweep:  # a search reads totals and percentiles only: no series to sample
        scenario = attrs.evolve(scenario, samples=1)
    elif args.plot:  # a plot may zoom in on the first minutes of a long run: sample finely
        scenario = attrs.evolve(scenario, samples=SAMPLES)
    faults = _faults(args)
    described = _describe(scenario, args.seed)
    if faults.any:
        described += "\n" + _describe_faults(faults)
    return _Board(
        scenario=scenario,
        faults=faults,
        run=Synthetic(
            scenario=scenario,
            generator=random.Random,
            workload_seed=f"{args.seed}:workload",
            chance_seed=f"{args.seed}:chance",
            faults=faults,
        ),
        describe=described,
        heading=_describe(scenario, seed=None),
        as_json=lambda: {
            **_as_json(scenario, args.seed),
            **({"faults": _faults_json(faults)} if faults.any else {}),
        },
    )


# -- replay --------------------------------------------------------------------------


def _replay_board(args: argparse.Namespace) -> _Board:
    import random

    from stall_core import format_duration
    from stall_sim.plot import SAMPLES
    from stall_sim.replay import compare_nudges, prepare
    from stall_sim.search import Replayed

    history, source = _history(args)
    try:
        prepared = prepare(history, tick=args.tick, wake_window=args.wake_window)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    faults = _faults(args)
    samples = 1 if args.sweep else SAMPLES if args.plot else 400
    by_creation, by_nudge, pulls = prepared.claims_by_wake
    described = (
        f"replay of {source}: {prepared.start.isoformat()} + {format_duration(prepared.duration)}, "
        f"{len(prepared.names):,} todos on {len(prepared.keys):,} pairs, tick "
        f"{format_duration(prepared.tick)}, seed {args.seed}\n"
        f"claims: {by_creation:,} after a creation wake, {by_nudge:,} after a nudge (within "
        f"{format_duration(args.wake_window)}), {pulls:,} pulls kept at their instant"
    )
    if faults.any:
        described += "\n" + _describe_faults(faults)

    one = Replayed(
        prepared=prepared,
        generator=random.Random,
        chance_seed=f"{args.seed}:chance",
        faults=faults,
        record=prepared.recorded is not None and not args.sweep,
        samples=samples,
    )

    def after(results: Sequence[SimResult]) -> list[str]:
        lines = []
        for result in results:
            match = compare_nudges(prepared, result)
            if match is not None and result.policy == "default":
                lines.append(
                    f"\ndefault reproduced {match.reproduced:,} of {match.recorded:,} recorded "
                    f"nudges (same pair, number and todo, within one tick); "
                    f"{match.unrecorded:,} replayed nudges have no record"
                )
        return lines

    def as_json() -> dict[str, Any]:
        return {
            "replay": {
                "source": source,
                "start": prepared.start.isoformat(),
                "duration_s": prepared.duration.total_seconds(),
                "tick_s": prepared.tick.total_seconds(),
                "todos": len(prepared.names),
                "pairs": len(prepared.keys),
                "claims_after_creation": by_creation,
                "claims_after_nudge": by_nudge,
                "pulls": pulls,
                "notes": list(prepared.notes),
                "seed": args.seed,
            },
            **({"faults": _faults_json(faults)} if faults.any else {}),
        }

    from stall_sim.replay import scenario_of

    return _Board(
        scenario=scenario_of(prepared, samples),
        faults=faults,
        run=one,
        describe=described,
        heading=described.splitlines()[0],
        notes=tuple(f"- {note}" for note in prepared.notes),
        as_json=as_json,
        after=after,
    )


def _history(args: argparse.Namespace) -> tuple[Any, str]:
    """The history to replay and where it came from, nudge records merged in."""
    import attrs

    from stall_sim.history import (
        HistoryError,
        parse_csv,
        parse_jsonl,
        parse_nudges,
        parse_records,
    )

    try:
        if args.replay:
            lines = _lines("--replay", args.replay)
            parse = parse_csv if args.replay.lower().endswith(".csv") else parse_jsonl
            history, source = parse(lines, source=args.replay), args.replay
        else:
            history, source = (
                parse_records(_database_records(args), source="the database"),
                ("the database"),
            )
        if args.nudges:
            logged = parse_nudges(_lines("--nudges", args.nudges), source=args.nudges)
            history = attrs.evolve(history, nudges=(*(history.nudges or ()), *logged))
    except HistoryError as exc:
        raise CliError(str(exc)) from None
    return history, source


def _lines(option: str, path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().splitlines()
    except OSError as exc:
        raise CliError(f"{option}: cannot read {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{option}: {path!r} is not UTF-8 text") from None


def _database_records(args: argparse.Namespace) -> list[tuple[int, dict[str, Any]]]:
    """The history's records, read from --dsn in one READ ONLY transaction."""
    import asyncio

    from .common import open_parts, resolve_dsn

    dsn = resolve_dsn(args)

    async def read() -> list[dict[str, Any]]:
        from adapters.postgres import read_history
        from stall_core import LedgerError

        async with open_parts(dsn, max_size=1) as parts, parts.pool.acquire() as conn:
            try:
                return await read_history(conn, since=args.since)
            except LedgerError as exc:
                raise CliError(str(exc), status=1) from None

    return list(enumerate(asyncio.run(read()), start=1))


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
        if not eq or not value:
            raise CliError(f"--policy {name}: expected key=value, got {item.strip()!r}")
        if key not in KEYS:
            raise CliError(f"--policy {name}: unknown key {key!r} ({', '.join(KEYS)})")
        fields[key] = _value(f"--policy {name}", partial(pacing_value, key), value)
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


def _plot(path: str, scenario: Scenario, results: Sequence[SimResult], heading: str) -> None:
    from stall_sim.plot import plot

    write_plot(path, partial(plot, path, scenario, results, heading=heading))


# -- output --------------------------------------------------------------------


_ROWS: tuple[tuple[str, Callable[[SimResult], str]], ...] = (
    ("todos created", lambda r: f"{r.todos:,}"),
    ("wakes sent", lambda r: f"{r.wakes_sent:,}"),
    ("  creation wakes", lambda r: f"{r.creation_wakes:,}"),
    ("  nudges", lambda r: f"{r.nudges:,}"),
    ("  lost", lambda r: f"{r.wakes_lost:,}"),
    ("  dropped", lambda r: f"{r.creation_wakes_dropped:,}"),
    ("  failed", lambda r: f"{r.wakes_failed:,}"),
    ("  refunded", lambda r: f"{r.refunds:,}"),
    ("hooks disabled", lambda r: f"{r.hooks_disabled:,}"),
    ("consumers started", lambda r: f"{r.consumers_started:,}"),
    ("claims", lambda r: f"{r.claims:,}"),
    ("wakes per claim", lambda r: "-" if r.wakes_per_claim is None else f"{r.wakes_per_claim:.2f}"),
    ("wait p50", lambda r: human(r.wait.p50)),
    ("wait p90", lambda r: human(r.wait.p90)),
    ("wait p99", lambda r: human(r.wait.p99)),
    ("wait max", lambda r: human(r.wait.max)),
    ("pending at end", lambda r: f"{r.pending:,}"),
    ("  on pairs", lambda r: f"{r.pending_pairs:,}"),
    ("  pairs capped", lambda r: f"{r.capped_pairs:,}"),
    ("  oldest", lambda r: human(r.oldest_pending_s)),
    ("max started/tick", lambda r: f"{r.max_started_in_tick:,}"),
    ("ticks held back", lambda r: f"{r.held_back_ticks:,}"),
)


#: The rows only a run with faults shows.
_FAULT_ROWS = ("  dropped", "  failed", "  refunded", "hooks disabled")


def format_table(results: Sequence[SimResult], *, faults: bool = False) -> str:
    """The metrics as rows, a column per policy (the spec's marked); fault rows when ``faults``."""
    header = ["", *(f"{r.policy} (spec)" if r.spec else r.policy for r in results)]
    rows = [(label, cell) for label, cell in _ROWS if faults or label not in _FAULT_ROWS]
    body = [[label, *(cell(r) for r in results)] for label, cell in rows]
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
        f"{human(scenario.duration.total_seconds())}, "
        f"tick {human(scenario.tick.total_seconds())}, arrivals {shape} per queue, "
        f"backlog {scenario.backlog}, unverified {scenario.unverified_share:g}, "
        f"hookless {scenario.hookless_share:g}, consumer {consumer}, "
        f"latency {human(c.latency.total_seconds())}, service "
        f"{human(c.service.total_seconds())}, wake loss {scenario.wake_loss:g}"
        + ("" if seed is None else f", seed {seed}")
    )


def _as_json(scenario: Scenario, seed: int) -> dict[str, Any]:
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
    }


def _result_json(r: SimResult) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "spec": r.spec,
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
        "creation_wakes_dropped": r.creation_wakes_dropped,
        "wakes_failed": r.wakes_failed,
        "refunds": r.refunds,
        "hooks_disabled": r.hooks_disabled,
    }
