"""`stall-nudge migrate`: create our tables, triggers and indexes, or print or check them."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from adapters.postgres import (
    DATABASE_ERRORS,
    HOST_ID_TYPES,
    SCHEMA_VERSION,
    MigrationError,
    describe,
    migrate,
    migration_sql,
    schema_behind,
)

from .common import CliError, add_dsn_argument, open_pool, resolve_dsn

#: `migrate --check`: the schema is behind this build (1 is an error, 2 a usage mistake).
EXIT_BEHIND = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply stall-nudge's migration (idempotent), or print or check it",
        description="Create stall-nudge's tables, triggers and indexes (schema version "
        f"{SCHEMA_VERSION}). With --host-schema, first create the reference host tables "
        "(demos, tests). --print-sql prints what it would run; --check exits "
        f"{EXIT_BEHIND} when the schema is behind this build.",
    )
    add_dsn_argument(parser)
    parser.add_argument(
        "--host-schema",
        action="store_true",
        help="also create the reference switchboard tables (for demos and tests)",
    )
    parser.add_argument(
        "--host-id-type",
        choices=HOST_ID_TYPES,
        default="text",
        help="id type of the reference host tables --host-schema creates (default text)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--print-sql",
        action="store_true",
        help="print the SQL migrate would run on this database, change nothing",
    )
    action.add_argument(
        "--check",
        action="store_true",
        help=f"change nothing; exit 0 when the schema is current, {EXIT_BEHIND} when behind",
    )
    parser.add_argument(
        "--concurrently",
        action="store_true",
        help="with --print-sql: build every host-table index with CREATE INDEX CONCURRENTLY "
        "(the default does so for tables of 100,000 rows or more)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    if args.concurrently and not args.print_sql:
        raise CliError("--concurrently goes with --print-sql")
    if args.host_schema and (args.print_sql or args.check):
        raise CliError("--host-schema creates tables: it does not go with --print-sql or --check")
    return asyncio.run(_migrate(dsn, args))


async def _migrate(dsn: str, args: argparse.Namespace) -> int:
    async with open_pool(dsn, max_size=1) as pool, pool.acquire() as conn:
        try:
            if args.print_sql:
                print(await migration_sql(conn, concurrently=args.concurrently), end="")
                return 0
            if args.check:
                reasons = await schema_behind(conn)
                for reason in reasons:
                    print(f"behind: {reason}")
                if reasons:
                    return EXIT_BEHIND
                print(f"schema version {SCHEMA_VERSION}: up to date")
                return 0
            report = await migrate(
                conn, host_schema=args.host_schema, host_id_type=args.host_id_type
            )
        except MigrationError as exc:
            raise CliError(str(exc), status=1) from None
        except DATABASE_ERRORS as exc:
            raise CliError(f"migration failed: {describe(exc)}", status=1) from None
    if report.created:
        print("created: " + ", ".join(report.created))
    else:
        print("nothing to do: schema is up to date")
    return 0
