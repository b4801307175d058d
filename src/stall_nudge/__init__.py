"""stall_nudge: the composition root, the one place that wires the adapters to the core.

``open_reaper`` builds what the ``stall-nudge sweep`` sidecar runs, with the
same protections: every database call bounded, the start-up table check, a
shutdown deadline that lets retries finish, refunds settled, and a
cancellation that returns promptly and leaves nothing running::

    async with stall_nudge.open_reaper(dsn) as reaper:
        await reaper.run(interval=timedelta(seconds=15), stop=stop)

``reaper.notify`` sends the host's own wakes (``created``, ``requeued``)
through the same dispatcher; ``TodoRef`` names the todo a wake is about.
``reaper.health()`` and ``stall_nudge.metrics.ReaperCollector`` (the
``metrics`` extra) tell an operator how it goes; ``stall_nudge.ops_port``
serves them, with the status page, beside the sidecar's loop.

``open_reaper`` and every command of ``stall_nudge.cli`` (the ``stall-nudge``
command line) build their parts with one composition function,
``_bootstrap.bootstrap``, on a pool from ``connect``.

Each name is imported on first use: the command line lives inside this
package, and `stall-nudge --help` must not wait for the database driver and
the HTTP stack to load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.http import CREATED, REQUEUED
    from stall_core import TodoRef

    from ._connect import DsnError, check_dsn, connect
    from ._reaper import Reaper, open_reaper
    from ._startup import StartupError
    from ._tally import Health

__all__ = [
    "CREATED",
    "REQUEUED",
    "DsnError",
    "Health",
    "Reaper",
    "StartupError",
    "TodoRef",
    "check_dsn",
    "connect",
    "open_reaper",
]

#: The module each public name lives in.
_HOMES = {
    "CREATED": "adapters.http",
    "REQUEUED": "adapters.http",
    "TodoRef": "stall_core",
    "Health": "._tally",
    "DsnError": "._connect",
    "StartupError": "._startup",
    "check_dsn": "._connect",
    "connect": "._connect",
    "Reaper": "._reaper",
    "open_reaper": "._reaper",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
