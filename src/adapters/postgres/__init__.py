"""The Postgres adapters: the nudge ledger, the hook directory and the migration.

Test support (the reference host's verbs, throwaway databases, the embedded
server) lives in ``stall_testing``, not here.
"""

from ._errors import DATABASE_ERRORS, describe
from ._hooks import PostgresHooks
from ._ledger import (
    COMPACT_AT,
    TICK_LOCK_KEY,
    TICKS,
    FleetRecord,
    PostgresLedger,
    charge_due_parameters,
    charge_outcome,
    ledger_statements,
    readable_statements,
)
from ._migrate import (
    FOOTPRINTS,
    HOST_ID_TYPES,
    HOST_TABLES,
    LEDGER_TABLE,
    OUR_TABLES,
    SCHEMA_VERSION,
    CheckReport,
    HostIndex,
    Installed,
    Migration,
    MigrationError,
    MigrationReport,
    MissingHostTables,
    check,
    host_indexes,
    host_schema_sql,
    installed,
    migrate,
    migration_sql,
    migrations,
    missing_tables,
    uninstall,
    uninstall_sql,
)
from ._pool import BoundedPool
from ._shipped import shipped_sql

__all__ = [
    "COMPACT_AT",
    "DATABASE_ERRORS",
    "FOOTPRINTS",
    "HOST_ID_TYPES",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "OUR_TABLES",
    "SCHEMA_VERSION",
    "TICKS",
    "TICK_LOCK_KEY",
    "BoundedPool",
    "CheckReport",
    "FleetRecord",
    "HostIndex",
    "Installed",
    "Migration",
    "MigrationError",
    "MigrationReport",
    "MissingHostTables",
    "PostgresHooks",
    "PostgresLedger",
    "charge_due_parameters",
    "charge_outcome",
    "check",
    "describe",
    "host_indexes",
    "host_schema_sql",
    "installed",
    "ledger_statements",
    "migrate",
    "migration_sql",
    "migrations",
    "missing_tables",
    "readable_statements",
    "shipped_sql",
    "uninstall",
    "uninstall_sql",
]
