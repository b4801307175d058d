"""stall_nudge: the composition root, the one place that wires the adapters to the core.

``open_reaper`` builds what the ``stall-nudge sweep`` sidecar runs, with the
same protections: every database call bounded, the start-up table check, a
shutdown deadline that lets retries finish, refunds settled, and a
cancellation that returns promptly and leaves nothing running::

    async with stall_nudge.open_reaper(dsn) as reaper:
        await reaper.run(interval=timedelta(seconds=15), stop=stop)

``connect`` is the pool every command of the CLI uses; ``stall_nudge.cli`` is
the ``stall-nudge`` command line, built on the same two.
"""

from ._connect import StartupError, check_dsn, connect
from ._reaper import Reaper, open_reaper

__all__ = ["Reaper", "StartupError", "check_dsn", "connect", "open_reaper"]
