"""Named SQL for every adapter: ``.sql`` files hold queries under ``-- name: NAME`` headers.

Files ship inside their adapter's package and are parsed once, at first use,
into read-only dicts; a query's first comment line after its header is its
description and stays in the text.

A package may also ship ``rules.sql``: SQL expressions under ``-- rule:
NAME(param, ...)`` headers, each rule written once. A query (or another
rule) uses one as ``{{NAME(arg, ...)}}``; the loader expands it with
``{param}`` replaced by the argument, which must be a column reference or a
``$n`` parameter. So every query of the package states a rule the same way.

Relations of the host's schema are written ``@name`` (``@todos``, the ledger
``@queue_stall_nudges``): ``for_host`` qualifies them with the schema the
host's tables live in, so a statement never depends on a search_path.

A statement too long to read as one piece is built from parts: a file of
``-- part: NAME`` sections, each a list of CTEs or a final SELECT, and a
recipe naming the parts in order (``statements``). ``expanded`` gives the
text a reviewer reads (rules expanded, comments kept); what is sent is the
same less its comments and indentation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from types import MappingProxyType

import attrs

__all__ = [
    "CACHEABLE_STATEMENT_SIZE",
    "HOST_RELATIONS",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "Rule",
    "assemble",
    "expand",
    "expanded",
    "for_host",
    "parse_parts",
    "parse_queries",
    "parse_rules",
    "queries",
    "quote_ident",
    "script",
    "sendable",
    "statements",
    "with_rules",
]

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_PART_HEADER = re.compile(r"^-- part: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_RULE_HEADER = re.compile(r"^-- rule: ([a-z_][a-z0-9_]*)\(([a-z_, ]*)\)\s*$", re.MULTILINE)
_CALL = re.compile(r"\{\{([a-z_][a-z0-9_]*)\(([^(){}]*)\)\}\}")
_PARAM = re.compile(r"(?<!\{)\{([a-z_][a-z0-9_]*)\}(?!\})")
_HOST_REF = re.compile(r"(?<![<@\w])@([a-z_]+)\b")
#: The host's tables the sweep reads (switchboard's; the reference DDL is host_schema.sql).
HOST_TABLES = ("endpoints", "deliveries", "todos", "notify_hooks")
#: The nudge ledger, under the spec's name, in the host's schema.
LEDGER_TABLE = "queue_stall_nudges"
#: The relations a statement may name as ``@name``: the host's tables and our ledger.
HOST_RELATIONS = frozenset({*HOST_TABLES, LEDGER_TABLE})
_ARGUMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?|\$[1-9][0-9]*")


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier, whatever it holds."""
    return '"' + name.replace('"', '""') + '"'


def for_host(statements: Mapping[str, str], schema: str) -> Mapping[str, str]:
    """``statements`` with each ``@relation`` qualified by the host's ``schema``.

    Refuses a name that is not one of ``HOST_RELATIONS``, so a typo fails at
    load time rather than resolving elsewhere.
    """
    prefix = quote_ident(schema) + "."

    def relation(match: re.Match[str]) -> str:
        if match.group(1) not in HOST_RELATIONS:
            raise ValueError(f"@{match.group(1)} is not a host relation {sorted(HOST_RELATIONS)}")
        return prefix + match.group(1)

    return MappingProxyType(
        {name: _HOST_REF.sub(relation, sql) for name, sql in statements.items()}
    )


@attrs.frozen
class Rule:
    """One rule: its parameter names and its SQL (comment lines dropped)."""

    params: tuple[str, ...]
    body: str


def parse_rules(text: str) -> Mapping[str, Rule]:
    """Split ``text`` into {name: Rule}; refuses a repeated name, no SQL or an unknown ``{x}``."""
    parts = _RULE_HEADER.split(text)
    found: dict[str, Rule] = {}
    for name, params, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in found:
            raise ValueError(f"rule {name!r} is defined twice")
        sql = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if not sql:
            raise ValueError(f"rule {name!r} has no SQL")
        names = tuple(p.strip() for p in params.split(",") if p.strip())
        unknown = set(_PARAM.findall(sql)) - set(names)
        if unknown:
            raise ValueError(f"rule {name!r} uses {sorted(unknown)} but takes {list(names)}")
        found[name] = Rule(params=names, body=sql)
    return MappingProxyType(found)


def expand(sql: str, rules: Mapping[str, Rule]) -> str:
    """``sql`` with every ``{{rule(args)}}`` replaced by that rule's SQL, nested rules too."""

    def call(match: re.Match[str], depth: int) -> str:
        name, raw = match.group(1), match.group(2)
        rule = rules.get(name)
        if rule is None:
            raise ValueError(f"unknown rule {name!r} in {match.group(0)!r}")
        args = tuple(a.strip() for a in raw.split(",")) if raw.strip() else ()
        if len(args) != len(rule.params):
            raise ValueError(f"rule {name!r} takes {len(rule.params)} arguments, got {len(args)}")
        for arg in args:
            if not _ARGUMENT.fullmatch(arg):
                raise ValueError(f"rule {name!r}: argument {arg!r} is not a column or $n")
        bound = dict(zip(rule.params, args, strict=True))
        body = _PARAM.sub(lambda m: bound[m.group(1)], rule.body)
        return _expand(body, depth + 1)

    def _expand(text: str, depth: int) -> str:
        if depth > 8:
            raise ValueError("rules nest deeper than 8: is one calling itself?")
        return _CALL.sub(lambda m: call(m, depth), text)

    expanded = _expand(sql, 0)
    if "{{" in expanded:
        raise ValueError(f"malformed rule call near {expanded[expanded.index('{{') :][:40]!r}")
    return expanded


def parse_queries(text: str) -> Mapping[str, str]:
    """Split ``text`` into {name: query}; a repeated name or an empty query is an error."""
    return _sections(text, _HEADER, "query")


def parse_parts(text: str) -> Mapping[str, str]:
    """Split ``text`` into {name: part}; a repeated name or an empty part is an error."""
    return _sections(text, _PART_HEADER, "part")


def _sections(text: str, header: re.Pattern[str], kind: str) -> Mapping[str, str]:
    pieces = header.split(text)
    found: dict[str, str] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in found:
            raise ValueError(f"{kind} {name!r} is defined twice")
        body = body.strip()
        if not any(line and not line.startswith("--") for line in body.splitlines()):
            raise ValueError(f"{kind} {name!r} has no SQL")
        found[name] = body
    return MappingProxyType(found)


def assemble(name: str, parts: Mapping[str, str], recipe: Sequence[str]) -> str:
    """Statement ``name`` built from ``recipe``: its CTE parts under one WITH, then its last part.

    The first line names the statement and its parts, as the description a
    statement's first line is.
    """
    missing = [part for part in recipe if part not in parts]
    if missing or not recipe:
        raise ValueError(f"statement {name!r} names unknown parts {missing} (or none)")
    *ctes, final = (parts[part] for part in recipe)
    head = f"-- {name}: {' + '.join(recipe)}"
    if not ctes:
        return f"{head}\n{final}"
    return f"{head}\nWITH RECURSIVE\n" + ",\n".join(ctes) + f"\n{final}"


@functools.cache
def statements(
    package: str, filename: str, recipes: tuple[tuple[str, tuple[str, ...]], ...]
) -> Mapping[str, str]:
    """The statements ``recipes`` build from the parts of ``filename``, readable (``expanded``)."""
    parts = parse_parts(script(package, filename))
    built = {name: assemble(name, parts, recipe) for name, recipe in recipes}
    return MappingProxyType(dict(with_rules(package, built)))


def sendable(readable: Mapping[str, str]) -> Mapping[str, str]:
    """Statements as sent: comment lines (all but the description) and indentation dropped."""
    return MappingProxyType({name: _without_comments(sql) for name, sql in readable.items()})


#: asyncpg keeps a statement prepared (parsed and planned once per connection) only
#: up to this many characters of text, by default (``max_cacheable_statement_size``);
#: a longer one is planned anew on every call, milliseconds per tick.
CACHEABLE_STATEMENT_SIZE = 15 * 1024


@functools.cache
def expanded(package: str, filename: str) -> Mapping[str, str]:
    """The named queries of one ``.sql`` file in ``package``, rules expanded, comments kept."""
    return MappingProxyType(dict(with_rules(package, parse_queries(script(package, filename)))))


@functools.cache
def queries(package: str, filename: str) -> Mapping[str, str]:
    """The named queries of one ``.sql`` file in ``package``, as sent to the server.

    Rules are expanded; of the comments only the description line is kept,
    and no line is indented, so a statement stays short enough for asyncpg to
    keep it prepared.
    """
    return sendable(expanded(package, filename))


def with_rules(package: str, parsed: Mapping[str, str]) -> Mapping[str, str]:
    """``parsed`` with every rule call expanded from ``package``'s ``rules.sql``."""
    if not any("{{" in sql for sql in parsed.values()):
        return parsed
    rules = parse_rules(script(package, "rules.sql"))
    return {name: expand(sql, rules) for name, sql in parsed.items()}


def _without_comments(sql: str) -> str:
    """``sql`` less its comment lines (but the first, the description) and indentation."""
    first, _, rest = sql.partition("\n")
    kept = [line.strip() for line in rest.splitlines()]
    return "\n".join([first, *(line for line in kept if line and not line.startswith("--"))])


@functools.cache
def script(package: str, filename: str) -> str:
    """One ``.sql`` file shipped in ``package``, whole (migrations run as a single script)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")
