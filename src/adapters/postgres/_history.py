"""The host's history for a replay, read as a guest in one READ ONLY transaction.

``read_history`` yields the records ``stall_sim.history.parse_records``
reads (the command line hands them over): a window record, then one per
todo, endpoint and hook, and one per charge the operators' history
(``stall_nudge.history``) kept, with its outcome, when this build keeps it
and the role may read it. The window says every nudge was recorded only
when the history reaches back to its start (within the default retention,
or an older row is left): older charges are gone, and a ``sweep --json``
log can supply them instead.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from stall_core import LedgerError, passes_gate

from ._ledger import HISTORY_RETENTION
from ._pool import NOT_MIGRATED
from ._types import Connection
from .sql import queries

__all__ = ["read_history"]

_SQL = queries("adapters.postgres", "history.sql")
_LEDGER = queries("adapters.postgres", "ledger.sql")


async def read_history(
    conn: Connection, *, since: timedelta, until: datetime | None = None
) -> list[dict[str, Any]]:
    """The records of the window ``since`` long that ends at ``until`` (None: the database's now).

    Raises ``LedgerError`` on a database ``migrate`` has not prepared.
    """
    async with conn.transaction(readonly=True):
        if await conn.fetchval(_LEDGER["guest"], column=1) is None:
            raise LedgerError(NOT_MIGRATED)
        end: datetime = until if until is not None else await conn.fetchval(_LEDGER["now"])
        start = end - since
        todos = await conn.fetch(_SQL["history_todos"], start, end)
        endpoints = await conn.fetch(_SQL["history_endpoints"])
        hooks = await conn.fetch(_SQL["history_hooks"])
        kept = await conn.fetchval(_SQL["history_kept"])
        nudges = await conn.fetch(_SQL["history_nudges"], start, end) if kept else []
        # A window reaching back past the retention may have lost charges to pruning.
        covered = kept and await conn.fetchval(
            _SQL["history_covers"], start, end - HISTORY_RETENTION
        )
    records: list[dict[str, Any]] = [
        {"record": "window", "start": start, "end": end, "nudges": bool(covered)}
    ]
    records += [
        {
            "record": "todo",
            "id": t["id"],
            "endpoint_id": t["endpoint_id"],
            "queue": t["queue"],
            "created_at": t["created_at"],
            "claimed_at": t["claimed_at"],
            "state": t["state"],
            "verified": passes_gate(t["delivery_id"], t["verified"]),
        }
        for t in todos
    ]
    records += [{"record": "endpoint", "id": e["id"], "state": e["state"]} for e in endpoints]
    records += [
        {
            "record": "hook",
            "id": h["id"],
            "endpoint_id": h["endpoint_id"],
            "queues": None if h["queues"] is None else list(h["queues"]),
            "enabled": h["enabled"],
        }
        for h in hooks
    ]
    records += [
        {
            "record": "nudge",
            "endpoint_id": n["endpoint_id"],
            "queue": n["queue"],
            "nudge": n["nudge"],
            "todo_id": n["todo_id"],
            "charged_at": n["charged_at"],
            "outcome": n["outcome"],
        }
        for n in nudges
    ]
    return records
