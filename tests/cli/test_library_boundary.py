"""The library never imports its command line: the CLI is a driver on top of it, not a part."""

from __future__ import annotations

import grimp

#: The product's packages; ``stall_nudge.cli`` is the one part none of the rest may use.
PRODUCT = ("stall_core", "stall_sim", "adapters", "stall_nudge")
CLI = "stall_nudge.cli"


def test_no_library_module_imports_the_cli() -> None:
    """Not one module outside stall_nudge.cli imports it, at the top or inside a function."""
    graph = grimp.build_graph(*PRODUCT)
    inside = {CLI, *graph.find_descendants(CLI)}

    assert [] == sorted(
        (importer, imported)
        for imported in inside
        for importer in graph.find_modules_that_directly_import(imported)
        if importer not in inside
    )
