"""Our own import-linter contract type (tools/import_contracts.py): private modules stay private."""

from __future__ import annotations

import grimp
import pytest

from tools.import_contracts import PrivateModulesContract


def graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    """An import graph holding exactly ``imports`` (importer, imported)."""
    built = grimp.ImportGraph()
    for importer, imported in imports:
        built.add_import(importer=importer, imported=imported, line_number=1, line_contents="")
    return built


def check(*imports: tuple[str, str]) -> list[tuple[str, str]]:
    """The (importer, imported) pairs the contract finds illegal, watching pkg, pkgx and other."""
    contract = PrivateModulesContract(
        name="private", session_options={}, contract_options={"packages": ["pkg", "pkgx", "other"]}
    )
    found = contract.check(graph(*imports), verbose=False)
    return [(f["importer"], f["imported"]) for f in found.metadata["illegal"]]


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("pkg.a", "pkg._b"),  # a package's own private module
        ("pkg.sub.a", "pkg._b"),  # from a subpackage of the owner
        ("pkg.sub._a", "pkg.sub._b"),
        ("other.x", "pkg.public"),  # another package's public module
        ("other.x", "pkg.__main__"),  # dunder modules are not private
    ],
)
def test_legal_imports_pass(importer: str, imported: str) -> None:
    """Private modules imported from inside their package, and public ones, are legal."""
    assert [] == check((importer, imported))


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("other.x", "pkg._b"),  # another package's private module
        ("pkg.a", "pkg.sub._b"),  # the owner is pkg.sub, not pkg
        ("other.x", "pkg._b.c"),  # a public module below a private one
        ("pkgx.y", "pkg._b"),  # a name prefix is not a package
    ],
)
def test_another_packages_private_module_is_caught(importer: str, imported: str) -> None:
    """An import of a private module from outside its owning package breaks the contract."""
    assert [(importer, imported)] == check((importer, imported))
