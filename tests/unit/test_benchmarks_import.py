"""The benchmark scripts still import against the library they measure."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    ["backlog", "dispatch", "fleet", "host_writes", "sim_speed", "sweep_scale"],
)
def test_benchmark_imports(name: str) -> None:
    """Each script under benchmarks/ imports and has a main entry point."""
    module = importlib.import_module(f"benchmarks.{name}")

    assert callable(getattr(module, "main", None))
