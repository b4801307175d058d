"""Every Python and shell example in README.md and docs/ runs as printed.

Each fenced ``python``, ``sh``, ``bash`` or ``console`` block is one test.
Python blocks are compiled and executed (a block that awaits at top level
runs as a coroutine body with ``pool``, an asyncpg pool on a migrated
database, in scope); a block defining something a host calls has an adapter
below that calls it. Shell blocks run line by line with bash in a temporary
directory, with this venv's ``stall-nudge`` on PATH and ``DSN`` set to a
fresh migrated database; each line exits 0 unless its comment says
``# exits N``. A block not run carries a marker on the line before its
fence, ``<!-- example: not run (REASON) -->``, with one of ``REASONS``, and
reports as skipped with that reason; a block another test runs as printed
is listed in ``RUN_ELSEWHERE`` and is not a case here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import attrs
import pytest

import stall_nudge

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "sh", "bash", "console"}

#: Why a block may be left out; any other reason fails.
REASONS = {"long benchmark", "never exits", "runs the test suite", "installs"}

#: Blocks another test runs as printed: (file, a string only that block holds) -> the test.
RUN_ELSEWHERE = {
    ("README.md", "open_reaper(dsn)"): (
        "tests/embed/test_readme.py::test_the_readme_example_nudges_a_stalled_queue_and_stops"
    ),
    ("README.md", "reaper.notify("): (
        "tests/embed/test_readme.py::"
        "test_the_readme_creation_wake_reaches_the_hook_through_the_reaper"
    ),
    ("docs/architecture.md", "async def on_ready"): (
        "tests/embed/test_readme.py::test_the_wake_contract_consumer_verifies_and_claims"
    ),
    ("docs/architecture.md", "--replay --dsn"): (
        "tests/cli/test_simulate_replay.py::test_a_database_replay_reads_as_the_sweeping_role"
    ),
    ("docs/operations.md", "stall-nudge silence"): (
        "tests/cli/test_operate_cli.py::test_the_operations_guide_verbs_run_as_printed"
    ),
    ("docs/architecture.md", "async def sweep_once"): (
        "tests/embed/test_readme.py::test_the_wake_contract_sweep_nudges_and_books"
    ),
}


MARKER = re.compile(r"<!-- example: not run \((?P<reason>[^)]*)\) -->")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
EXITS = re.compile(r"#\s*exits (?P<code>\d+)\b")


@attrs.frozen(kw_only=True)
class Block:
    file: str
    index: int
    line: int
    lang: str
    source: str
    #: The ``<!-- example ... -->`` comment on the line before the fence, if there is one.
    marker: str | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}:{self.lang or 'plain'}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    start: int | None = None
    for number, text in enumerate(lines):
        fence = FENCE.match(text)
        if fence is None:
            continue
        if start is None:
            start, lang = number, fence["lang"]
            continue
        before = lines[start - 1].strip() if start else ""
        found.append(
            Block(
                file=str(path.relative_to(ROOT)),
                index=len(found),
                line=start + 1,
                lang=lang,
                source="\n".join(lines[start + 1 : number]) + "\n",
                marker=before if before.startswith("<!-- example") else None,
            )
        )
        start = None
    assert start is None, f"{path}: a fence opened at line {start + 1} is never closed"
    return found


ALL = [block for path in DOCS for block in blocks(path)]
EXAMPLES = [block for block in ALL if block.lang in RUNNABLE]


def elsewhere(block: Block, table: dict[tuple[str, str], str]) -> str | None:
    """The entry of ``table`` naming this block, if any."""
    return next(
        (
            why
            for (file, needle), why in table.items()
            if file == block.file and needle in block.source
        ),
        None,
    )


# Adapters: blocks that define what a host calls, called here as a host would.


async def export_metrics(namespace: dict[str, Any], pool: asyncpg.Pool) -> None:
    """operations.md: in the host's registry, the collector serves the ledger rows after a tick."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    namespace["REGISTRY"] = registry  # the host's registry, here a fresh one
    async with stall_nudge.open_reaper(pool) as reaper:
        namespace["export_metrics"](reaper)
        await reaper.tick()

        assert 0 == registry.get_sample_value("switchboard_queue_stall_ledger_rows")


async def contract_driver(namespace: dict[str, Any], pool: asyncpg.Pool) -> None:
    """reliability.md: the driver sketch builds over a pool and holds the tick lock."""
    from stall_testing import FakeClock
    from stall_testing.contract import LedgerContract

    assert issubclass(namespace["TestMyHost"], LedgerContract)
    driver = namespace["MyHostDriver"](pool, FakeClock())
    async with driver.hold_tick():
        pass


Adapter = Callable[[dict[str, Any], asyncpg.Pool], Awaitable[None]]

#: (file, a string only that block holds) -> (names the block may assume, the adapter).
ADAPTERS: dict[tuple[str, str], tuple[Callable[[], dict[str, Any]], Adapter]] = {
    ("docs/operations.md", "def export_metrics"): (dict, export_metrics),
    ("docs/reliability.md", "class MyHostDriver"): (dict, contract_driver),
}


def adapter_for(block: Block) -> tuple[Callable[[], dict[str, Any]], Adapter] | None:
    return next(
        (
            pair
            for (file, needle), pair in ADAPTERS.items()
            if file == block.file and needle in block.source
        ),
        None,
    )


async def run_python(block: Block, pool: asyncpg.Pool) -> None:
    """Execute a Python block; await it if it awaits at top level; then its adapter, if any."""
    setup, adapter = adapter_for(block) or (dict, None)
    namespace: dict[str, Any] = {"__name__": f"doc_example_{block.index}", **setup()}
    code = compile(
        block.source,
        f"{ROOT / block.file}:{block.line}",
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    if code.co_flags & 0x80:  # CO_COROUTINE: the block awaits at top level
        namespace["pool"] = pool
        await eval(code, namespace)
    else:
        exec(code, namespace)
    if adapter is not None:
        await adapter(namespace, pool)


def commands(block: Block) -> list[str]:
    """The command lines of a shell block (continuations joined, comments and output left out)."""
    lines = block.source.splitlines()
    if block.lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [line for line in joined if line.strip() and not line.lstrip().startswith("#")]


def run_shell(block: Block, dsn: str, tmp_path: Path) -> None:
    """Run each command line with bash in a scratch directory; each exits as documented."""
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "STALL_DSN"}
    env |= {
        "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        "DSN": dsn,
        "STALL_TEST_DSN": dsn,
    }
    # The docs' commands run from the repository root; some write plots into docs/, some
    # replay the shipped example history.
    (tmp_path / "docs").mkdir()
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for command in commands(block):
        expected = EXITS.search(command)
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (int(expected["code"]) if expected else 0) == done.returncode, (
            f"{command}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-2000:]}"
        )


def not_run(block: Block) -> str | None:
    """The reason a block carries for not being run, when it is a known one; else None."""
    marked = MARKER.fullmatch(block.marker or "")
    return marked["reason"] if marked and marked["reason"] in REASONS else None


def case(block: Block) -> Any:
    """One block as a test case: skipped, with its reason, when it is marked not run."""
    reason = not_run(block)
    marks = [pytest.mark.skip(reason=f"not run ({reason})")] if reason else []
    return pytest.param(block, id=block.id, marks=marks)


CASES = [case(block) for block in EXAMPLES if elsewhere(block, RUN_ELSEWHERE) is None]


@pytest.mark.parametrize("block", CASES)
async def test_the_example_runs_as_printed(block: Block, pg_dsn: str, tmp_path: Path) -> None:
    """The block runs as printed against a fresh migrated database.

    A marked block reaches here only when its marker is malformed or its reason is not one of
    ``REASONS``: that fails rather than skipping a block nobody said why not to run.
    """
    assert block.marker is None, (
        f"{block.id}: {block.marker!r} is no marker this runner knows; "
        f"write <!-- example: not run (REASON) --> with REASON one of {sorted(REASONS)}"
    )
    if block.lang == "python":
        pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
        try:
            await run_python(block, pool)
        finally:
            await pool.close()
    else:
        run_shell(block, pg_dsn, tmp_path)


def test_every_fence_names_its_language() -> None:
    """A fence without a language could hide a command the test above never runs."""
    unlabeled = [b.id for b in ALL if not b.lang]

    assert [] == unlabeled


def test_every_marker_is_on_a_runnable_block() -> None:
    """A marker before a plain-text fence is a mistake: it skips nothing."""
    misplaced = [
        b.id for b in ALL if b.marker and MARKER.fullmatch(b.marker) and b.lang not in RUNNABLE
    ]

    assert [] == misplaced


def test_every_table_entry_names_a_block() -> None:
    """An adapter or an elsewhere entry whose block is gone goes stale silently: it must match."""
    entries = [*ADAPTERS, *RUN_ELSEWHERE]
    stale = [e for e in entries if not any(b.file == e[0] and e[1] in b.source for b in EXAMPLES)]

    assert [] == stale


def test_every_block_run_elsewhere_names_a_test_that_exists() -> None:
    """A block handed to another test is run only if that test is still there under its name."""
    missing = []
    for test in RUN_ELSEWHERE.values():
        path, _, name = test.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        defined = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)
        }
        if name not in defined:
            missing.append(test)

    assert [] == missing
