"""Creation wakes through the reaper's own dispatcher, and mypy catching a forgotten await."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import asyncpg
import pytest

import stall_nudge
from stall_testing import PostgresHost, Receiver

from .conftest import ago, reasons, stalled_pair

ROOT = Path(__file__).parents[2]


@pytest.mark.postgres
async def test_a_creation_wake_goes_through_the_reapers_dispatcher(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """reaper.notify sends a signed todo.ready with reason created to the pair's hook."""
    await stalled_pair(host, receiver, minutes=0)
    todo = stall_nudge.TodoRef(id="l-0", created_at=ago(0), title="deploy lane-l")
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        queued = await reaper.notify(
            endpoint_id="ep-1", queue="lane-l", todo=todo, reason=stall_nudge.CREATED
        )
        await reaper.settle()

    assert 1 == queued
    assert [("l-0", "created")] == reasons(receiver)
    assert "deploy lane-l" == receiver.at("hook")[0].json()["todo"]["title"]
    assert 1 == reaper.stats.delivered


async def test_mypy_strict_flags_a_notify_without_await(tmp_path: Path) -> None:
    """notify is a coroutine: mypy --strict reports the call whose await was forgotten."""
    snippet = tmp_path / "host.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from datetime import UTC, datetime

            import stall_nudge


            async def created(reaper: stall_nudge.Reaper) -> None:
                todo = stall_nudge.TodoRef(id="l-0", created_at=datetime.now(UTC))
                reaper.notify(endpoint_id="ep-1", queue="lane-l", todo=todo, reason="created")
            """
        )
    )

    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "mypy", "--strict", "--no-error-summary"),
        *("--cache-dir", str(ROOT / ".mypy_cache"), snippet.name),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 600)

    assert 1 == proc.returncode, err.decode()
    assert [
        'host.py:9: error: Value of type "Coroutine[Any, Any, int]" must be used  '
        "[unused-coroutine]"
    ] == [line for line in out.decode().splitlines() if "error:" in line]
