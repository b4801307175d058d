"""An import-linter contract type of ours: no module imports another package's private module.

A module whose name has a component starting with one underscore (``_ledger``)
is private to the package above that component; only modules inside that
package may import it. Dunder modules (``__main__``) are not private.
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def _owner(module: str) -> str | None:
    """The package a private module belongs to, or None for a public module."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class PrivateModulesContract(Contract):
    """Private modules are imported only from inside the package that owns them."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        wanted = [str(p) for p in self.packages]  # type: ignore[attr-defined]
        illegal: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            if not any(_inside(importer, p) for p in wanted):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                owner = _owner(imported)
                if owner is not None and not _inside(importer, owner):
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = [d["line_number"] for d in details]
                    illegal.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for found in check.metadata["illegal"]:
            output.print_error(
                f"{found['importer']} imports {found['imported']} "
                f"(line {', '.join(map(str, found['lines']))}), private to another package",
                bold=False,
            )
            output.new_line()
