"""`stall-nudge migrate`: create the ledger table and our indexes (idempotent)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from adapters.postgres import DATABASE_ERRORS, MissingHostTables, describe, migrate

from ._common import CliError, add_dsn_argument, open_pool, resolve_dsn


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply stall-nudge's migration (idempotent)",
        description="Create queue_stall_nudges and the indexes the sweep needs. "
        "With --host-schema, first create the reference host tables (demos, tests).",
    )
    add_dsn_argument(parser)
    parser.add_argument(
        "--host-schema",
        action="store_true",
        help="also create the reference switchboard tables (for demos and tests)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    return asyncio.run(_migrate(dsn, host_schema=args.host_schema))


async def _migrate(dsn: str, *, host_schema: bool) -> int:
    async with open_pool(dsn, max_size=1) as pool, pool.acquire() as conn:
        try:
            report = await migrate(conn, host_schema=host_schema)
        except MissingHostTables as exc:
            raise CliError(str(exc), status=1) from None
        except DATABASE_ERRORS as exc:
            raise CliError(f"migration failed: {describe(exc)}", status=1) from None
    if report.created:
        print("created: " + ", ".join(report.created))
    else:
        print("nothing to do: schema is up to date")
    return 0
