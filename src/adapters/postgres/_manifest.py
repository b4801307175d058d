"""What this build owns in a database and what a sweeping role needs: the lists migrate reads.

Our objects are those the numbered migrations make (``migrations/``: our
schema ``stall_nudge`` and every table of ours in it), the views of the
host's tables our statements read (``VIEWS``, in our schema too) and the
indexes our reads need on the host's tables (``HOST_INDEXES``). Anything
else in our schema, and any index, trigger or function in the host's schema
whose name carries our prefix, belongs to no build of ours that is current:
migrate removes it. ``SWEEPER_PRIVILEGES`` is everything ``sweep`` and
``status`` read and write, column by column (with ``ENDPOINT_NAME_PRIVILEGE``
where the host names its endpoints): what ``migrate --grant ROLE`` grants
and the start-up check asks for.

The views and the indexes name the host's schema, so they are built here,
from data, rather than written in a ``.sql`` file: every name quoted, every
statement run under a search_path of pg_catalog alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources

import attrs

from adapters.postgres.sql import parse_queries, quote_ident

__all__ = [
    "ENDPOINT_NAME",
    "ENDPOINT_NAME_PRIVILEGE",
    "HOOK_HEALTH",
    "HOST_COLUMNS",
    "HOST_INDEXES",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "NAMES_FIT",
    "OUR_SCHEMA",
    "OUR_TABLES",
    "PREFIX",
    "SWEEPER_PRIVILEGES",
    "VIEWS",
    "HostIndex",
    "Migration",
    "Privilege",
    "migrations",
    "names_in_host_schema",
    "on_host",
    "qualified",
    "view_sql",
]

_PACKAGE = "adapters.postgres"
#: Our schema: every object of ours but the indexes on the host's tables.
OUR_SCHEMA = "stall_nudge"
#: The nudge ledger, under the spec's name, in our schema.
LEDGER_TABLE = "queue_stall_nudges"
#: Every table of ours, qualified.
OUR_TABLES = tuple(
    f"{OUR_SCHEMA}.{t}"
    for t in (
        LEDGER_TABLE,
        "migrations",
        "settings",
        "ticks",
        "held",
        "grants",
        "silences",
        "history",
    )
)
#: The prefix every object of ours outside our schema carries.
PREFIX = "stall_nudge_"

#: The host's columns our statements read, by table (switchboard's; the reference DDL is
#: host_schema.sql). Each table is read through a view of exactly these columns.
HOST_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "endpoints": ("id", "state"),
    "deliveries": ("id", "verified"),
    "todos": (
        "id",
        "endpoint_id",
        "queue",
        "delivery_id",
        "state",
        "title",
        "created_at",
        "claimed_at",
    ),
    "notify_hooks": (
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
}
HOST_TABLES = tuple(HOST_COLUMNS)
#: The host's name for an endpoint, a column of endpoints some hosts keep and the reference
#: host does not: our view of endpoints carries it as text (status shows it) where the host
#: has one of a type of PostgreSQL's own (``_catalog.endpoint_name``), else NULL.
ENDPOINT_NAME = "name"
#: The columns of notify_hooks a failed or delivered message writes.
HOOK_HEALTH = ("consecutive_failures", "enabled", "disabled_at", "disabled_reason")
#: Our view of each host table, in our schema: "host_" and the table's name (a name of its
#: own, so no statement of migrate's can mistake one for the other).
VIEWS: Mapping[str, str] = {table: f"host_{table}" for table in HOST_TABLES}

#: mirrors stall_core.names_fit: a pair whose names fit one entry of a plain index (a btree
#: entry stops near 2.7 kB). Our indexes keyed by the names hold only these, so no host
#: write fails because of a name's length; the statements that read them say the same.
NAMES_FIT = "octet_length(endpoint_id::text) + octet_length(queue) <= 2000"

_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@attrs.frozen(kw_only=True)
class Migration:
    """One numbered migration file: its version, name and steps.

    Steps named ``table_*`` and ``index_*`` define one object of ours each.
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
    #: What it is for, in a line.
    why: str
    columns: str
    where: str
    #: Columns carried in each entry, not keyed: what an index-only read returns.
    include: str = ""
    #: The leading plain columns a host's own index must have to serve; empty: only ours.
    fits_columns: tuple[str, ...] = ()
    #: The predicates (as the catalog prints them; '' for none) such an index may have.
    fits_predicates: tuple[str, ...] = ()

    def sql(self, host_schema: str) -> str:
        """Its CREATE INDEX CONCURRENTLY, on the host's table in ``host_schema``."""
        return (
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.name} "
            f"ON {quote_ident(host_schema)}.{self.table} ({self.columns})"
            + (f" INCLUDE ({self.include})" if self.include else "")
            + f" WHERE {self.where}"
        )


#: The indexes our reads need on the host's tables. migrate builds each one CREATE INDEX
#: CONCURRENTLY (the host's writes go on), outside any transaction, and rebuilds one left
#: invalid or different. Where the host keeps its own index that fits (its leading plain
#: columns, with default operator classes and collations, and one of the predicates, as
#: the catalog prints them), migrate uses that one and builds nothing.
HOST_INDEXES: tuple[HostIndex, ...] = (
    HostIndex(
        name="stall_nudge_pending",
        table="todos",
        why="pending todos in pair order, oldest first, ties by id in code point order, "
        "with their delivery: the full pass steps from pair to pair on it and reads each "
        "pair's work from the entry it lands on, index-only; a host claiming the next todo "
        "of a queue can use it instead of its own",
        columns='endpoint_id, queue, created_at, (id::text) COLLATE "C"',
        include="id, delivery_id",
        where=f"state = 'pending' AND {NAMES_FIT}",
    ),
    HostIndex(
        name="stall_nudge_activity",
        table="todos",
        why="todos by their latest stamp, claimed_at or else created_at: the claims a "
        "tick reads and the delta's arrivals are one range scan each, and a todo's life "
        "(created, claimed, done) is one entry at a time",
        columns="(coalesce(claimed_at, created_at))",
        where="claimed_at IS NOT NULL OR state = 'pending'",
    ),
    HostIndex(
        name="stall_nudge_requeued",
        table="todos",
        why="pending todos claimed before, that is given back: only a requeue writes one",
        columns="claimed_at",
        where="state = 'pending' AND claimed_at IS NOT NULL",
        fits_columns=("claimed_at",),
        fits_predicates=("((state = 'pending'::text) AND (claimed_at IS NOT NULL))",),
    ),
    HostIndex(
        name="stall_nudge_unverified",
        table="deliveries",
        why="the unverified deliveries alone: the sender gate is two index-only probes; a "
        "delivery verified at receipt writes no entry",
        columns="id",
        where="NOT verified",
        fits_columns=("id",),
        fits_predicates=("(NOT verified)",),
    ),
    HostIndex(
        name="stall_nudge_hooks",
        table="notify_hooks",
        why="an endpoint's enabled hooks: whether a receiver covers a pair is one descent",
        columns="endpoint_id",
        where="enabled",
        fits_columns=("endpoint_id",),
        fits_predicates=("", "enabled"),
    ),
)


def view_sql(table: str, host_schema: str, *, endpoint_name: bool = False) -> str:
    """The view of a host table our statements read: its columns we use, the invoker's rights.

    security_invoker (PostgreSQL 15): whoever reads through the view needs the
    privileges on the host's columns themselves, so the view grants nothing.
    The view of endpoints also carries ``name``: the host's (``endpoint_name``),
    as text, or NULL, so one statement serves hosts with and without it.
    """
    columns = list(HOST_COLUMNS[table])
    if table == "endpoints":
        read = f"{ENDPOINT_NAME}::text" if endpoint_name else "NULL::text"
        columns.append(f"{read} AS {ENDPOINT_NAME}")
    return (
        f"CREATE VIEW {OUR_SCHEMA}.{VIEWS[table]} WITH (security_invoker = true) "
        f"AS SELECT {', '.join(columns)} FROM {quote_ident(host_schema)}.{table}"
    )


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
        steps = parse_queries(entry.read_text(encoding="utf-8"))
        found.append(Migration(version=int(match[1]), name=match[2], steps=steps))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"two migration files share a number: {versions}")
    return tuple(found)


#: What a sweeping role needs, and nothing more: ``sweep`` and ``status`` read these
#: columns of the host's tables through our views of them, write a hook's health columns,
#: and read and write our tables. The test in tests/postgres/test_grants.py compares the
#: catalog with its own checked-in list, then sweeps and asks ``status`` as such a role.
SWEEPER_PRIVILEGES: tuple[Privilege, ...] = (
    Privilege(privileges=("USAGE",), kind="schema", target="@"),
    Privilege(privileges=("USAGE",), kind="schema", target=OUR_SCHEMA),
    *(
        Privilege(privileges=("SELECT",), kind="columns", target=f"@{table}", columns=columns)
        for table, columns in HOST_COLUMNS.items()
    ),
    Privilege(privileges=("UPDATE",), kind="columns", target="@notify_hooks", columns=HOOK_HEALTH),
    *(
        Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.{view}")
        for view in VIEWS.values()
    ),
    Privilege(
        privileges=("UPDATE",),
        kind="columns",
        target=f"{OUR_SCHEMA}.{VIEWS['notify_hooks']}",
        columns=HOOK_HEALTH,
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE", "DELETE"),
        kind="table",
        target=f"{OUR_SCHEMA}.{LEDGER_TABLE}",
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE", "DELETE"),
        kind="table",
        target=f"{OUR_SCHEMA}.held",
    ),
    Privilege(
        privileges=("SELECT", "INSERT", "UPDATE"), kind="table", target=f"{OUR_SCHEMA}.ticks"
    ),
    # Operators' silences and the history: the sweep reads the first, books outcomes in
    # the second and prunes both; an operator's verbs (the same grants) write them.
    *(
        Privilege(
            privileges=("SELECT", "INSERT", "UPDATE", "DELETE"),
            kind="table",
            target=f"{OUR_SCHEMA}.{table}",
        )
        for table in ("silences", "history")
    ),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.settings"),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.migrations"),
    Privilege(privileges=("SELECT",), kind="table", target=f"{OUR_SCHEMA}.grants"),
)
#: What a sweeping role also needs where our view of endpoints reads the host's name:
#: every read of a security_invoker view asks for each column the view reads.
ENDPOINT_NAME_PRIVILEGE = Privilege(
    privileges=("SELECT",), kind="columns", target="@endpoints", columns=(ENDPOINT_NAME,)
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

    Only our indexes on the host's tables: an object of another kind or on
    another table under one of these names is not ours, whoever made it.
    """
    return {index.name: ("index", index.table) for index in HOST_INDEXES}
