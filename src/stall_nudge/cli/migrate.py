"""`stall-nudge migrate`: apply, print, check or remove what stall-nudge installs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import CliError, add_dsn_argument, open_parts, resolve_dsn

#: adapters.postgres.HOST_ID_TYPES, spelled out: building the parser loads no driver (a
#: test holds them equal).
HOST_ID_TYPES = ("text", "varchar", "uuid", "bigint")

#: `migrate --check`: the database differs from this build (1 is an error, 2 a usage mistake).
EXIT_BEHIND = 3


class _Retired(argparse.Action):
    """An option an earlier build had: using it is a usage error that says so."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        parser.error(
            "--footprint was retired: there is one footprint now, with nothing on the host's "
            "tables but indexes (docs/operations.md); run migrate without it"
        )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply stall-nudge's migrations, or print, check or remove what it installs",
        description="Bring the database to this build: apply its numbered migrations, build "
        "the indexes its reads need on the host's tables, and remove what no build of ours "
        "uses. --print-sql prints exactly what it would run (nothing when current); --check "
        f"exits {EXIT_BEHIND} with one line a problem (missing, extra, different or invalid "
        "objects, grants that drifted); --grant ROLE gives a sweeping role what sweep and "
        "status need; --uninstall removes every object of ours and the grants it gave. "
        "With --host-schema, first create the reference host tables (demos, tests).",
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
        "--schema",
        metavar="NAME",
        help="the schema holding switchboard's tables, where more than one schema holds tables "
        "of those names (default: the one migrate recorded, else the only one)",
    )
    parser.add_argument(
        "--grant",
        metavar="ROLE",
        help="grant ROLE exactly what `sweep` and `status` need (recorded: --check "
        "reports drift, --uninstall revokes)",
    )
    parser.add_argument("--footprint", action=_Retired, help=argparse.SUPPRESS)
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
        f"{EXIT_BEHIND} when something is missing, extra, different or invalid",
    )
    parser.add_argument(
        "--uninstall",
        action="store_true",
        help="remove every object stall-nudge made (the ledger included) and revoke the grants "
        "it gave; the host's rows stay as they are",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    dsn = resolve_dsn(args)
    if args.host_schema and (args.check or args.uninstall):
        raise CliError("--host-schema creates tables: it goes with migrate or --print-sql only")
    if args.uninstall and (args.check or args.grant or args.schema):
        raise CliError("--uninstall goes alone, or with --print-sql")
    if args.grant is not None and args.check:
        raise CliError("--check changes nothing: it takes no --grant")
    return asyncio.run(_migrate(dsn, args))


def _say(line: str) -> None:
    """What migrate did on stdout; an index build's progress and a busy table on stderr."""
    progress = line.startswith(("index ", "the host's table is busy"))
    print(line, file=sys.stderr if progress else sys.stdout, flush=True)


async def _migrate(dsn: str, args: argparse.Namespace) -> int:
    from adapters.postgres import (
        DATABASE_ERRORS,
        MigrationError,
        describe,
        host_schema_sql,
        migrate,
        plan,
        uninstall,
        uninstall_plan,
    )

    async with open_parts(dsn, max_size=2) as parts, parts.pool.acquire() as conn:
        try:
            if args.print_sql:
                if args.uninstall:
                    print((await uninstall_plan(conn)).sql(), end="")
                    return 0
                if args.host_schema:
                    # The reference tables first, as migrate --host-schema makes them, then
                    # the plan on them: rolled back, since --print-sql changes nothing.
                    tr = conn.transaction()
                    await tr.start()
                    try:
                        print(host_schema_sql(args.host_id_type))
                        await conn.execute(host_schema_sql(args.host_id_type))
                        print(
                            (await plan(conn, grant=args.grant, schema=args.schema)).sql(), end=""
                        )
                    finally:
                        await tr.rollback()
                    return 0
                print((await plan(conn, grant=args.grant, schema=args.schema)).sql(), end="")
                return 0
            if args.check:
                return await _check(conn)
            if args.uninstall:
                removed = await uninstall(conn, say=_say)
                print("uninstalled" if removed else "nothing of stall-nudge's was here")
                return 0
            async with parts.pool.acquire() as monitor:
                report = await migrate(
                    conn,
                    host_schema=args.host_schema,
                    host_id_type=args.host_id_type,
                    schema=args.schema,
                    grant=args.grant,
                    monitor=monitor,
                    say=_say,
                )
        except MigrationError as exc:
            raise CliError(str(exc), status=1) from None
        except DATABASE_ERRORS as exc:
            raise CliError(f"migration failed: {describe(exc)}", status=1) from None
    print(
        f"schema version {report.version}"
        + ("" if report.repaired else ": nothing to do, the database is as this build makes it")
    )
    if report.for_dba:
        print(
            "this role may not grant these on the host's tables; a DBA must run them:",
            file=sys.stderr,
        )
        for sql in report.for_dba:
            print(f"{sql};")
        return EXIT_BEHIND
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
    print(f"schema version {state.version}: as this build makes it")
    return 0
