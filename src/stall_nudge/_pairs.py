"""The status view read by a person: which pairs need one, and in what order they come."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from stall_core import (
    HistoryEntry,
    PacingPolicy,
    PairStatus,
    Receiver,
    Verdict,
    printable,
    receiver_health,
)

from ._text import age, line, until

__all__ = [
    "by_urgency",
    "counts_and_times",
    "endpoint_label",
    "hook_trouble",
    "hooks_cell",
    "needs_person",
    "outcome_lines",
    "silence_note",
    "unreadable_note",
]

#: After the pairs that need a person or have a failing hook, in this order.
_VERDICT_ORDER = (
    Verdict.DUE,
    Verdict.BACKING_OFF,
    Verdict.CAPPED,
    Verdict.UNREADABLE,
    Verdict.NAMES_TOO_LONG,
    Verdict.FRESH,
    Verdict.NO_RECEIVER,
    Verdict.ENDPOINT_INACTIVE,
    Verdict.HELD_BY_GATE,
    Verdict.SILENCED,
    Verdict.QUARANTINE,
    Verdict.DRAINED,
)


def counts_and_times(pair: PairStatus, now: datetime) -> tuple[str, ...]:
    """The cells the table and the page share: pending counts, oldest work, nudges, last, next."""
    return (
        str(pair.sendable),
        str(pair.held_by_gate),
        age(pair.oldest_age),
        "-" if pair.effective_nudges is None else str(pair.effective_nudges),
        "-" if pair.last_nudged_at is None else age(now - pair.last_nudged_at) + " ago",
        until(pair.next_due_at, now),
    )


def endpoint_label(pair: PairStatus) -> str:
    """The endpoint as a person knows it: the host's name with its id, or the id alone.

    Not escaped: each surface escapes the cell.
    """
    if pair.endpoint_name is None:
        return pair.endpoint_id
    return f"{pair.endpoint_name} ({pair.endpoint_id})"


def hooks_cell(pair: PairStatus, now: datetime) -> str:
    """The health of the pair's receivers (``stall_core.receiver_health``), then disabled hooks.

    ``none``, ``ok``, ``3 failures in a row``, or ``recovered`` with when the
    pair's last nudge reached no receiver.
    """
    health = receiver_health(pair)
    if health is Receiver.FAILING:
        word = f"{pair.hook_failures} failure{'s' if pair.hook_failures > 1 else ''} in a row"
    elif health is Receiver.RECOVERED:
        assert pair.last_failure_at is not None  # what RECOVERED means
        word = f"recovered (failed {age(now - pair.last_failure_at)} ago)"
    else:
        word = health.value
    return word + (f", {pair.hooks_disabled} disabled" if pair.hooks_disabled else "")


def needs_person(pair: PairStatus, policy: PacingPolicy) -> bool:
    """Whether the sweep can no longer get this pair's work claimed without a person.

    Capped: woken to the cap, never claimed. Work older than the threshold
    that nothing will wake: no receiver, or an inactive endpoint. Or work the
    sweep is nudging into a receiver whose last delivery failed every
    attempt: a dead receiver shows at once, not only once failures have
    disabled its hook. Fresh work does not count yet: a hook, a resume or a
    retry may come in time. And a host value the sweep cannot read
    (``PairStatus.unreadable``): a todo it never nudges for, a claim it
    never counts, until a person fixes the value. Or names too long for
    our indexes (``stall_core.names_fit``): that work is never nudged.
    """
    if pair.verdict in {Verdict.CAPPED, Verdict.NAMES_TOO_LONG} or pair.unreadable is not None:
        return True
    if pair.oldest_age is None or pair.oldest_age <= policy.threshold:
        return False
    if pair.verdict in {Verdict.NO_RECEIVER, Verdict.ENDPOINT_INACTIVE}:
        return True
    return pair.hook_failures > 0 and pair.verdict in {Verdict.DUE, Verdict.BACKING_OFF}


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


def unreadable_note(pair: PairStatus) -> str | None:
    """The pair's value the sweep cannot read, for a person, escaped; None when there is none.

    Names and the value are a sender's or a host's: each is escaped and cut
    (``printable``), and the line too (``line``).
    """
    odd = pair.unreadable
    if odd is None:
        return None
    what = "not work" if odd.column == "created_at" else "not progress"
    return line(
        f"{printable(pair.endpoint_id)}/{printable(pair.queue)}: todo {printable(odd.todo_id)} "
        f"has {odd.column} {printable(odd.value)}, which the sweep cannot read ({what}): "
        "fix it on the host"
    )


def silence_note(pair: PairStatus, now: datetime) -> str | None:
    """The silence covering the pair: until when, who and why, and how to end it early.

    Not a problem for a person (a silence is an operator's choice), so it is
    shown, never marked. None when no silence covers the pair. The operator's
    words are escaped and cut (``printable``).
    """
    until_at = pair.silenced_until
    if until_at is None:
        return None
    ends = f"{until_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({until(until_at, now)})"
    silence = pair.silence
    if silence is None:
        return f"silenced until {ends}"
    scope = printable(silence.endpoint_id)
    if silence.queue is not None:
        scope += " " + printable(silence.queue)
    whole = " (every queue)" if silence.queue is None else ""
    why = f": {printable(silence.reason)}" if silence.reason else ""
    return line(
        f"silenced{whole} until {ends} by {printable(silence.by)}{why}; "
        f"`stall-nudge unsilence {scope}` ends it early"
    )


def outcome_lines(pair: PairStatus, now: datetime) -> list[str]:
    """The pair's last charges, newest first: ``nudge 2: gave-up, 5m ago`` each."""
    return [_outcome(entry, now) for entry in pair.last_outcomes]


def _outcome(entry: HistoryEntry, now: datetime) -> str:
    what = "under way" if entry.outcome is None else entry.outcome
    return f"nudge {entry.nudge}: {what}, {age(now - entry.at)} ago"
