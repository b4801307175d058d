"""`stall-nudge status`: "is my queue drained?" for every pair with pending work or a ledger row."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .common import ATTENTION, FAILED, OK, CliError, add_dsn_argument, open_parts, resolve_dsn
from .jsonout import dumps, seconds, utc

if TYPE_CHECKING:
    from adapters.postgres import FleetRecord
    from stall_core import PacingPolicy, PairStatus

#: The widest a table cell gets (stall_core.printable's width for a name): a longer
#: name is cut, whole in --json.
CELL = 64
#: What marks a pair that needs a person, in the first column of the table.
MARK = "!"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="answer 'is my queue drained?' for every pair",
        description="List every (endpoint, queue) with pending work or a ledger row: pending "
        "counts (SENDABLE: todos that pass the sender gate, a verified delivery or none, "
        "which the sweep nudges for; HELD BY GATE: todos of unverified deliveries, claimed by "
        "pull only), oldest age, nudges, next due, its receivers (none, ok, failures in a row, "
        "recovered), and the sweep's verdict (silenced: an operator's silence holds it); under "
        "the table, what a person can do about each pair that asks for it, and each silence "
        "with its end, who set it and why. Pairs that need a person are marked {MARK}; names are "
        f"shown with control and invisible characters escaped and cut to {CELL} characters "
        "(--json has every value whole).",
    )
    add_dsn_argument(parser)
    parser.add_argument(
        "--json", action="store_true", help='one JSON object: {"at": ..., "pairs": [...]}'
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit {ATTENTION} when a pair needs a person (capped; a host value the sweep "
        "cannot read; no receiver or an inactive endpoint, or a receiver failing its "
        f"deliveries, with work past the threshold), {OK} otherwise",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from stall_nudge._pairs import needs_person

    dsn = resolve_dsn(args)
    policy, now, pairs, fleet = asyncio.run(_status(dsn))
    if args.json:
        lines = [status_json(pairs, now, policy, fleet)]
    else:
        lines = [*render_table(pairs, now, policy), *fleet_lines(fleet, now)]
    for line in lines:
        print(line)
    if args.check and any(needs_person(p, policy) for p in pairs):
        return ATTENTION
    return OK


async def _status(dsn: str) -> tuple[PacingPolicy, datetime, list[PairStatus], FleetRecord]:
    """Every pair judged on the database's clock, as the sweep judges, and the fleet's record."""
    from stall_core import LedgerError

    async with open_parts(dsn, max_size=1) as parts:
        try:
            now, pairs = await parts.ledger.status(policy=parts.policy)
            return parts.policy, now, pairs, await parts.ledger.fleet()
        except LedgerError as exc:
            raise CliError(str(exc), status=FAILED) from None


def fleet_lines(fleet: FleetRecord, now: datetime) -> list[str]:
    """The fleet's last sweep (what it judged) and its last full pass, a line each."""
    from stall_core import format_duration
    from stall_nudge._text import age

    swept = "never" if fleet.swept_at is None else age(now - fleet.swept_at) + " ago"
    every = "" if fleet.interval is None else f" (every {format_duration(fleet.interval)})"
    line = f"the fleet last swept {swept}{every}"
    if fleet.last_kind is not None:
        line += f": a {fleet.last_kind} tick that judged {fleet.last_judged} pair(s)"
    lines = [line]
    if fleet.full_pass_at is not None and fleet.full_pass_took is not None:
        lines.append(
            f"its last full pass ran {age(now - fleet.full_pass_at)} ago: "
            f"{fleet.full_pass_pairs} pair(s) in {format_duration(fleet.full_pass_took)}"
        )
    return lines


def status_json(
    pairs: list[PairStatus],
    now: datetime,
    policy: PacingPolicy,
    fleet: FleetRecord | None = None,
) -> str:
    """The JSON record of `status --json`: the instant judged at, the fleet, and every pair."""
    from stall_core import next_step, receiver_health
    from stall_nudge._pairs import needs_person

    return dumps(
        {
            "at": utc(now),
            "fleet": None
            if fleet is None
            else {
                "swept_at": utc(fleet.swept_at),
                "interval_s": seconds(fleet.interval),
                "last_tick_kind": fleet.last_kind,
                "last_tick_judged": fleet.last_judged,
                "full_pass_at": utc(fleet.full_pass_at),
                "full_pass_s": seconds(fleet.full_pass_took),
                "full_pass_pairs": fleet.full_pass_pairs,
            },
            "pairs": [
                {
                    "endpoint_id": p.endpoint_id,
                    "endpoint_name": p.endpoint_name,
                    "queue": p.queue,
                    "sendable": p.sendable,
                    "held_by_gate": p.held_by_gate,
                    "oldest_age_s": seconds(p.oldest_age),
                    "effective_nudges": p.effective_nudges,
                    "last_nudged_at": utc(p.last_nudged_at),
                    "named_todo": p.named_todo,
                    "next_due_at": utc(p.next_due_at),
                    "hook_failures": p.hook_failures,
                    "hooks_disabled": p.hooks_disabled,
                    "receiver": receiver_health(p).value,
                    "last_failure_at": utc(p.last_failure_at),
                    "verdict": p.verdict.value,
                    "needs_person": needs_person(p, policy),
                    "next_step": next_step(p),
                    "silenced_until": utc(p.silenced_until),
                    "silence": None
                    if p.silence is None
                    else {
                        "queue": p.silence.queue,
                        "starts_at": utc(p.silence.starts_at),
                        "until": utc(p.silence.ends_at),
                        "by": p.silence.by,
                        "reason": p.silence.reason,
                    },
                    "last_outcomes": [
                        {
                            "at": utc(e.at),
                            "nudge": e.nudge,
                            "todo_id": e.todo_id,
                            "outcome": e.outcome,
                            "detail": e.detail,
                            "settled_at": utc(e.settled_at),
                        }
                        for e in p.last_outcomes
                    ],
                    "unreadable": None
                    if p.unreadable is None
                    else {
                        "todo_id": p.unreadable.todo_id,
                        "column": p.unreadable.column,
                        "value": p.unreadable.value,
                    },
                }
                for p in pairs
            ],
        }
    )


#: SENDABLE counts the pending todos that pass the sender gate (``sendable``), HELD BY GATE
#: those it keeps out of nudges (``held_by_gate``). Not "verified": a todo with no delivery
#: passes too.
_HEADER = (
    "ENDPOINT",
    "QUEUE",
    "SENDABLE",
    "HELD BY GATE",
    "OLDEST",
    "NUDGES",
    "LAST NUDGE",
    "NEXT DUE",
    "HOOKS",
    "VERDICT",
)


def render_table(
    pairs: list[PairStatus], now: datetime, policy: PacingPolicy | None = None
) -> list[str]:
    """A table, one pair a line, marked when it needs a person; cells escaped and cut to CELL.

    Under it, each pair's next step (``stall_core.next_step``) and any value
    the sweep cannot read, a line each. Ages and waits are in whole seconds.
    ``policy`` is the one the pairs were judged by (default: the default policy).
    """
    from stall_core import PacingPolicy, next_step, printable
    from stall_nudge._pairs import (
        counts_and_times,
        endpoint_label,
        hooks_cell,
        needs_person,
        silence_note,
        unreadable_note,
    )

    if not pairs:
        return ["no pending work and no ledger rows: every queue is drained"]
    policy = PacingPolicy() if policy is None else policy
    marks = [MARK if needs_person(p, policy) else " " for p in pairs]
    rows = [
        tuple(
            printable(cell, CELL)
            for cell in (
                endpoint_label(p),
                p.queue,
                *counts_and_times(p, now),
                hooks_cell(p, now),
                p.verdict.value,
            )
        )
        for p in pairs
    ]
    widths = [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]
    lines = [
        f"{mark} " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for mark, r in zip([" ", *marks], [_HEADER, *rows], strict=True)
    ]
    lines.extend(
        f"{mark} {printable(p.endpoint_id)}/{printable(p.queue)}: {step}"
        for mark, p in zip(marks, pairs, strict=True)
        if (step := next_step(p)) is not None
    )
    lines.extend(  # an operator's choice, not a problem: shown, never marked
        f"  {printable(p.endpoint_id)}/{printable(p.queue)}: {note}"
        for p in pairs
        if (note := silence_note(p, now)) is not None
    )
    notes = [unreadable_note(p) for p in pairs]
    lines.extend(f"{MARK} {note}" for note in notes if note is not None)
    flagged = marks.count(MARK)
    if flagged:
        lines.append(
            f"{MARK} needs a person: {flagged} of {len(pairs)} pair{'s' if len(pairs) > 1 else ''}"
        )
    return lines
