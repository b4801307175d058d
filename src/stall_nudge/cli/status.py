"""`stall-nudge status`: "is my queue drained?" for every pair with pending work or a ledger row."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime, timedelta
from typing import Any

from adapters.postgres import PostgresLedger
from stall_core import LedgerError, PacingPolicy, PairStatus, Verdict, format_duration

from .common import ATTENTION, FAILED, OK, CliError, add_dsn_argument, open_pool, resolve_dsn
from .jsonout import dumps, seconds, utc
from .text import printable


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="answer 'is my queue drained?' for every pair",
        description="List every (endpoint, queue) with pending work or a ledger row: pending "
        "counts, oldest age, nudges, next due, and the sweep's verdict.",
    )
    add_dsn_argument(parser)
    parser.add_argument(
        "--json", action="store_true", help='one JSON object: {"at": ..., "pairs": [...]}'
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit {ATTENTION} when a pair needs a person (capped, or no receiver or an "
        f"inactive endpoint with work past the threshold), {OK} otherwise",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    policy = PacingPolicy()
    now, pairs = asyncio.run(_status(dsn, policy))
    lines = [status_json(pairs, now, policy)] if args.json else render_table(pairs, now)
    for line in lines:
        print(line)
    if args.check and any(needs_person(p, policy) for p in pairs):
        return ATTENTION
    return OK


async def _status(dsn: str, policy: PacingPolicy) -> tuple[datetime, list[PairStatus]]:
    async with open_pool(dsn, max_size=1) as pool:
        try:
            # Judged on the database's clock, as the sweep judges.
            return await PostgresLedger(pool).status(policy=policy)
        except LedgerError as exc:
            raise CliError(str(exc), status=FAILED) from None


def needs_person(pair: PairStatus, policy: PacingPolicy) -> bool:
    """Whether the sweep can no longer get this pair's work claimed without a person.

    Capped: woken five times, never claimed. No receiver, or an inactive
    endpoint, with work older than the threshold: nothing will wake it.
    Fresh work on such a pair may still get a hook or a resume in time.
    """
    if pair.verdict is Verdict.CAPPED:
        return True
    stuck = pair.oldest_age is not None and pair.oldest_age > policy.threshold
    return stuck and pair.verdict in {Verdict.NO_RECEIVER, Verdict.ENDPOINT_INACTIVE}


def status_json(pairs: list[PairStatus], now: datetime, policy: PacingPolicy) -> str:
    """The JSON record of `status --json`: the instant judged at and every pair."""
    return dumps(
        {
            "at": utc(now),
            "pairs": [
                {
                    "endpoint_id": p.endpoint_id,
                    "queue": p.queue,
                    "pending_gated": p.pending_gated,
                    "pending_ungated": p.pending_ungated,
                    "oldest_age_s": seconds(p.oldest_age),
                    "effective_nudges": p.effective_nudges,
                    "last_nudged_at": utc(p.last_nudged_at),
                    "next_due_at": utc(p.next_due_at),
                    "verdict": p.verdict.value,
                    "needs_person": needs_person(p, policy),
                }
                for p in pairs
            ],
        }
    )


_COLUMNS = ("ENDPOINT", "QUEUE", "GATED", "UNGATED", "OLDEST", "NUDGES", "LAST NUDGE", "NEXT DUE")


def render_table(pairs: list[PairStatus], now: datetime) -> list[str]:
    """A fixed-width table, one pair a line, verdict last; names with control characters escaped."""
    if not pairs:
        return ["no pending work and no ledger rows: every queue is drained"]
    rows = [
        (
            printable(p.endpoint_id),
            printable(p.queue),
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
