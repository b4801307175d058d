"""A migration plan as data: the statements, each with the problem it repairs.

``Plan.sql()`` is what ``migrate --print-sql`` prints and what ``migrate``
runs, statement for statement. The statement builders here name every
object with its schema, so nothing another role creates in the host's
schema can capture a name.
"""

from __future__ import annotations

import attrs

from adapters.postgres.sql import quote_ident

from ._manifest import HOST_TABLES, OUR_SCHEMA, PREFIX, migrations

__all__ = [
    "GUEST_PATH",
    "HUNG_ON_TABLES",
    "LOCK_TIMEOUT",
    "SCHEMA_VERSION",
    "Plan",
    "Step",
    "drop_host_index",
    "drop_object",
    "literal",
    "table_of",
]


#: The search_path every statement of ours runs under: functions, operators and types
#: resolve in pg_catalog alone (pg_temp is never searched for either).
GUEST_PATH = "pg_catalog, pg_temp"

#: Dropping a trigger locks its host table against writes, and a write that comes while
#: the drop waits for the lock queues behind it: so each try waits at most this long,
#: then lets go and tries again (up to LOCK_TRIES times, further apart each time).
LOCK_TIMEOUT = "100ms"

#: The schema version this build needs and migrate writes: its last migration's number.
SCHEMA_VERSION = migrations()[-1].version


@attrs.frozen(kw_only=True)
class Step:
    """One statement of a plan, and the problem it repairs.

    ``phase``: ``before`` runs outside any transaction first (index builds,
    trigger drops), ``transaction`` in one transaction, ``after`` outside
    any transaction last (concurrent index drops).
    """

    sql: str
    why: str
    phase: str = "transaction"
    #: A statement that locks a host table: a short lock_timeout, tried again.
    locks_host: bool = False
    #: A host index build: progress is reported, an invalid result fails the plan.
    index: str | None = None


@attrs.frozen(kw_only=True)
class Plan:
    """What migrate would run on this database now, in order, and what it could not."""

    steps: tuple[Step, ...]
    #: The command the plan is for, named in its script's first line.
    command: str = "migrate"
    #: Statements this role may not run (grants on the host's tables): for a DBA.
    for_dba: tuple[str, ...] = ()
    #: Host indexes used instead of building ours: (ours, the host's).
    used: tuple[tuple[str, str], ...] = ()
    #: For the role ``--grant`` named: (role, how many of its privileges it already held).
    held: tuple[tuple[str, int], ...] = ()
    #: How many privileges a sweeping role needs on this database (``sweeper_entries``).
    needed: int = 0
    #: Whether definitions were compared with this build's (False: no TEMP privilege).
    compared: bool = True
    #: The type of the host's endpoint names when our view may not read them (None: it
    #: reads them, or the host keeps none).
    unread_name: str | None = None

    @property
    def problems(self) -> tuple[str, ...]:
        """Each problem the plan repairs, once, in order."""
        return tuple(dict.fromkeys(step.why for step in self.steps))

    def sql(self) -> str:
        """The plan as a script a DBA can read and run with psql; nothing when there is nothing."""
        if not self.steps and not self.for_dba:
            return ""
        head = f"-- stall-nudge schema version {SCHEMA_VERSION}: what {self.command} runs"
        out = [
            f"{head} on this database.",
            "-- Every name below resolves in pg_catalog alone, whatever the session's own",
            "-- search_path: nothing another role creates elsewhere is built in or run.",
            f"SET search_path = {GUEST_PATH};",
        ]
        for phase, heading in (
            ("before", "-- Outside any transaction (builds concurrently; host writes go on):"),
            ("transaction", "BEGIN;"),
            ("after", "-- Outside any transaction:"),
        ):
            steps = [s for s in self.steps if s.phase == phase]
            if not steps:
                continue
            out += ["", heading]
            why = None
            for step in steps:
                if step.why != why:
                    out.append(f"-- {step.why}")
                    why = step.why
                if step.locks_host:
                    out.append(
                        f"SET lock_timeout = '{LOCK_TIMEOUT}';  -- migrate retries on timeout"
                    )
                out.append(step.sql.rstrip().rstrip(";") + ";")
            if phase == "transaction":
                out.append("COMMIT;")
        if self.for_dba:
            out += ["", "-- For a DBA: this role may not grant these on the host's tables:"]
            out += [f"{sql};" for sql in self.for_dba]
        return "\n".join(out) + "\n"


def table_of(name: str, host_schema: str) -> str:
    """A table of ours or the host's, qualified by its schema."""
    schema = host_schema if name in HOST_TABLES or name.startswith(PREFIX) else OUR_SCHEMA
    return f"{quote_ident(schema)}.{quote_ident(name)}"


#: The kinds of relation the catalog read (``objects``) names, each its own DROP.
RELATION_KINDS = ("table", "view", "materialized view", "sequence", "foreign table")

#: What another role may hang on a table of ours to run its code as whoever reads or
#: writes it; no build of ours makes one, so migrate removes any and check reports it.
HUNG_ON_TABLES = ("trigger", "rule", "policy", "row security")


def drop_object(kind: str, name: str, on_table: str, host_schema: str) -> str:
    if kind in RELATION_KINDS:
        return f"DROP {kind.upper()} IF EXISTS {table_of(name, host_schema)} CASCADE"
    if kind == "index":
        return f"DROP INDEX IF EXISTS {OUR_SCHEMA}.{quote_ident(name)}"
    if kind == "constraint":
        return (
            f"ALTER TABLE {table_of(on_table, host_schema)} "
            f"DROP CONSTRAINT IF EXISTS {quote_ident(name)}"
        )
    if kind in ("rule", "policy"):
        table = table_of(on_table, host_schema)
        return f"DROP {kind.upper()} IF EXISTS {quote_ident(name)} ON {table}"
    if kind == "row security":
        return (
            f"ALTER TABLE {table_of(on_table, host_schema)} "
            "NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
        )
    if kind == "function":
        proc, _, arguments = name.partition("(")
        schema = host_schema if proc.startswith(PREFIX) else OUR_SCHEMA
        return (
            f"DROP FUNCTION IF EXISTS {quote_ident(schema)}.{quote_ident(proc)}({arguments} CASCADE"
        )
    raise ValueError(f"no drop for an object of kind {kind!r}")


def drop_trigger(name: str, on_table: str, host_schema: str) -> str:
    """An earlier build's trigger on a host table (the drop locks the table: ``locks_host``)."""
    return f"DROP TRIGGER IF EXISTS {quote_ident(name)} ON {table_of(on_table, host_schema)}"


def drop_host_index(name: str, host_schema: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {quote_ident(host_schema)}.{quote_ident(name)}"


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
