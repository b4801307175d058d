"""The Postgres adapters: the nudge ledger, the hook directory and the migration.

Test support (the reference host's verbs, throwaway databases, the embedded
server) lives in ``stall_testing``, not here.
"""

from ._errors import DATABASE_ERRORS, describe
from ._hooks import PostgresHooks
from ._ledger import (
    COMPACT_AT,
    TICK_LOCK_KEY,
    PostgresLedger,
    charge_due_parameters,
    charge_outcome,
    ledger_statements,
)
from ._migrate import (
    CLAIMS_TABLE,
    HOST_ID_TYPES,
    HOST_TABLES,
    LEDGER_TABLE,
    SCHEMA_VERSION,
    MigrationError,
    MigrationReport,
    MissingHostTables,
    host_schema_sql,
    migrate,
    migration_sql,
    missing_tables,
    schema_behind,
)
from ._pool import BoundedPool

__all__ = [
    "CLAIMS_TABLE",
    "COMPACT_AT",
    "DATABASE_ERRORS",
    "HOST_ID_TYPES",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "SCHEMA_VERSION",
    "TICK_LOCK_KEY",
    "BoundedPool",
    "MigrationError",
    "MigrationReport",
    "MissingHostTables",
    "PostgresHooks",
    "PostgresLedger",
    "charge_due_parameters",
    "charge_outcome",
    "describe",
    "host_schema_sql",
    "ledger_statements",
    "migrate",
    "migration_sql",
    "missing_tables",
    "schema_behind",
]
