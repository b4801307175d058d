"""The Postgres adapters: the nudge ledger, its migration and the reference host verbs."""

from ._admin import create_database, drop_database, with_database
from ._embedded import EmbeddedUnavailable, embedded_postgres
from ._errors import DATABASE_ERRORS, describe
from ._hooks import PostgresHooks
from ._host import HostError, PostgresHost
from ._ledger import TICK_LOCK_KEY, PostgresLedger
from ._migrate import (
    CLAIMS_TABLE,
    HOST_TABLES,
    LEDGER_TABLE,
    MigrationReport,
    MissingHostTables,
    migrate,
    missing_tables,
)
from ._notify import TODO_READY_CHANNEL, parse_todo_ready

__all__ = [
    "CLAIMS_TABLE",
    "DATABASE_ERRORS",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "TICK_LOCK_KEY",
    "TODO_READY_CHANNEL",
    "EmbeddedUnavailable",
    "HostError",
    "MigrationReport",
    "MissingHostTables",
    "PostgresHooks",
    "PostgresHost",
    "PostgresLedger",
    "create_database",
    "describe",
    "drop_database",
    "embedded_postgres",
    "migrate",
    "missing_tables",
    "parse_todo_ready",
    "with_database",
]
