"""`stall-nudge status`: "is my queue drained?" for every pair with pending work or a ledger row."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime, timedelta
from typing import Any

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, PacingPolicy, PairStatus, format_duration

from ._common import CliError, add_dsn_argument, open_pool, resolve_dsn
from ._json import dumps


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="answer 'is my queue drained?' for every pair",
        description="List every (endpoint, queue) with pending work or a ledger row: pending "
        "counts, oldest age, nudges, next due, and the sweep's verdict.",
    )
    add_dsn_argument(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per pair")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    lines = asyncio.run(_status(dsn, as_json=args.json))
    for line in lines:
        print(line)
    return 0


async def _status(dsn: str, *, as_json: bool) -> list[str]:
    async with open_pool(dsn, max_size=1) as pool:
        try:
            # Judged on the database's clock, as the sweep judges.
            now, pairs = await PostgresLedger(pool).status(policy=PacingPolicy())
        except LedgerError as exc:
            raise CliError(str(exc), status=1) from None
    if as_json:
        return [dumps(p) for p in pairs]
    return render_table(pairs, now)


_COLUMNS = ("ENDPOINT", "QUEUE", "GATED", "UNGATED", "OLDEST", "NUDGES", "LAST NUDGE", "NEXT DUE")


def render_table(pairs: list[PairStatus], now: datetime) -> list[str]:
    """A fixed-width table, one pair a line, verdict last."""
    if not pairs:
        return ["no pending work and no ledger rows: every queue is drained"]
    rows = [
        (
            p.endpoint_id,
            p.queue,
            str(p.pending_gated),
            str(p.pending_ungated),
            _age(p.oldest_age),
            "-" if p.effective_nudges is None else str(p.effective_nudges),
            "-" if p.last_nudged_at is None else _age(now - p.last_nudged_at) + " ago",
            _due(p.next_due_at, now),
            p.verdict.value,
        )
        for p in pairs
    ]
    header = (*_COLUMNS, "VERDICT")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]


def _age(delta: timedelta | None) -> str:
    return "-" if delta is None else format_duration(delta)


def _due(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "-"
    if at <= now:
        return "now"
    return "in " + _age(at - now)
