"""Faults a run can be asked to suffer: a receiver down, the sweeper down, creation wakes dropped.

Theory of operation
-------------------
Every fault is a flag on any run, synthetic or replayed; instants are
offsets from the run's start, each window ``[start, end)``.

A **receiver outage** takes one endpoint's notify hooks down: each
delivery attempt that starts inside the window fails, at once (``fail``:
a 503 or a refused connection) or after the attempt's timeout (``hang``).
A delivery is what the real dispatcher makes of it (``Delivery``, built
from ``adapters.http.DeliveryPolicy`` by the command line): attempt 1 at
once, each retry after its delay, the first attempt outside the window
delivers. A delivery whose attempts all fail counts one failure against
each hook it went to; ``disable_after`` failures in a row disable the
hook, a delivery resets the count. A nudge that reached no receiver is
refunded when its last attempt fails (``stall_core.refunded_row``), and a
creation wake that failed started nothing.

A **sweeper outage** runs no tick in its window; pairs due meanwhile wait
for the first tick after it.

**Lost creation wakes** are a share of creation wakes dropped before any
request (the dispatcher's queue was full): no hook is charged a failure,
and the consumer is not started. Unlike ``Scenario.wake_loss`` (a wake
the hook answered and the consumer missed), nothing was sent.
"""

from __future__ import annotations

import enum
from datetime import timedelta

import attrs

from .rules import micros

__all__ = ["Delivery", "Faults", "Hang", "ReceiverOutage", "Window", "delivery_outcome"]


class Hang(enum.Enum):
    """How a receiver that is down answers an attempt."""

    FAIL = "fail"  # at once: a 5xx or a refused connection
    HANG = "hang"  # never: the attempt times out


@attrs.frozen(kw_only=True)
class Window:
    """``[start, end)`` after the run's start."""

    start: timedelta
    end: timedelta

    def __attrs_post_init__(self) -> None:
        if self.start < timedelta(0):
            raise ValueError(f"a fault window must not start before the run, got {self.start}")
        if self.end <= self.start:
            raise ValueError(f"a fault window must end after it starts: {self.start}-{self.end}")


@attrs.frozen(kw_only=True)
class ReceiverOutage:
    """The hooks of ``endpoint_id`` fail (or hang) every attempt started in ``window``."""

    endpoint_id: str
    window: Window
    mode: Hang = Hang.FAIL


@attrs.frozen(kw_only=True)
class Delivery:
    """How hard one delivery tries: the real dispatcher's numbers, handed in by the caller.

    The simulator does not restate them: ``adapters.http.DeliveryPolicy``
    holds them, and the command line builds this value from it.
    """

    retry_delays: tuple[timedelta, ...]
    timeout: timedelta
    disable_after: int

    def __attrs_post_init__(self) -> None:
        if any(delay < timedelta(0) for delay in self.retry_delays):
            raise ValueError("retry delays must not be negative")
        if self.timeout <= timedelta(0):
            raise ValueError(f"timeout must be positive, got {self.timeout}")
        if self.disable_after < 1:
            raise ValueError(f"disable_after must be >= 1, got {self.disable_after}")


@attrs.frozen(kw_only=True)
class Faults:
    """The faults of one run; the default is none."""

    receiver_outages: tuple[ReceiverOutage, ...] = ()
    sweeper_outages: tuple[Window, ...] = ()
    #: Share of creation wakes dropped before any request.
    lost_creation_wakes: float = 0.0
    #: Required with a receiver outage: how the dispatcher retries and disables.
    delivery: Delivery | None = None

    def __attrs_post_init__(self) -> None:
        if not 0.0 <= self.lost_creation_wakes <= 1.0:
            raise ValueError(
                f"lost_creation_wakes must be between 0 and 1, got {self.lost_creation_wakes!r}"
            )
        if self.receiver_outages and self.delivery is None:
            raise ValueError("a receiver outage needs the dispatcher's Delivery numbers")

    @property
    def any(self) -> bool:
        return bool(self.receiver_outages or self.sweeper_outages or self.lost_creation_wakes)


def delivery_outcome(
    sent_us: int, down: list[tuple[int, int, Hang]], delivery: Delivery
) -> tuple[bool, int]:
    """(delivered, when) for a message sent at ``sent_us`` to a hook down in ``down`` windows.

    Mirrors the dispatcher's worker (``adapters.http._dispatcher``): one
    attempt at a time, each retry ``retry_delays[n]`` after the attempt
    before it ended; an attempt started while the receiver is down fails
    at once (``fail``) or when its timeout ends (``hang``). ``when`` is the
    instant of the delivering attempt, or of the last failure.
    """
    at = sent_us
    retries = [micros(delay) for delay in delivery.retry_delays]
    timeout_us = micros(delivery.timeout)
    while True:
        mode = next((m for start, end, m in down if start <= at < end), None)
        if mode is None:
            return True, at
        ended = at + (timeout_us if mode is Hang.HANG else 0)
        if not retries:
            return False, ended
        at = ended + retries.pop(0)
