"""The expanded SQL checked in beside the adapter is what it sends: a diff shows what runs.

``STALL_UPDATE_EXPANDED=1 pytest tests/unit/test_expanded_sql.py`` rewrites the
files after a change to a statement, a part or a rule.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import adapters.postgres
from adapters.postgres import shipped_sql

EXPANDED = Path(adapters.postgres.__file__).parent / "expanded"


def render(statements: dict[str, str]) -> str:
    """One file: each statement under its name, in order."""
    return "".join(f"-- statement: {name}\n{sql.rstrip()}\n\n" for name, sql in statements.items())


@pytest.mark.parametrize("source", sorted(shipped_sql()))
def test_the_checked_in_expanded_sql_is_current(source: str) -> None:
    """expanded/<source>.sql holds every statement of that source exactly as built today."""
    path = EXPANDED / f"{source}.sql"
    text = render(dict(shipped_sql()[source]))
    if os.environ.get("STALL_UPDATE_EXPANDED") == "1":
        path.write_text(text, encoding="utf-8")

    assert text == path.read_text(encoding="utf-8"), f"rerun with STALL_UPDATE_EXPANDED=1: {path}"


def test_no_file_is_left_over_from_a_removed_source() -> None:
    """Every file in expanded/ is a source the adapter still ships."""
    assert {f"{s}.sql" for s in shipped_sql()} == {p.name for p in EXPANDED.glob("*.sql")}
