"""``history``: what the sweep charged, how each delivery ended, and what operators did."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .common import OK, CliError, add_dsn_argument, duration

if TYPE_CHECKING:
    from datetime import datetime

    from stall_core import HistoryEntry

__all__ = ["history_json", "history_lines", "register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history",
        help="list charges, their outcomes and operators' actions, newest first",
        description="Every charge with its outcome (delivered; refused, gave-up or "
        "hook-disabled, each refunded, with why) and every silence, unsilence, reset and "
        "nudge (who and why), newest first; kept 7 days by default (open_reaper's "
        "history_retention).",
    )
    parser.add_argument("endpoint", metavar="ENDPOINT", nargs="?", help="only this endpoint")
    parser.add_argument("queue", metavar="QUEUE", nargs="?", help="only this queue")
    parser.add_argument(
        "--since", type=duration, default="1d", help="how far back, e.g. 1h, 1d (default: 1d)"
    )
    parser.add_argument("--limit", type=int, default=1000, help="at most this many (1000)")
    parser.add_argument("--json", action="store_true", help='one JSON object: {"entries": [...]}')
    add_dsn_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .operate import on_reaper

    if args.limit < 1:
        raise CliError(f"--limit must be 1 or more, got {args.limit}")
    entries = on_reaper(
        args,
        lambda reaper: reaper.history(
            endpoint_id=args.endpoint, queue=args.queue, since=args.since, limit=args.limit
        ),
    )
    for line in [history_json(entries)] if args.json else history_lines(entries):
        print(line)
    return OK


def _when(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def history_json(entries: tuple[HistoryEntry, ...]) -> str:
    """The entries as one JSON object, every value whole."""
    import json

    rows = [
        {
            "at": e.at.isoformat(),
            "endpoint_id": e.endpoint_id,
            "queue": e.queue,
            "event": e.event,
            "nudge": e.nudge,
            "todo_id": e.todo_id,
            "outcome": e.outcome,
            "detail": e.detail,
            "by": e.by,
            "until": _when(e.until),
            "settled_at": _when(e.settled_at),
        }
        for e in entries
    ]
    return json.dumps({"entries": rows}, ensure_ascii=False)


def history_lines(entries: tuple[HistoryEntry, ...]) -> list[str]:
    """A table, names escaped and cut as ``status`` shows them."""
    from stall_core import printable, printable_text

    if not entries:
        return ["no history in that window"]
    lines = [f"{'AT':<20} {'ENDPOINT':<20} {'QUEUE':<16} {'EVENT':<10} WHAT"]
    for e in entries:
        if e.event == "charged":
            what = f"nudge {e.nudge} todo {printable(e.todo_id or '')}: {e.outcome or 'in flight'}"
        else:
            what = f"by {printable(e.by or '')}"
            if e.until is not None:
                what += f" until {e.until.isoformat(timespec='seconds')}"
        if e.detail:
            what += f" ({printable_text(e.detail)})"
        queue = "*" if e.queue is None else printable(e.queue)
        at = e.at.isoformat(timespec="seconds")[:19]
        lines.append(f"{at:<20} {printable(e.endpoint_id):<20} {queue:<16} {e.event:<10} {what}")
    return lines
