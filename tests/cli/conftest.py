"""Shared by the CLI tests: run the command in this process or as one, a board, its stalled wakes.

``cli`` runs ``stall_nudge.cli.main`` in this process: what a command prints and
exits with needs no interpreter of its own. ``cli_process`` starts a real
``stall-nudge`` for the few tests whose subject is the process: an operator's
journey, a signal, a shifted clock, the demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

import asyncpg
import attrs
import pytest

from stall_core import PacingPolicy
from stall_nudge.cli import main
from stall_testing import PostgresHost, Receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#: Only a hang takes this long: every command bounds its own waits far under it.
HANG_S = 120


@attrs.frozen
class Result:
    status: int
    out: str
    err: str


def _run(args: Sequence[str]) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as exc:  # --help and --version end through argparse's exit
            code = exc.code
            status = code if isinstance(code, int) else 0 if code is None else 1
    return Result(status, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """``env`` as this process's whole environment meanwhile, as a child would get it."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


async def cli(*args: str, env: Mapping[str, str] | None = None) -> Result:
    """Run `stall-nudge ARGS` in this process and collect its exit status and output.

    ``main`` runs its own event loop, so it runs on a worker thread while this
    loop keeps serving the test's hook. An exception ``main`` lets out fails
    the test, as a traceback would.
    """
    with _environment(env):
        return await asyncio.wait_for(asyncio.to_thread(_run, args), HANG_S)


async def cli_process(
    *args: str, env: Mapping[str, str] | None = None, limit: float = HANG_S
) -> Result:
    """Run `stall-nudge ARGS` in a fresh interpreter and collect its output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stall_nudge.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def stalled(receiver: Receiver) -> list[tuple[object, object]]:
    """(todo id, queue) of each verified stalled wake to the hook at ``hook``, in arrival order."""
    metas = [message.json()["meta"] for message in receiver.at("hook")]
    return [(meta["todo_id"], meta["queue"]) for meta in metas if meta["reason"] == "stalled"]


async def fill_board(pool: asyncpg.Pool, receiver: Receiver) -> PostgresHost:
    """Two pairs: ep-1/lane-l stalled (l-0 its oldest), ep-1/fresh not yet.

    lane-l's todos wait on a verified delivery; ``receiver``'s ``hook`` is ep-1's notify hook.
    """
    host = PostgresHost(pool)
    now: datetime = await pool.fetchval("SELECT clock_timestamp()")
    threshold = PacingPolicy().threshold
    await host.add_endpoint("ep-1")
    await host.add_hook(
        "hook-1", endpoint_id="ep-1", url=receiver.url("hook", SECRET), secret=SECRET
    )
    await host.add_delivery("d1", endpoint_id="ep-1", verified=True, received_at=now)
    for i, age in enumerate((3 * threshold, 2 * threshold)):
        await host.create_todo(
            f"l-{i}",
            endpoint_id="ep-1",
            queue="lane-l",
            created_at=now - age,
            delivery_id="d1",
            title=f"item {i}",
        )
    await host.create_todo("f-0", endpoint_id="ep-1", queue="fresh", created_at=now)
    return host


@pytest.fixture(name="board")
async def _board(pg_pool: asyncpg.Pool, receiver: Receiver) -> PostgresHost:
    """``fill_board`` on the test's migrated database."""
    return await fill_board(pg_pool, receiver)
