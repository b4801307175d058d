"""`stall-nudge migrate`: apply, print, check or remove what stall-nudge installs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import CliError, add_dsn_argument, open_pool, resolve_dsn

#: adapters.postgres.HOST_ID_TYPES and FOOTPRINTS, spelled out: building the parser loads
#: no driver (a test holds them equal).
HOST_ID_TYPES = ("text", "uuid", "bigint")
FOOTPRINTS = ("lean", "incremental")

#: `migrate --check`: the database differs from this build (1 is an error, 2 a usage mistake).
EXIT_BEHIND = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply stall-nudge's migrations, or print, check or remove what it installs",
        description="Apply stall-nudge's numbered migrations and its footprint, listing "
        "every object it creates. With "
        "--host-schema, first create the reference host tables (demos, tests). "
        "--print-sql prints what it would run; --check exits "
        f"{EXIT_BEHIND} when an object is missing, extra or different; --uninstall removes "
        "every object of ours.",
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
    parser.add_argument(
        "--footprint",
        choices=FOOTPRINTS,
        default=None,
        help="lean: nothing on the host's tables but the indexes the sweep reads (the default "
        "for a new install); incremental: triggers that make a tick cost what changed. "
        "Without it, a database keeps the footprint it has",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--print-sql",
        action="store_true",
        help="print the SQL migrate (or, with --uninstall, uninstall) would run; change nothing",
    )
    action.add_argument(
        "--check",
        action="store_true",
        help=f"change nothing; exit 0 when the database is as this build makes it, "
        f"{EXIT_BEHIND} when something is missing, extra or different",
    )
    parser.add_argument(
        "--uninstall",
        action="store_true",
        help="remove every object stall-nudge made (the ledger included); the host's rows "
        "stay as they are",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    dsn = resolve_dsn(args)
    if args.host_schema and (args.print_sql or args.check or args.uninstall):
        raise CliError("--host-schema creates tables: it goes with a plain migrate only")
    if args.uninstall and (args.check or args.footprint):
        raise CliError("--uninstall goes alone, or with --print-sql")
    if args.footprint and args.check:
        raise CliError("--check compares with what is recorded: it takes no --footprint")
    return asyncio.run(_migrate(dsn, args))


def _say(line: str) -> None:
    """What migrate did on stdout; an index build's progress on stderr."""
    print(line, file=sys.stderr if line.startswith("index ") else sys.stdout, flush=True)


async def _migrate(dsn: str, args: argparse.Namespace) -> int:
    from adapters.postgres import (
        DATABASE_ERRORS,
        MigrationError,
        describe,
        migrate,
        migration_sql,
        uninstall,
        uninstall_sql,
    )

    async with open_pool(dsn, max_size=2) as pool, pool.acquire() as conn:
        try:
            if args.print_sql:
                sql = (
                    await uninstall_sql(conn)
                    if args.uninstall
                    else await migration_sql(conn, footprint=args.footprint)
                )
                print(sql, end="")
                return 0
            if args.check:
                return await _check(conn)
            if args.uninstall:
                removed = await uninstall(conn, say=_say)
                print("uninstalled" if removed else "nothing of stall-nudge's was here")
                return 0
            async with pool.acquire() as monitor:
                report = await migrate(
                    conn,
                    host_schema=args.host_schema,
                    host_id_type=args.host_id_type,
                    footprint=args.footprint,
                    monitor=monitor,
                    say=lambda line: (
                        print(line, file=sys.stderr, flush=True)
                        if line.startswith("index ")
                        else _say(line)
                    ),
                )
        except MigrationError as exc:
            raise CliError(str(exc), status=1) from None
        except DATABASE_ERRORS as exc:
            raise CliError(f"migration failed: {describe(exc)}", status=1) from None
    changed = report.created or report.removed
    print(
        f"schema version {report.version}, footprint {report.footprint}"
        + ("" if changed else ": nothing to do")
    )
    return 0


async def _check(conn: Any) -> int:
    from adapters.postgres import check, installed

    report = await check(conn)
    for problem in report.problems:
        print(f"problem: {problem}")
    for advice in report.advice:
        print(f"advice: {advice}")
    if report.problems:
        return EXIT_BEHIND
    state = await installed(conn)
    assert state is not None  # check found no problem: migrated
    print(f"schema version {state.version}, footprint {state.footprint}: as migrate made it")
    return 0
