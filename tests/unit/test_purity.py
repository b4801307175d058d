"""The core and the simulator import only the standard library, attrs and the core (habit 1).

What import-linter cannot see is checked here: no clock or randomness
module, no dynamic import, no wall-clock read. The import rules between
packages are import-linter contracts (pyproject.toml), run by
``test_the_import_contracts_hold`` and by .ci/run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import stall_core
import stall_sim

CORE = Path(stall_core.__file__).parent
MODULES = sorted([*CORE.rglob("*.py"), *Path(stall_sim.__file__).parent.rglob("*.py")])
BANNED = {"adapters", "asyncpg", "aiohttp", "time", "random"}
ALLOWED_THIRD_PARTY = {"attrs", "stall_core", "stall_sim"}
#: Only the sweeper, the imperative shell, may touch the event loop.
ASYNCIO_MODULES = {"_sweeper.py"}
#: The simulator's plot draws with matplotlib, an optional extra, imported when it draws.
EXTRAS = {"stall_sim/plot.py": {"matplotlib"}}


def imported_roots(path: Path) -> set[str]:
    """The top-level names of every absolute import in a module (relative imports are the core)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.partition(".")[0])
    return roots


def dynamic_imports(path: Path) -> list[str]:
    """Calls to __import__ or importlib.import_module, which ast import checks would miss."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in {"__import__", "import_module"}:
                found.append(ast.unparse(node))
    return found


def test_the_core_has_modules() -> None:
    """The scan found the core's modules (a wrong path would make every check vacuous)."""
    assert {"__init__.py", "_decide.py", "_policy.py", "_sweeper.py"} <= {p.name for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_core_imports_only_stdlib_attrs_and_itself(path: Path) -> None:
    """Every core module imports only the standard library, attrs and stall_core (or its extra)."""
    allowed = ALLOWED_THIRD_PARTY | EXTRAS.get(f"{path.parent.name}/{path.name}", set())
    foreign = {
        root
        for root in imported_roots(path)
        if root not in sys.stdlib_module_names and root not in allowed
    }

    assert set() == foreign


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_core_imports_nothing_banned(path: Path) -> None:
    """No core module imports adapters, asyncpg, aiohttp, time or random, even dynamically."""
    assert set() == imported_roots(path) & BANNED
    assert [] == dynamic_imports(path)


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_only_the_sweeper_uses_asyncio(path: Path) -> None:
    """asyncio is the sweeper's alone; decisions, values and ports never import it."""
    uses_asyncio = "asyncio" in imported_roots(path)

    assert (path.name in ASYNCIO_MODULES) == uses_asyncio


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_core_reads_no_wall_clock(path: Path) -> None:
    """No core module calls datetime.now/utcnow/today: now is always an argument."""
    calls = [
        ast.unparse(node)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in {"now", "utcnow", "today"}
        # `self._clock` and plain `now` variables are fine; only attribute reads on a type.
        and isinstance(node.value, ast.Name)
        and node.value.id in {"datetime", "date"}
    ]

    assert [] == calls


def test_import_checker_sees_every_import_form(tmp_path: Path) -> None:
    """The checker itself catches plain, dotted, from- and dynamic imports of banned modules."""
    module = tmp_path / "m.py"
    module.write_text(
        "import time\nimport asyncpg.pool\nfrom aiohttp import web\nfrom . import _x\n"
        "def f():\n    import random\n    return __import__('adapters')\n"
    )

    assert {"time", "asyncpg", "aiohttp", "random"} == imported_roots(module)
    assert ["__import__('adapters')"] == dynamic_imports(module)


def test_importing_the_core_loads_no_adapter_or_driver() -> None:
    """A fresh interpreter importing stall_core loads no adapter, asyncpg or aiohttp module."""
    code = (
        "import sys, stall_core\n"
        "print(sorted(m for m in sys.modules"
        " if m.partition('.')[0] in {'adapters', 'asyncpg', 'aiohttp'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )

    assert "[]" == result.stdout.strip()


def test_the_import_contracts_hold() -> None:
    """lint-imports keeps every contract in pyproject.toml (layers, adapters, private modules)."""
    root = Path(__file__).resolve().parents[2]
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    code = "import sys\nfrom importlinter.cli import lint_imports\n"
    code += "sys.exit(lint_imports(no_cache=True, no_logo=True))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=root,
    )

    kept = f"Contracts: {len(contracts['contracts'])} kept, 0 broken."
    assert (0, True) == (result.returncode, kept in result.stdout), result.stdout + result.stderr
