"""The named-SQL loader: ``-- name: NAME`` headers, descriptions kept, mistakes refused."""

from __future__ import annotations

import re

import pytest

from adapters.postgres import ledger_statements, readable_statements
from adapters.postgres.sql import (
    CACHEABLE_STATEMENT_SIZE,
    assemble,
    expand,
    parse_parts,
    parse_queries,
    parse_rules,
    queries,
    script,
)

TWO = """\
-- Anything before the first header is the file's own comment, not a query.

-- name: first
-- Count the todos.
SELECT count(*) FROM todos;

-- name: second_2
-- Read one endpoint.
-- $1 endpoint id
SELECT state
  FROM endpoints
 WHERE id = $1;
"""


def test_names_map_to_their_queries_in_file_order() -> None:
    """Each header names the query below it, in the order the file gives them."""
    parsed = parse_queries(TWO)

    assert ["first", "second_2"] == list(parsed)
    assert "-- Count the todos.\nSELECT count(*) FROM todos;" == parsed["first"]


def test_descriptions_and_parameter_notes_stay_in_the_text() -> None:
    """A query keeps its description lines, and its SQL keeps its line breaks."""
    second = parse_queries(TWO)["second_2"]

    assert second.startswith("-- Read one endpoint.\n-- $1 endpoint id\nSELECT state\n")
    assert second.endswith(" WHERE id = $1;")


def test_the_mapping_is_read_only() -> None:
    """Parsed queries cannot be changed by the code that uses them."""
    parsed = parse_queries(TWO)

    with pytest.raises(TypeError):
        parsed["first"] = "DROP TABLE todos"  # type: ignore[index]


def test_a_name_defined_twice_is_an_error() -> None:
    """A repeated name is refused, naming it, rather than one query silently winning."""
    with pytest.raises(ValueError, match="'first' is defined twice"):
        parse_queries(TWO + "\n-- name: first\nSELECT 1;\n")


@pytest.mark.parametrize(
    "body", ["", "\n\n", "-- Only a description.\n", "-- One.\n-- Two.\n\n"], ids=repr
)
def test_a_query_with_no_sql_is_an_error(body: str) -> None:
    """A header followed by nothing but blank or comment lines is refused, naming it."""
    with pytest.raises(ValueError, match="'empty' has no SQL"):
        parse_queries(f"-- name: first\nSELECT 1;\n-- name: empty\n{body}")


def test_a_header_must_be_a_whole_lowercase_line() -> None:
    """Only an exact ``-- name: snake_case`` line starts a query; lookalikes stay SQL text."""
    parsed = parse_queries(
        "-- name: real\nSELECT 1; -- name: inline\n--name: nospace\n-- name: Upper\nSELECT 2;\n"
    )

    assert ["real"] == list(parsed)


def test_text_without_headers_holds_no_queries() -> None:
    """A file with no header at all parses to no queries (a script, not a query file)."""
    assert {} == dict(parse_queries("CREATE TABLE t (x int);\n"))


@pytest.mark.parametrize(
    ("package", "filename"),
    [
        ("adapters.postgres", "ledger.sql"),
        ("stall_testing", "host.sql"),
        ("adapters.postgres", "migrate.sql"),
        ("adapters.postgres", "hooks.sql"),
    ],
)
def test_every_packaged_query_is_named_and_described(package: str, filename: str) -> None:
    """Each query the adapters ship loads, and its first line is a one-line description."""
    loaded = queries(package, filename)

    assert loaded
    for name, text in loaded.items():
        assert re.match(r"-- \S", text), f"{filename}:{name} has no description"


@pytest.mark.parametrize(
    ("package", "filename"),
    [
        ("adapters.postgres", "ledger.sql"),
        ("adapters.postgres", "migrate.sql"),
        ("adapters.postgres", "hooks.sql"),
        ("stall_testing", "host.sql"),
    ],
)
def test_every_packaged_query_stays_prepared_in_asyncpg(package: str, filename: str) -> None:
    """No statement sent is longer than asyncpg caches by default: none is planned per call."""
    sizes = {name: len(text) for name, text in queries(package, filename).items()}

    assert {} == {name: size for name, size in sizes.items() if size > CACHEABLE_STATEMENT_SIZE}


def test_every_tick_statement_stays_prepared_in_asyncpg() -> None:
    """The statements built from tick.sql's parts fit asyncpg's statement cache too."""
    sizes = {name: len(text) for name, text in ledger_statements().items()}

    assert {} == {name: size for name, size in sizes.items() if size > CACHEABLE_STATEMENT_SIZE}


def test_a_statement_is_sent_with_its_description_only_and_unindented() -> None:
    """Comments past the description and indentation are the reader's, not the server's."""
    readable = readable_statements()["tick_judge"]
    sent = ledger_statements()["tick_judge"]
    first, *rest = sent.splitlines()

    assert "-- The pairs the delta's finding statement returned" in readable
    assert "-- tick_judge: find_given + judge + report" == first
    assert [] == [line for line in rest if line.startswith("--") or line != line.strip()]
    assert "WITH RECURSIVE" == rest[0]


def test_the_ledger_statements_the_adapter_runs_exist() -> None:
    """The ledger's statements include both kinds of tick, status and inspection."""
    wanted = {"tick_full", "tick_changed", "tick_judge", "pair_status", "ledger_rows", "tick_lock"}

    assert wanted <= set(ledger_statements())


PARTS = """-- part: find
-- Defines found.
found AS (SELECT 1 AS x)

-- part: more
more AS (SELECT x + 1 AS x FROM found)

-- part: report
SELECT x FROM more
"""


def test_a_statement_is_its_parts_under_one_with_then_its_last_part() -> None:
    """A recipe's CTE parts are joined under one WITH RECURSIVE, its last part is the SELECT."""
    built = assemble("s", parse_parts(PARTS), ("find", "more", "report"))

    assert (
        "-- s: find + more + report\nWITH RECURSIVE\n-- Defines found.\n"
        "found AS (SELECT 1 AS x),\nmore AS (SELECT x + 1 AS x FROM found)\n"
        "SELECT x FROM more"
    ) == built


@pytest.mark.parametrize("recipe", [(), ("find", "nope", "report")], ids=["empty", "unknown"])
def test_a_recipe_naming_no_part_or_an_unknown_one_is_refused(recipe: tuple[str, ...]) -> None:
    """A statement built of nothing, or of a part the file lacks, is an error naming it."""
    with pytest.raises(ValueError, match="statement 's' names unknown parts"):
        assemble("s", parse_parts(PARTS), recipe)


#: What a rule may read: the host's tables, ours, and set-returning functions. Never a CTE.
TABLES = {
    "todos",
    "deliveries",
    "endpoints",
    "notify_hooks",
    "queue_stall_nudges",
    "stall_nudge.claims",
    "stall_nudge.changes",
    "unnest",
}


def test_no_rule_reads_a_name_its_caller_defines() -> None:
    """Every FROM and JOIN in rules.sql names a table, so a rule reads no CTE of its caller."""
    rules = parse_rules(script("adapters.postgres", "rules.sql"))
    read = {
        (name, table)
        for name, rule in rules.items()
        for table in re.findall(
            r"\b(?:FROM|JOIN)\s+(?:LATERAL\s+)?(?!LATERAL\b)([\w.]+)", rule.body
        )
        if not table.startswith("(")
    }

    assert set() == {(name, table) for name, table in read if table not in TABLES}


def test_the_hook_directory_queries_exist() -> None:
    """hooks.sql names the queries the Postgres hook directory runs."""
    assert {"hooks_covering", "record_failure", "record_success", "record_successes"} == set(
        queries("adapters.postgres", "hooks.sql")
    )


def test_files_are_loaded_once() -> None:
    """Asking twice for one file returns the same parsed mapping, not a fresh parse."""
    assert queries("adapters.postgres", "ledger.sql") is queries("adapters.postgres", "ledger.sql")


RULES = """\
-- The file's own comment.

-- rule: gate(todo)
-- A description line, dropped from the expansion.
({todo}.delivery_id IS NULL OR {todo}.verified)

-- rule: both(todo, queue)
({{gate({todo})}} AND {todo}.queue = {queue})

-- rule: none()
true
"""


def test_a_rule_call_expands_with_its_arguments() -> None:
    """{{rule(args)}} becomes the rule's SQL with each {param} replaced, comments dropped."""
    rules = parse_rules(RULES)

    assert "WHERE (t.delivery_id IS NULL OR t.verified)" == expand("WHERE {{gate(t)}}", rules)


def test_rules_nest_and_take_parameters() -> None:
    """A rule may call another, passing its own parameters on; $n parameters are arguments too."""
    rules = parse_rules(RULES)

    assert "((x.delivery_id IS NULL OR x.verified) AND x.queue = $6) AND true" == expand(
        "{{both(x, $6)}} AND {{none()}}", rules
    )


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("{{nope(t)}}", "unknown rule 'nope'"),
        ("{{gate(t, u)}}", "takes 1 arguments, got 2"),
        ("{{gate(t.x; DROP TABLE todos)}}", "is not a column or \\$n"),
        ("{{gate('x')}}", "is not a column or \\$n"),
        ("{{gate(t)}", "malformed rule call"),
    ],
)
def test_a_bad_rule_call_is_refused(sql: str, message: str) -> None:
    """An unknown rule, a wrong arity, an argument that is not a column or $n, a broken call."""
    with pytest.raises(ValueError, match=message):
        expand(sql, parse_rules(RULES))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (RULES + "\n-- rule: gate(todo)\ntrue\n", "'gate' is defined twice"),
        ("-- rule: empty(a)\n-- only a comment\n", "'empty' has no SQL"),
        ("-- rule: stray(a)\n{a} = {b}\n", r"uses \['b'\] but takes \['a'\]"),
    ],
)
def test_a_bad_rule_file_is_refused(text: str, message: str) -> None:
    """A repeated rule, a rule with no SQL, or one using a parameter it does not take."""
    with pytest.raises(ValueError, match=message):
        parse_rules(text)


def test_a_rule_calling_itself_is_refused() -> None:
    """Endless nesting is refused rather than looping."""
    with pytest.raises(ValueError, match="deeper than 8"):
        expand("{{loop(t)}}", parse_rules("-- rule: loop(a)\n{{loop({a})}}\n"))


def test_the_ledger_queries_load_with_every_rule_expanded() -> None:
    """The shipped statements use only rules that exist, and none is left unexpanded."""
    ledger = ledger_statements()

    assert all("{{" not in sql for sql in ledger.values())
    assert "gate_u.verified" in ledger["tick_full"]
    assert "gate_u.verified" in ledger["tick_judge"]
    assert "gate_u.verified" in ledger["pair_status"]
