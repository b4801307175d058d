"""`stall-nudge sweep`: the reaper loop as a sidecar, or one tick with --once.

Built by ``stall_nudge.open_reaper``, the entry point embedders use: the same
bounds, start-up check and shutdown deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import stall_nudge

from .common import (
    ATTENTION,
    FAILED,
    OK,
    USAGE,
    CliError,
    add_dsn_argument,
    duration,
    positive_duration,
    resolve_dsn,
    stdout_gone,
)
from .jsonout import dumps, utc

if TYPE_CHECKING:
    from stall_core import TickFailure, TickReport


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run the stall sweep (the reaper loop, or one tick)",
        description="Find stalled (endpoint, queue) pairs and fire one todo.ready with "
        "reason 'stalled' each, paced by the spec's backoff. Stops cleanly on SIGINT/SIGTERM.",
    )
    add_dsn_argument(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help=f"run one tick and wait for its deliveries (retries included); exit {OK} when "
        f"each nudge reached a receiver or was refunded, {FAILED} when the tick failed, "
        f"{ATTENTION} when a nudge reached nobody and its refund failed",
    )
    parser.add_argument(
        "--interval",
        type=positive_duration,
        default=timedelta(seconds=15),
        metavar="DURATION",
        help="time between ticks: 15s, 2m, 1h, 1h30m, or bare seconds (default: 15s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON record per tick on stdout; the loop stops when stdout is closed",
    )
    parser.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="HOST:PORT",
        help="serve /metrics, /healthz, /readyz and the status page / on this address "
        "(e.g. 127.0.0.1:9464; port 0 picks one); it shows queue names: keep it on a "
        "private interface. Needs the metrics extra",
    )
    parser.add_argument(
        "--stop-timeout",
        type=positive_duration,
        default=timedelta(seconds=60),
        metavar="DURATION",
        help="the most a stop on SIGINT/SIGTERM takes: deliveries still retrying are given "
        "up first, then refunds (default: 60s; fit it under your grace period)",
    )
    parser.add_argument(
        "--lookback",
        type=duration,
        default=None,
        metavar="DURATION",
        help="how far before the last tick a usual tick reads the host's claims and arrivals "
        "again, so a transaction still open then is seen (default: 1m)",
    )
    parser.add_argument(
        "--full-pass-interval",
        type=positive_duration,
        default=None,
        metavar="DURATION",
        help="the longest between two ticks that judge every pair: what no timestamp shows "
        "(a delete, a hook re-enabled) is seen within it (default: 5m)",
    )
    parser.add_argument(
        "--history-retention",
        type=positive_duration,
        default=None,
        metavar="DURATION",
        help="how long `stall-nudge history` keeps charges, outcomes and operator actions; "
        "each tick prunes a few older rows (default: 7d)",
    )
    parser.add_argument(
        "--refuse-private",
        action="store_true",
        help="also refuse hooks pointing at loopback, private or any other special-purpose "
        "address IANA lists (multi-tenant deployments); link-local and metadata addresses "
        "are always refused",
    )
    parser.set_defaults(run=run)


def metrics_address(text: str) -> tuple[str, int]:
    """argparse type for --metrics: an explicit ``HOST:PORT`` (``[::1]:9464`` for IPv6)."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port or "[" in host or "]" in host:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with an explicit host, e.g. 127.0.0.1:9464, got {text!r}"
        )
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"the port must be a number from 0 to 65535, got {port!r}")
    return host, int(port)


def run(args: argparse.Namespace) -> int:
    import asyncio

    dsn = resolve_dsn(args)
    if args.metrics is not None:
        if args.once:
            raise CliError("--metrics serves beside the loop; it does not go with --once")
        try:
            import prometheus_client  # noqa: F401 - only whether the extra is installed
        except ImportError:
            raise CliError(
                "--metrics needs prometheus_client: pip install 'stall-nudge[metrics]'",
                status=FAILED,
            ) from None
    return asyncio.run(
        _sweep(
            dsn,
            once=args.once,
            interval=args.interval,
            as_json=args.json,
            refuse_private=args.refuse_private,
            metrics=args.metrics,
            stop_timeout=args.stop_timeout,
            lookback=args.lookback,
            full_pass_interval=args.full_pass_interval,
            history_retention=args.history_retention,
        )
    )


def record(result: TickReport | TickFailure, reaper: stall_nudge.Reaper) -> dict[str, Any]:
    """One tick as the JSON convention has it (docs/operations.md): the same keys every time."""
    import attrs

    from stall_core import TickFailure

    stats = attrs.asdict(reaper.stats)
    common = {
        "tick": result.tick,
        "duration_s": result.duration_s,
        "dispatch": stats,
        "refunded_since_start": reaper.refunded,
    }
    if isinstance(result, TickFailure):
        return {
            **common,
            "outcome": "failed",
            "error": result.error,
            "at": None,
            "kind": None,
            "judged": 0,
            "charged": [],
            "cleared": [],
            "queued": 0,
            "refused": 0,
        }
    return {
        **common,
        "outcome": "skipped" if result.skipped else "ok",
        "error": None,
        "at": utc(result.now),
        "kind": result.kind,
        "judged": result.judged,
        "charged": [
            {
                "endpoint_id": n.endpoint_id,
                "queue": n.queue,
                "nudge": n.number,
                "todo_id": n.todo.id,
                "todo_created_at": utc(n.todo.created_at),
                "charged_at": utc(n.charged_at),
            }
            for n in result.charged
        ],
        "cleared": [{"endpoint_id": e, "queue": q} for e, q in result.cleared],
        "queued": result.queued,
        "refused": result.refused,
    }


def _summary(report: TickReport, reaper: stall_nudge.Reaper) -> str:
    """The one line `sweep --once` prints without --json; names escaped and cut.

    It names at most the tick limit's nudges, so it stays short whatever
    the names.
    """
    from stall_core import format_seconds, printable

    at = report.now.isoformat(timespec="seconds")
    if report.skipped:
        return f"{at} tick {report.tick}: skipped (another instance holds the tick)"
    woke = ", ".join(
        f"{printable(n.endpoint_id)}/{printable(n.queue)} nudge {n.number} "
        f"(todo {printable(n.todo.id)})"
        for n in report.charged
    )
    stats = reaper.stats
    took = format_seconds(report.duration_s)
    return (
        f"{at} tick {report.tick}: {report.kind} pass judged {report.judged} pair(s), "
        f"charged {len(report.charged)}"
        f"{' [' + woke + ']' if woke else ''}, cleared {len(report.cleared)}, "
        f"queued {report.queued}, refused {report.refused}; "
        f"hooks delivered {stats.delivered}, failed {stats.failed}, dropped {stats.dropped}; "
        f"refunded {reaper.refunded} ({took})"
    )


async def _sweep(
    dsn: str,
    *,
    once: bool,
    interval: timedelta,
    as_json: bool,
    refuse_private: bool,
    metrics: tuple[str, int] | None,
    stop_timeout: timedelta,
    lookback: timedelta | None,
    full_pass_interval: timedelta | None,
    history_retention: timedelta | None,
) -> int:
    from adapters.postgres import HISTORY_RETENTION, LOOKBACK
    from stall_core import FULL_PASS_INTERVAL

    try:
        async with stall_nudge.open_reaper(
            dsn,
            refuse_private=refuse_private,
            stop_timeout=stop_timeout.total_seconds(),
            lookback=LOOKBACK if lookback is None else lookback,
            full_pass_interval=full_pass_interval or FULL_PASS_INTERVAL,
            history_retention=history_retention or HISTORY_RETENTION,
        ) as reaper:
            if once:
                return await _once(reaper, as_json=as_json)
            if metrics is None:
                await _loop(reaper, interval=interval, as_json=as_json)
            else:
                await _serving(reaper, metrics, interval=interval, as_json=as_json)
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None
    except stall_nudge.StartupError as exc:
        raise CliError(str(exc), status=FAILED) from None
    return OK


async def _serving(
    reaper: stall_nudge.Reaper, address: tuple[str, int], *, interval: timedelta, as_json: bool
) -> None:
    """The loop with the ops port beside it, open for as long as the loop runs."""
    from stall_nudge.ops_port import serve_ops_port  # the metrics extra, only when asked for

    host, port = address
    async with contextlib.AsyncExitStack() as stack:
        try:
            url = await stack.enter_async_context(
                serve_ops_port(reaper, host=host, port=port, refresh=interval.total_seconds())
            )
        except OSError as exc:
            raise CliError(
                f"--metrics: cannot listen on {host}:{port}: {exc.strerror or exc}", status=FAILED
            ) from None
        logging.getLogger("stall_nudge").info(
            "serving /metrics, /healthz, /readyz and the status page on %s/", url
        )
        await _loop(reaper, interval=interval, as_json=as_json)


async def _once(reaper: stall_nudge.Reaper, *, as_json: bool) -> int:
    import asyncio

    from stall_core import LedgerError, TickFailure
    from stall_nudge._text import line

    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        report = await reaper.tick()
    except LedgerError as exc:
        failure = TickFailure(tick=1, error=str(exc), duration_s=loop.time() - started)
        if as_json:
            print(dumps(record(failure, reaper)), flush=True)
        print(f"stall-nudge: error: tick 1 failed: {line(str(exc))}", file=sys.stderr)
        return FAILED
    await reaper.settle()
    print(dumps(record(report, reaper)) if as_json else _summary(report, reaper), flush=True)
    return ATTENTION if reaper.unrefunded else OK


async def _loop(reaper: stall_nudge.Reaper, *, interval: timedelta, as_json: bool) -> None:
    import asyncio

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def stopping() -> None:
        stop.set()
        # A second signal during shutdown gets the default behaviour: quit now.
        for sig in signals:
            loop.remove_signal_handler(sig)

    for sig in signals:
        loop.add_signal_handler(sig, stopping)

    def emit(result: TickReport | TickFailure) -> None:
        print(dumps(record(result, reaper)), flush=True)
        if stdout_gone() and not stop.is_set():  # `sweep --json | head -1`: the reader is done
            logging.getLogger("stall_nudge").info("stdout was closed: stopping")
            stop.set()

    # Without --json the sweeper's own log records are the sidecar's output (stderr).
    await reaper.run(
        interval=interval,
        stop=stop,
        on_report=emit if as_json else None,
        on_error=emit if as_json else None,
    )
