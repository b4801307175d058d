"""What the stress harnesses and their worker processes share: nudges on the wire, rows in print."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from stall_core import LedgerRow, Nudge, TodoRef

ROOT = Path(__file__).resolve().parents[2]


def nudge(
    endpoint_id: str,
    queue: str,
    number: int,
    charged_at: datetime,
    todo_id: str,
    created_at: datetime | None = None,
) -> Nudge:
    """A charge's nudge; a missing ``created_at`` for its todo is the stamp (nothing reads it)."""
    todo = TodoRef(id=todo_id, created_at=charged_at if created_at is None else created_at)
    return Nudge(
        endpoint_id=endpoint_id, queue=queue, todo=todo, number=number, charged_at=charged_at
    )


def nudge_record(n: Nudge) -> dict[str, Any]:
    """A nudge as a worker writes it (one JSON object), its todo's title left out."""
    return {
        "endpoint_id": n.endpoint_id,
        "queue": n.queue,
        "number": n.number,
        "charged_at": n.charged_at.isoformat(),
        "todo_id": n.todo.id,
        "todo_created_at": n.todo.created_at.isoformat(),
    }


def nudge_from(r: Mapping[str, Any]) -> Nudge:
    at = datetime.fromisoformat
    return nudge(
        r["endpoint_id"], r["queue"], r["number"], at(r["charged_at"]), r["todo_id"],
        at(r["todo_created_at"]),
    )  # fmt: skip


def show_row(row: LedgerRow | None) -> str:
    if row is None:
        return "no row"
    kept = "" if row.progressed_at is None else f", kept {row.progressed_at.isoformat()}"
    return f"row ({row.nudges}, {row.last_nudged_at.isoformat()}, {row.named_todo}{kept})"


async def spawn(module: str, *args: str, log: Path, **kwargs: Any) -> asyncio.subprocess.Process:
    """``python -m tests.stress.<module> args`` from the repository root, stderr onto ``log``."""
    with log.open("ab") as stderr:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"tests.stress.{module}", *args, cwd=ROOT, stderr=stderr,
            **kwargs,
        )  # fmt: skip
