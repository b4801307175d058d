"""`stall-nudge sweep`: the reaper loop as a sidecar, or one tick with --once."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

import attrs

from adapters.http import DispatchStats, HookDispatcher
from adapters.postgres import HOST_TABLES, PostgresHooks, PostgresLedger, missing_tables
from stall_core import LedgerError, Sweeper, TickReport

from ._common import CliError, add_dsn_argument, open_pool, positive_float, resolve_dsn
from ._json import dumps

#: Seconds `close()` gives in-flight deliveries (a retry may be 30 s away) on shutdown.
SHUTDOWN_DEADLINE = 45.0


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
        help="run one tick, wait for its deliveries (retries included), exit 0 (1 if it failed)",
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=15.0,
        metavar="SECONDS",
        help="seconds between ticks (default: 15)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON report per tick")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    return asyncio.run(_sweep(dsn, once=args.once, interval=args.interval, as_json=args.json))


@attrs.frozen(kw_only=True)
class _Line:
    """What one tick printed: the sweep's report and the dispatcher's counters so far."""

    tick: TickReport
    dispatch: DispatchStats


def _print(report: TickReport, stats: DispatchStats, *, as_json: bool) -> None:
    if as_json:
        print(dumps(_Line(tick=report, dispatch=stats)), flush=True)
        return
    woke = ", ".join(
        f"{n.endpoint_id}/{n.queue} nudge {n.number} (todo {n.todo.id})" for n in report.charged
    )
    if report.skipped:
        print(
            f"{report.now.isoformat(timespec='seconds')} tick {report.tick}: skipped "
            "(another instance holds the tick)",
            flush=True,
        )
        return
    print(
        f"{report.now.isoformat(timespec='seconds')} tick {report.tick}: "
        f"charged {len(report.charged)}{' [' + woke + ']' if woke else ''}, "
        f"drained {len(report.drained)}, queued {report.queued}, refused {report.refused}; "
        f"hooks delivered {stats.delivered}, failed {stats.failed}, dropped {stats.dropped} "
        f"({report.duration_s * 1000:.1f} ms)",
        flush=True,
    )


async def _sweep(dsn: str, *, once: bool, interval: float, as_json: bool) -> int:
    async with open_pool(dsn) as pool:
        async with pool.acquire() as conn:
            missing = await missing_tables(conn)
        if any(t in HOST_TABLES for t in missing):
            raise CliError(
                f"host tables missing: {', '.join(t for t in missing if t in HOST_TABLES)} "
                "(for a demo or test database: stall-nudge migrate --host-schema)",
                status=1,
            )
        if missing:
            raise CliError(
                f"stall-nudge's own tables missing: {', '.join(missing)} (run stall-nudge migrate)",
                status=1,
            )
        async with HookDispatcher(hooks=PostgresHooks(pool)) as dispatcher:
            sweeper = Sweeper(ledger=PostgresLedger(pool), wake=dispatcher)
            if once:
                try:
                    report = await sweeper.tick()
                except LedgerError as exc:
                    print(f"stall-nudge: error: {exc}", file=sys.stderr)
                    return 1
                await dispatcher.drain()
                await sweeper.settle()
                _print(report, dispatcher.stats, as_json=as_json)
                return 0
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
            await sweeper.run(
                interval=interval,
                stop=stop,
                on_report=lambda r: _print(r, dispatcher.stats, as_json=as_json),
            )
            await dispatcher.close(deadline=SHUTDOWN_DEADLINE)
            # Abandoned and failed deliveries resolve their receipts: refund them now.
            await sweeper.settle()
    return 0
