"""The reaper's log lines an operator reads first, and one line a database or network fault."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from adapters.postgres import DATABASE_ERRORS, describe
from stall_core import printable_text

__all__ = ["FAULT_LOGGERS", "OneLineFaults", "one_line_faults", "start_line"]

#: Loggers that log a fault of the database or the network with its traceback:
#: asyncpg's pool (restoring its connection floor during an outage) and the
#: dispatcher (booking a delivery's outcome in the hook directory).
FAULT_LOGGERS = ("asyncpg.pool", "adapters.http")


def start_line(fields: Mapping[str, str]) -> str:
    """``starting: key: value; ...``, the facts in the order given.

    The reaper gives them (``Reaper.start_fields``).
    """
    return "starting: " + "; ".join(f"{key}: {value}" for key, value in fields.items())


class OneLineFaults(logging.Filter):
    """Rewrites a record carrying a database or network fault's traceback as one line.

    The message gains the fault's one-line reason, escaped and cut (a
    server's message may quote a name); the traceback goes. A fault is what
    the driver or the network raises (``DATABASE_ERRORS``), never a bug,
    which keeps its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        fault = record.exc_info[1] if record.exc_info else None
        if isinstance(fault, DATABASE_ERRORS):
            record.msg = f"{record.getMessage()}: {printable_text(describe(fault))}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_FILTER = OneLineFaults()
_users = 0


@contextmanager
def one_line_faults() -> Iterator[None]:
    """While any reaper is open, ``FAULT_LOGGERS`` log each fault as one line."""
    global _users
    if not _users:
        for name in FAULT_LOGGERS:
            logging.getLogger(name).addFilter(_FILTER)
    _users += 1
    try:
        yield
    finally:
        _users -= 1
        if not _users:
            for name in FAULT_LOGGERS:
                logging.getLogger(name).removeFilter(_FILTER)
