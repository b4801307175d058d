"""`stall-nudge sql` prints the statements as their files hold them, with no database."""

from __future__ import annotations

from adapters.postgres import shipped_sql
from tests.cli.conftest import cli


async def test_sql_lists_prints_and_refuses_as_a_maintainer_uses_it() -> None:
    """--list names every statement; a name prints its source as written; an unknown one exits 2."""
    listed = await cli("sql", "--list")
    printed = await cli("sql", "judge", "find_changed")
    unknown = await cli("sql", "judge", "no_such")

    expected = [f"{source}.{name}" for source, named in shipped_sql().items() for name in named]
    assert (0, expected) == (listed.status, listed.out.splitlines())
    tick = shipped_sql()["tick"]
    assert (0, f"-- name: tick.find_changed\n{tick['find_changed']}\n\n-- name: tick.judge\n") == (
        printed.status,
        printed.out[: printed.out.index("-- name: tick.judge\n") + len("-- name: tick.judge\n")],
    )
    assert printed.out.endswith(f"{tick['judge']}\n\n")
    assert (2, "stall-nudge: error: no statement named no_such (stall-nudge sql --list)\n") == (
        unknown.status,
        unknown.err,
    )
