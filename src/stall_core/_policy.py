"""The pacing policy: every number SPEC-0038 fixes, in one value.

Theory of operation
-------------------
A pair (endpoint, queue) becomes a candidate once its oldest gate-passing
pending todo is older than ``threshold`` (strictly: created_at < now -
threshold). Nudge 1 fires on the first tick the pair is a candidate with no
ledger row, or after progress (a claim after the last nudge). Nudge N
(N >= 2) waits ``backoff[N - 2]`` after nudge N - 1; past the end of the
schedule its last step repeats (only policies longer than the default use
that). A nudge that reached no receiver is refunded: it does not count, but
its instant stays the pacing base, so the same nudge is tried again one step
later (a refunded nudge 1 waits ``backoff[0]``). After ``cap`` nudges
without progress the pair falls silent while its work stays pending. One
tick charges at most ``tick_limit`` pairs, so a stalled fleet cannot start
an unbounded number of consumers at once.

The defaults are the spec's numbers and the switchboard path always uses
them; other policies exist for tests and the pacing simulator.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from ._values import positive_int

__all__ = ["PacingPolicy"]


def _positive(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a timedelta, got {type(value).__name__}")
    if value <= timedelta(0):
        raise ValueError(f"{name} must be positive, got {value}")


@attrs.frozen(kw_only=True)
class PacingPolicy:
    """Stall threshold, widening backoff, cap and per-tick limit."""

    threshold: timedelta = timedelta(minutes=2)
    backoff: tuple[timedelta, ...] = (
        timedelta(minutes=5),
        timedelta(minutes=20),
        timedelta(hours=1),
        timedelta(hours=6),
    )
    cap: int = 5
    tick_limit: int = 4

    def __attrs_post_init__(self) -> None:
        _positive("threshold", self.threshold)
        if not isinstance(self.backoff, tuple) or not self.backoff:
            raise ValueError("backoff must be a non-empty tuple of timedeltas")
        for i, step in enumerate(self.backoff):
            _positive(f"backoff[{i}]", step)
            if i and step < self.backoff[i - 1]:
                raise ValueError(
                    f"backoff must not shrink: backoff[{i}]={step} < backoff[{i - 1}]"
                    f"={self.backoff[i - 1]}"
                )
        for name in ("cap", "tick_limit"):
            positive_int(name, getattr(self, name))

    def delay_before(self, nudge: int) -> timedelta:
        """The wait after the pair's last attempt before nudge ``nudge`` may fire.

        For nudge 1 that wait only applies after a refunded first attempt (one
        that reached no receiver): a pair with no ledger row, or one that made
        progress, is nudged at once.
        """
        positive_int("nudge", nudge)
        return self.backoff[min(max(nudge - 2, 0), len(self.backoff) - 1)]
