"""The named-query loader and the hook directory's query file."""

from __future__ import annotations

import pytest

from adapters.http._sql import hook_queries, parse_queries


def test_hook_queries_are_named_and_described() -> None:
    """hooks.sql holds the three queries the Postgres directory runs, each described."""
    queries = hook_queries()

    assert ["hooks_covering", "record_failure", "record_success"] == sorted(queries)
    assert all(q.description and q.sql and "$1" in q.sql for q in queries.values())


def test_queries_are_loaded_once() -> None:
    """Every call returns the same parsed mapping."""
    assert hook_queries() is hook_queries()


def test_parse_splits_on_headers() -> None:
    """Each header starts a query; the description line is not part of the SQL."""
    queries = parse_queries(
        "-- file comment\n\n-- name: a --\n-- First.\nSELECT 1;\n\n"
        "-- name: b --\n-- Second.\nSELECT\n  2;\n"
    )

    assert {"a": ("First.", "SELECT 1"), "b": ("Second.", "SELECT\n  2")} == {
        name: (q.description, q.sql) for name, q in queries.items()
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: a --\nSELECT 1;\n", "one-line '-- description'"),
        ("-- name: a --\n-- A.\n\n", "has no SQL"),
        ("-- name: a --\n-- A.\nSELECT 1;\n-- name: a --\n-- Again.\nSELECT 2;\n", "defined twice"),
    ],
)
def test_parse_rejects_malformed_files(text: str, problem: str) -> None:
    """A missing description, an empty query or a repeated name is an error, not a surprise."""
    with pytest.raises(ValueError, match=problem):
        parse_queries(text)
