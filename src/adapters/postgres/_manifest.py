"""What this build owns in a database and what a sweeping role needs: the lists migrate reads.

Our objects are those the numbered migrations make (``migrations/``: our
schema ``stall_nudge`` and the ledger ``queue_stall_nudges`` in the host's
schema) and the indexes our reads need on the host's tables
(``host_indexes.sql``). Anything else in our schema, and any table, index,
trigger or function in the host's schema whose name carries our prefix,
belongs to no build of ours that is current: migrate removes it.
``SWEEPER_PRIVILEGES`` is everything ``sweep`` and ``status`` read and write,
column by column: what ``migrate --grant ROLE`` grants and the start-up
check asks for.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources

import attrs

from adapters.postgres.sql import (
    HOST_TABLES,
    LEDGER_TABLE,
    parse_queries,
    quote_ident,
    script,
    with_rules,
)

__all__ = [
    "HOST_TABLES",
    "LEDGER_TABLE",
    "OUR_SCHEMA",
    "OUR_TABLES",
    "PREFIX",
    "SWEEPER_PRIVILEGES",
    "HostIndex",
    "Migration",
    "Privilege",
    "host_indexes",
    "migrations",
    "names_in_host_schema",
]

_PACKAGE = "adapters.postgres"
#: Our schema: every table of ours but the ledger.
OUR_SCHEMA = "stall_nudge"
#: Every table of ours, qualified as a reader finds it (the ledger by the host's schema).
OUR_TABLES = (
    LEDGER_TABLE,
    f"{OUR_SCHEMA}.migrations",
    f"{OUR_SCHEMA}.settings",
    f"{OUR_SCHEMA}.sweeps",
    f"{OUR_SCHEMA}.held",
    f"{OUR_SCHEMA}.grants",
)
#: The prefix every object of ours outside our schema carries (the ledger's indexes too).
PREFIX = "stall_nudge_"

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_INDEX_HEADER = re.compile(r"^-- index: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FITS = re.compile(r"^-- fits: (\w+) \(([^)]*)\) where (.+)$", re.MULTILINE)
_ON_TABLE = re.compile(r"^\s*ON @(\w+) ", re.MULTILINE)
_CREATES = re.compile(r"CREATE (?:UNIQUE )?(TABLE|INDEX) IF NOT EXISTS (@)?(\w+)(?:\s+ON @(\w+))?")


@attrs.frozen(kw_only=True)
class Migration:
    """One numbered migration file: its version, name and steps (rules expanded).

    Steps named ``table_*`` and ``index_*`` define one object of ours each;
    the others convert what an earlier build left.
    """

    version: int
    name: str
    steps: Mapping[str, str]

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


@attrs.frozen(kw_only=True)
class HostIndex:
    """One index our reads need on a host table, and the host indexes that would serve instead."""

    name: str
    table: str
    #: Its CREATE INDEX CONCURRENTLY statement, host tables written ``@name``.
    sql: str
    #: The leading plain columns a host's own index must have to serve; empty: only ours.
    fits_columns: tuple[str, ...] = ()
    #: The predicates (as the catalog prints them; '' for none) such an index may have.
    fits_predicates: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class Privilege:
    """Privileges on one object: a schema, a table, or some columns of a table.

    ``target`` is a schema name (``@`` for the host's), or a table: ours
    qualified (``stall_nudge.held``), the host's written ``@name``.
    """

    privileges: tuple[str, ...]
    kind: str  # "schema" | "table" | "columns"
    target: str
    columns: tuple[str, ...] = ()


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """The numbered migration files, in order (read once)."""
    found = []
    for entry in resources.files(_PACKAGE).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match is None:
            continue
        steps = with_rules(_PACKAGE, parse_queries(entry.read_text(encoding="utf-8")))
        found.append(Migration(version=int(match[1]), name=match[2], steps=steps))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two migration files share a number: {versions}")
    return tuple(found)


@functools.cache
def host_indexes() -> tuple[HostIndex, ...]:
    """The indexes of host_indexes.sql, in file order, rules expanded (read once)."""
    text = script(_PACKAGE, "host_indexes.sql")
    pieces = _INDEX_HEADER.split(text)
    found = []
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        sql = with_rules(_PACKAGE, {name: body.strip()})[name]
        table = _ON_TABLE.search(sql)
        if table is None:
            raise ValueError(f"index {name} names no host table")
        fits = _FITS.search(sql)
        columns: tuple[str, ...] = ()
        predicates: tuple[str, ...] = ()
        if fits is not None:
            columns = tuple(c.strip() for c in fits[2].split(","))
            predicates = tuple("" if p.strip() == "none" else p.strip() for p in fits[3].split("|"))
        statement = "\n".join(
            line for line in sql.splitlines() if not line.lstrip().startswith("--")
        )
        found.append(
            HostIndex(
                name=name,
                table=table[1],
                sql=statement.strip().rstrip(";"),
                fits_columns=columns,
                fits_predicates=predicates,
            )
        )
    return tuple(found)


#: What a sweeping role needs, and nothing more: ``sweep`` and ``status`` read these
#: columns of the host's tables, write a hook's failure columns, and read and write our
#: tables. The test in tests/postgres/test_grants.py compares the catalog with its own
#: checked-in list, then sweeps and asks ``status`` as such a role.
SWEEPER_PRIVILEGES: tuple[Privilege, ...] = (
    Privilege(privileges=("USAGE",), kind="schema", target="@"),
    Privilege(privileges=("USAGE",), kind="schema", target=OUR_SCHEMA),
    Privilege(privileges=("SELECT",), kind="columns", target="@endpoints", columns=("id", "state")),
    Privilege(
        privileges=("SELECT",), kind="columns", target="@deliveries", columns=("id", "verified")
    ),
    Privilege(
        privileges=("SELECT",),
        kind="columns",
        target="@todos",
        columns=(
            "id",
            "endpoint_id",
            "queue",
            "delivery_id",
            "state",
            "title",
            "created_at",
            "claimed_at",
        ),
    ),
    Privilege(
        privileges=("SELECT",),
        kind="columns",
        target="@notify_hooks",
        columns=(
            "id",
            "endpoint_id",
            "url",
            "secret",
            "queues",
            "enabled",
            "consecutive_failures",
            "disabled_at",
            "disabled_reason",
        ),
    ),
    Privilege(
        privileges=("UPDATE",),
        kind="columns",
        target="@notify_hooks",
        columns=("consecutive_failures", "enabled", "disabled_at", "disabled_reason"),
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE", "DELETE"),
        kind="table",
        target=f"@{LEDGER_TABLE}",
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE", "DELETE"),
        kind="table",
        target=f"{OUR_SCHEMA}.held",
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE"), kind="table", target=f"{OUR_SCHEMA}.sweeps"
    ),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.settings"),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.migrations"),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.grants"),
)


def qualified(target: str, host_schema: str) -> str:
    """A privilege's target as SQL: the host's schema or table by its schema, ours as written."""
    if target == "@":
        return quote_ident(host_schema)
    if target.startswith("@"):
        return f"{quote_ident(host_schema)}.{quote_ident(target[1:])}"
    if "." in target:
        schema, table = target.split(".", 1)
        return f"{quote_ident(schema)}.{quote_ident(table)}"
    return quote_ident(target)


def on_host(target: str) -> bool:
    """Whether a privilege's target is the host's (its schema or one of its tables)."""
    return target == "@" or (target.startswith("@") and target[1:] in HOST_TABLES)


@functools.cache
def names_in_host_schema() -> Mapping[str, tuple[str, str]]:
    """Each name we create in the host's schema: {name: (kind, the table an index is on)}.

    The ledger and its indexes (the migrations), and our indexes on the host's
    tables: an object of another kind or on another table under one of these
    names is not ours, whoever made it.
    """
    found: dict[str, tuple[str, str]] = {}
    for migration in migrations():
        for sql in migration.steps.values():
            for kind, host, name, on_table in _CREATES.findall(sql):
                if kind == "TABLE" and host:
                    found[name] = ("table", "")
                elif kind == "INDEX" and on_table:
                    found[name] = ("index", on_table)
    for index in host_indexes():
        found[index.name] = ("index", index.table)
    return found
