"""The Postgres adapters: the nudge ledger, the hook directory and the migration.

Test support (the reference host's verbs, throwaway databases, the embedded
server) lives in ``stall_testing``, not here.
"""

from ._catalog import (
    GUEST_SEARCH_PATH,
    Installed,
    MigrationError,
    MissingHostTables,
    as_guest,
    installed,
    missing_tables,
    recorded_schema,
)
from ._errors import DATABASE_ERRORS, describe
from ._grants import missing_privileges
from ._history import read_history
from ._hooks import PostgresHooks
from ._ledger import (
    DELTA_BOUND,
    HISTORY_RETENTION,
    LOOKBACK,
    TICK_LOCK_KEY,
    FleetRecord,
    PostgresLedger,
    charge_due_parameters,
    charge_outcome,
    ledger_statements,
)
from ._manifest import (
    HOST_INDEXES,
    HOST_TABLES,
    LEDGER_TABLE,
    OUR_SCHEMA,
    OUR_TABLES,
    SWEEPER_PRIVILEGES,
    HostIndex,
    Migration,
    Privilege,
    migrations,
)
from ._migrate import HOST_ID_TYPES, MigrationReport, host_schema_sql, migrate
from ._plan import CheckReport, check, plan
from ._pool import BoundedPool
from ._shipped import shipped_sql
from ._steps import SCHEMA_VERSION, Plan, Step
from ._uninstall import uninstall, uninstall_plan

__all__ = [
    "DATABASE_ERRORS",
    "DELTA_BOUND",
    "GUEST_SEARCH_PATH",
    "HISTORY_RETENTION",
    "HOST_ID_TYPES",
    "HOST_INDEXES",
    "HOST_TABLES",
    "LEDGER_TABLE",
    "LOOKBACK",
    "OUR_SCHEMA",
    "OUR_TABLES",
    "SCHEMA_VERSION",
    "SWEEPER_PRIVILEGES",
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
    "Plan",
    "PostgresHooks",
    "PostgresLedger",
    "Privilege",
    "Step",
    "as_guest",
    "charge_due_parameters",
    "charge_outcome",
    "check",
    "describe",
    "host_schema_sql",
    "installed",
    "ledger_statements",
    "migrate",
    "migrations",
    "missing_privileges",
    "missing_tables",
    "plan",
    "read_history",
    "recorded_schema",
    "shipped_sql",
    "uninstall",
    "uninstall_plan",
]
