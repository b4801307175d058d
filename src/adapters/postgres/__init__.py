"""The Postgres adapters: the nudge ledger, the hook directory and the migration.

Test support (the reference host's verbs, throwaway databases, the embedded
server) lives in ``stall_testing``, not here.
"""

from ._errors import DATABASE_ERRORS, describe
from ._hooks import PostgresHooks
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

__all__ = [
    "CLAIMS_TABLE",
    "DATABASE_ERRORS",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "TICK_LOCK_KEY",
    "MigrationReport",
    "MissingHostTables",
    "PostgresHooks",
    "PostgresLedger",
    "describe",
    "migrate",
    "missing_tables",
]
