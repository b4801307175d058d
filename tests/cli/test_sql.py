"""`stall-nudge sql` prints exactly what the adapter sends, rules expanded, with no database."""

from __future__ import annotations

from adapters.postgres import readable_statements, shipped_sql

from .test_cli import cli


async def test_a_named_statement_is_printed_as_built() -> None:
    """`sql tick_full tick_changed tick_judge` prints each as the ledger builds it."""
    names = ("tick_full", "tick_changed", "tick_judge")
    result = await cli("sql", *names)

    built = readable_statements()
    expected = "".join(f"-- statement: ledger.{name}\n{built[name].rstrip()}\n\n" for name in names)
    assert (0, expected) == (result.status, result.out)


async def test_list_names_every_shipped_statement() -> None:
    """`sql --list` names each statement of each source, as source.name."""
    result = await cli("sql", "--list")

    expected = [f"{source}.{name}" for source, named in shipped_sql().items() for name in named]
    assert (0, expected) == (result.status, result.out.splitlines())


async def test_an_unknown_name_is_a_usage_mistake() -> None:
    """A name no statement has exits 2 with one line naming it."""
    result = await cli("sql", "tick_full", "no_such")

    assert (2, "stall-nudge: error: no statement named no_such (stall-nudge sql --list)\n") == (
        result.status,
        result.err,
    )
