"""The status view read by a person: which pairs come first, and why a tick left one alone."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from stall_core import PacingPolicy, PairStatus, Verdict, format_duration

__all__ = ["by_urgency", "hook_trouble", "needs_person", "why_not_nudged"]

#: After the pairs that need a person or have a failing hook, in this order.
_VERDICT_ORDER = (
    Verdict.DUE,
    Verdict.BACKING_OFF,
    Verdict.CAPPED,
    Verdict.FRESH,
    Verdict.NO_RECEIVER,
    Verdict.ENDPOINT_INACTIVE,
    Verdict.UNGATED,
    Verdict.QUARANTINE,
    Verdict.DRAINED,
)


def needs_person(pair: PairStatus, policy: PacingPolicy) -> bool:
    """Capped, or no receiver or an inactive endpoint with work past the threshold."""
    if pair.verdict is Verdict.CAPPED:
        return True
    stuck = pair.oldest_age is not None and pair.oldest_age > policy.threshold
    return stuck and pair.verdict in {Verdict.NO_RECEIVER, Verdict.ENDPOINT_INACTIVE}


def hook_trouble(pair: PairStatus) -> bool:
    """A covering hook is failing or disabled: a dead receiver shows before auto-disable."""
    return bool(pair.hook_failures or pair.hooks_disabled)


def by_urgency(pairs: Iterable[PairStatus], policy: PacingPolicy) -> list[PairStatus]:
    """Pairs that need a person, then failing hooks, then by verdict; oldest work first."""

    def rank(pair: PairStatus) -> tuple[int, int, timedelta, str, str]:
        first = 0 if needs_person(pair, policy) else 1 if hook_trouble(pair) else 2
        age = pair.oldest_age if pair.oldest_age is not None else timedelta(0)
        return first, _VERDICT_ORDER.index(pair.verdict), -age, pair.endpoint_id, pair.queue

    return sorted(pairs, key=rank)


def why_not_nudged(pair: PairStatus, *, policy: PacingPolicy, limited: bool) -> str:
    """Why a tick did not nudge ``pair``, judged just after it; ``limited``: it used its limit."""
    match pair.verdict:
        case Verdict.DUE:
            why = (
                f"held back by the tick limit ({policy.tick_limit} a tick, least-nudged first)"
                if limited
                else "due since the tick decided: the next tick nudges it"
            )
        case Verdict.BACKING_OFF:
            why = (
                f"backing off until {_clock(pair.next_due_at)} "
                f"({pair.effective_nudges} of {policy.cap} nudges spent)"
            )
        case Verdict.CAPPED:
            why = f"capped: {pair.effective_nudges} nudges without a claim; silent until a claim"
        case Verdict.FRESH:
            why = (
                f"fresh: its oldest todo is younger than the "
                f"{format_duration(policy.threshold)} threshold"
            )
        case Verdict.NO_RECEIVER:
            why = "no receiver: no enabled notify hook covers the queue"
        case Verdict.ENDPOINT_INACTIVE:
            why = "endpoint inactive: the endpoint is paused or disabled"
        case Verdict.UNGATED:
            why = "ungated: only unverified deliveries pending, claimed by pull only"
        case Verdict.QUARANTINE:
            why = "quarantine: held deliveries are never nudged"
        case Verdict.DRAINED:
            why = "drained: no gated work left; its ledger row goes next tick"
    if pair.hook_failures:
        why += f"; a covering hook failed {pair.hook_failures} times in a row"
    if pair.hooks_disabled:
        why += f"; {pair.hooks_disabled} covering hook(s) disabled"
    return why


def _clock(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%H:%M:%S UTC")
