"""``silence``, ``unsilence``, ``reset`` and ``nudge``: what a person on call does to a pair.

Each is recorded in the history with who (``--by``, the OS user by default),
when (the database's clock) and why (``--reason``). A pair the host does
not have is refused: one line, exit 2.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeVar

from .common import (
    ATTENTION,
    COMMAND_TIMEOUT_S,
    FAILED,
    OK,
    USAGE,
    CliError,
    add_dsn_argument,
    positive_duration,
    resolve_dsn,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from stall_nudge import Reaper

__all__ = ["default_by", "on_reaper", "register", "with_reaper"]

_T = TypeVar("_T")


def default_by() -> str:
    """Who acts when ``--by`` is not given: the OS user running the command."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return "unknown"


def _pair_arguments(parser: argparse.ArgumentParser, *, queue: str) -> None:
    parser.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's id")
    if queue == "optional":
        parser.add_argument(
            "queue", metavar="QUEUE", nargs="?", help="the queue (default: every queue)"
        )
    else:
        parser.add_argument("queue", metavar="QUEUE", help="the queue")
    parser.add_argument("--by", help="who acts, for the history (default: the OS user)")
    add_dsn_argument(parser)


def register(subparsers: Any) -> None:
    silence = subparsers.add_parser(
        "silence",
        help="keep a pair (or every queue of an endpoint) from being nudged for a while",
        description="Silence ENDPOINT's QUEUE (or all its queues) for --for: a silenced pair "
        "is neither charged nor counted against the tick limit, and keeps its ledger row and "
        "count. Silencing again replaces the silence; unsilence ends it early.",
    )
    _pair_arguments(silence, queue="optional")
    silence.add_argument(
        "--for",
        dest="lasting",
        type=positive_duration,
        default="1h",
        help="how long, e.g. 30m, 2h, 1d (default: 1h)",
    )
    silence.add_argument("--reason", required=True, help="why, for the next person on call")
    silence.set_defaults(run=_run_silence)

    unsilence = subparsers.add_parser(
        "unsilence",
        help="end a silence now",
        description="End the silence of exactly ENDPOINT QUEUE (or of ENDPOINT alone) now.",
    )
    _pair_arguments(unsilence, queue="optional")
    unsilence.add_argument("--reason", default="", help="why, for the history")
    unsilence.set_defaults(run=_run_unsilence)

    reset = subparsers.add_parser(
        "reset",
        help="start a capped or backing-off pair over at nudge 1",
        description="Start ENDPOINT QUEUE over, as progress would: the next tick charges it "
        "as nudge 1 (after a consumer fix, say).",
    )
    _pair_arguments(reset, queue="required")
    reset.add_argument("--reason", default="", help="why, for the history")
    reset.set_defaults(run=_run_reset)

    nudge = subparsers.add_parser(
        "nudge",
        help="nudge a pair now, as a tick would",
        description="Charge ENDPOINT QUEUE now as nudge 1 if it is a candidate, and deliver "
        "it: a tick under the fleet's tick lock, so racing operators and a sweeping fleet "
        "wake it once. Says why when it is not a candidate. Exit 0 when it is nudged (now "
        f"or within the last minute), {ATTENTION} when not, or when no receiver answered. "
        "Its tick delivers what else is due too, from where it runs: run it beside the sweep, "
        "with the sweep's --refuse-private.",
    )
    nudge.add_argument(
        "--refuse-private",
        action="store_true",
        help="refuse hooks on private and other special-purpose addresses, as `sweep "
        "--refuse-private` does (give it when the fleet does)",
    )
    _pair_arguments(nudge, queue="required")
    nudge.add_argument("--reason", default="", help="why, for the history")
    nudge.set_defaults(run=_run_nudge)


def with_reaper(args: argparse.Namespace, act: Callable[[Reaper], Awaitable[_T]]) -> _T:
    """Run ``act`` on a reaper over the command's database; a missing pair exits 2."""
    if not args.endpoint:
        raise CliError("ENDPOINT must not be empty")
    if getattr(args, "queue", None) == "":
        raise CliError("QUEUE must not be empty")
    return on_reaper(args, act)


def on_reaper(args: argparse.Namespace, act: Callable[[Reaper], Awaitable[_T]]) -> _T:
    """Run ``act`` on a reaper over the command's database, each failure its exit status."""
    import asyncio

    import stall_nudge
    from stall_core import LedgerError, NoSuchPair

    dsn = resolve_dsn(args)

    async def main() -> _T:
        async with stall_nudge.open_reaper(
            dsn,
            timeout=COMMAND_TIMEOUT_S,
            refuse_private=getattr(args, "refuse_private", False),
        ) as reaper:
            return await act(reaper)

    try:
        return asyncio.run(main())
    except NoSuchPair as exc:
        raise CliError(str(exc), status=USAGE) from None
    except (ValueError, OverflowError) as exc:
        raise CliError(str(exc), status=USAGE) from None
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None
    except (stall_nudge.StartupError, LedgerError) as exc:
        raise CliError(str(exc), status=FAILED) from None


def _who(args: argparse.Namespace) -> str:
    return args.by if args.by else default_by()


def _name(endpoint: str, queue: str | None) -> str:
    from stall_core import printable

    return printable(endpoint) if queue is None else f"{printable(endpoint)}/{printable(queue)}"


def _run_silence(args: argparse.Namespace) -> int:
    from stall_core import format_duration

    async def act(reaper: Reaper) -> int:
        silence = await reaper.silence(
            args.endpoint, args.queue, lasting=args.lasting, by=_who(args), reason=args.reason
        )
        what = _name(args.endpoint, args.queue) + ("" if args.queue else " (every queue)")
        print(
            f"silenced {what} until {silence.ends_at.isoformat(timespec='seconds')} "
            f"({format_duration(args.lasting)}) by {silence.by}"
        )
        return OK

    return with_reaper(args, act)


def _run_unsilence(args: argparse.Namespace) -> int:
    async def act(reaper: Reaper) -> int:
        ended = await reaper.unsilence(args.endpoint, args.queue, by=_who(args), reason=args.reason)
        what = _name(args.endpoint, args.queue)
        print(f"unsilenced {what}" if ended is not None else f"{what} was not silenced")
        return OK

    return with_reaper(args, act)


def _run_reset(args: argparse.Namespace) -> int:
    async def act(reaper: Reaper) -> int:
        row = await reaper.reset(args.endpoint, args.queue, by=_who(args), reason=args.reason)
        what = _name(args.endpoint, args.queue)
        if row is None:
            print(f"{what} has no ledger row: its next nudge is nudge 1 already")
        else:
            print(f"reset {what}: the next tick charges it as nudge 1")
        return OK

    return with_reaper(args, act)


#: Why a pair is not nudged now, by ``stall_core.IdleReason`` value; ``{threshold}`` is
#: the policy's.
WHY_NOT = {
    "no-work": "it has no work: no pending todo that passes the sender gate",
    "endpoint-inactive": "its endpoint is not active",
    "no-receiver": "no enabled hook covers it",
    "fresh": "its oldest work is within the threshold ({threshold}): the sweep nudges it then",
    "silenced": "it is silenced: unsilence it first",
}
#: A quarantine queue has no work by rule (``stall_core.is_quarantine``), whatever it holds.
QUARANTINED = "it is the quarantine queue: its deliveries are held, never nudged"


def _run_nudge(args: argparse.Namespace) -> int:
    from stall_core import Charge, Idle, Wait, format_duration, is_quarantine, printable_text

    async def act(reaper: Reaper) -> int:
        result, _ = await reaper.nudge(args.endpoint, args.queue, by=_who(args), reason=args.reason)
        what = _name(args.endpoint, args.queue)
        decision = result.decision
        if isinstance(decision, Idle):
            why = WHY_NOT[decision.reason.value].format(
                threshold=format_duration(reaper.policy.threshold)
            )
            if is_quarantine(args.queue):
                why = QUARANTINED
            print(f"not nudged: {what}: {why}")
            return ATTENTION
        if isinstance(decision, Wait):
            assert result.row is not None  # a Wait has a row
            ago = format_duration(result.outcome.now - result.row.last_nudged_at)
            print(
                f"not nudged again: {what} was nudged {ago} ago (nudge {result.row.nudges}); "
                f"a nudge now is allowed from {decision.due_at.isoformat(timespec='seconds')}"
            )
            return OK
        assert isinstance(decision, Charge)
        if result.charged is None:
            print(f"not nudged: {what} changed meanwhile, or the tick limit held it back")
            return ATTENTION
        delivered: list[str] = []
        await reaper.settle()
        entries = await reaper.history(endpoint_id=args.endpoint, queue=args.queue)
        for entry in entries:
            if entry.event == "charged" and entry.at == result.charged.charged_at:
                delivered.append(entry.outcome or "not known yet")
                if entry.detail:
                    delivered.append(printable_text(entry.detail))
                break
        outcome = ": ".join(delivered) or "not known yet"
        print(f"nudged {what}: nudge 1 naming todo {result.charged.todo.id}, {outcome}")
        return OK if delivered[:1] == ["delivered"] else ATTENTION

    return with_reaper(args, act)
