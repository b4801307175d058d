"""The Postgres adapters: the nudge ledger, its migration and the reference host verbs."""

from ._errors import describe
from ._host import HostError, PostgresHost, TodoRow
from ._ledger import PostgresLedger
from ._migrate import LEDGER_TABLE, MigrationReport, MissingHostTables, migrate
from ._sql import parse_queries, queries

__all__ = [
    "LEDGER_TABLE",
    "HostError",
    "MigrationReport",
    "MissingHostTables",
    "PostgresHost",
    "PostgresLedger",
    "TodoRow",
    "describe",
    "migrate",
    "parse_queries",
    "queries",
]
