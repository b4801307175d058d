"""The SQL files: plain PostgreSQL under ``-- name:`` headers, each statement short to read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import adapters.postgres
from adapters.postgres import shipped_sql
from adapters.postgres.sql import parse_queries, sendable

SRC = Path(adapters.postgres.__file__).parents[2]
TWO = """\
-- Anything before the first header is the file's own comment, not a statement.

-- name: first
-- Count the todos.
SELECT count(*) FROM todos;

-- name: second_2
-- Read one endpoint.
--   $1 endpoint id
SELECT state
  FROM endpoints
 WHERE id = $1;
"""


def test_each_header_names_the_statement_below_it_with_its_comments() -> None:
    """A statement is everything under its header, comments included, in file order."""
    parsed = parse_queries(TWO)

    assert ["first", "second_2"] == list(parsed)
    assert "-- Read one endpoint.\n--   $1 endpoint id\nSELECT state" in parsed["second_2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;", "'a' is defined twice"),
        ("-- name: a\n-- only a comment\n", "'a' has no SQL"),
    ],
)
def test_a_mistake_in_a_file_is_refused_naming_the_statement(text: str, message: str) -> None:
    """A repeated name or a header with no SQL under it fails at load, not at run time."""
    with pytest.raises(ValueError, match=message):
        parse_queries(text)


def test_a_statement_is_sent_with_its_description_and_no_other_comment_or_indent() -> None:
    """What is sent keeps the first line (pg_stat_statements shows it) and drops other prose."""
    sent = sendable(parse_queries(TWO)["second_2"])

    assert "-- Read one endpoint.\nSELECT state\nFROM endpoints\nWHERE id = $1;" == sent


SHIPPED = [
    (f"{source}.{name}", sql)
    for source, named in shipped_sql().items()
    for name, sql in named.items()
]


@pytest.mark.parametrize(("name", "sql"), SHIPPED, ids=[n for n, _ in SHIPPED])
def test_every_statement_is_plain_sql_described_and_short(name: str, sql: str) -> None:
    """Described in one line, no template syntax, and as sent at most 120 lines and 6 KiB."""
    sent = sendable(sql)

    assert sql.startswith("-- "), name
    assert len(sql.splitlines()[0]) > 10, name
    assert not re.search(r"\{\{|(?<![\w'])@[a-z_]+", sql), name
    assert sent.count("\n") + 1 <= 120, name
    assert len(sent.encode()) <= 6 * 1024, name


def test_no_sql_file_holds_template_syntax_and_nothing_generated_is_kept() -> None:
    """Every .sql file under src/ is what psql reads; there is no expanded/ copy to keep current."""
    files = sorted(SRC.rglob("*.sql"))

    assert len(files) >= 5
    assert [] == [f.name for f in files if re.search(r"\{\{|(?<![\w'])@[a-z_]+", f.read_text())]
    assert [] == sorted(str(p) for p in SRC.rglob("expanded"))
