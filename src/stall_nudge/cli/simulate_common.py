"""What ``simulate`` and ``simulate --sweep`` share: a policy's values, the plot, a wait shown.

``--policy NAME:key=value`` and ``--sweep key=V1,V2`` take the same keys and
read each value with ``pacing_value``, so a value one accepts the other
accepts too; each command puts its own option name in front of the error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .common import CliError, positive_duration

__all__ = ["KEYS", "human", "pacing_value", "whole", "write_plot"]


def pacing_value(key: str, text: str) -> Any:
    """One value of ``key`` (one of ``KEYS``): a duration, a backoff schedule or a whole number.

    A bad value is an ``argparse.ArgumentTypeError`` starting with ``key``.
    """
    try:
        return _PARSERS[key](text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{key}: {exc}") from None


def _backoff(text: str) -> tuple[timedelta, ...]:
    """Steps joined by ``/``, checked as the core checks a schedule (so alone, before a policy)."""
    from stall_core import PacingPolicy

    steps = tuple(positive_duration(step) for step in text.split("/"))
    try:
        PacingPolicy(backoff=steps)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return steps


def whole(text: str) -> int:
    """argparse type for a whole number from 1 (a cap, a tick limit, a worker count)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return number


_PARSERS: dict[str, Callable[[str], Any]] = {
    "threshold": positive_duration,
    "backoff": _backoff,
    "cap": whole,
    "tick_limit": whole,
}

#: The fields of a pacing policy a command line sets, as the options name them.
KEYS = tuple(_PARSERS)


def write_plot(path: str, draw: Callable[[], None]) -> None:
    """Run ``draw``, which writes ``path``; no matplotlib, or no writing there, is a CliError."""
    try:
        draw()
    except ImportError:
        raise CliError(
            "--plot needs matplotlib: pip install 'stall-nudge[plot]'", status=1
        ) from None
    except OSError as exc:
        raise CliError(f"--plot: cannot write {path!r}: {exc.strerror or exc}", status=1) from None


def human(seconds: float | None) -> str:
    """A duration in seconds as the core writes one, ``-`` for none."""
    from stall_core import format_seconds

    return "-" if seconds is None else format_seconds(seconds)
