"""A child process on a shifted wall clock: libfaketime, preloaded from its PyPI wheel.

The clock-skew tests and ``tests/stress/races.py`` run real sweeper processes
whose wall clock is ahead of or behind the database's. The ``libfaketime``
wheel (the ``test`` extra) ships the preload library, so no system package is
needed; the monotonic clock is left alone, as asyncio's timers need it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SkewUnavailable", "skewed_env"]

_LIBRARY = ("vendor", "libfaketime", "src", "libfaketime.so.1")


class SkewUnavailable(RuntimeError):
    """libfaketime cannot shift a clock here (not Linux, or the wheel is not installed)."""


def skewed_env(offset: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child whose wall clock runs ``offset`` off (``+90s``, ``-30s``)."""
    if not sys.platform.startswith("linux"):
        raise SkewUnavailable(f"libfaketime's preload works on Linux, not {sys.platform}")
    # Found, not imported: only its preload library is used.
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.submodule_search_locations:
        raise SkewUnavailable("libfaketime is not installed (the `test` extra has it)")
    library = Path(next(iter(spec.submodule_search_locations)), *_LIBRARY)
    if not library.is_file():
        raise SkewUnavailable(f"libfaketime's wheel has no {'/'.join(_LIBRARY)}")
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD")
    env.update(
        LD_PRELOAD=f"{library}:{preload}" if preload else str(library),
        FAKETIME=offset,
        # Re-read FAKETIME on every call, and leave CLOCK_MONOTONIC real.
        FAKETIME_NO_CACHE="1",
        DONT_FAKE_MONOTONIC="1",
    )
    return env
