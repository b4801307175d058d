"""`stall-nudge sql`: print the statements the sweep, the hook directory and migrate send.

Each as its ``.sql`` file holds it: plain PostgreSQL under its ``-- name:``
header, comments kept. Nothing connects.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import OK, CliError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sql",
        help="print the SQL stall-nudge sends (no database needed)",
        description="Print every statement the Postgres adapter sends, or the named ones, as "
        "its source file holds it. --list names them.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="statements to print (all)")
    parser.add_argument("--list", action="store_true", help="list the statements, one a line")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from adapters.postgres import shipped_sql

    statements = {
        f"{source}.{name}": sql
        for source, named in shipped_sql().items()
        for name, sql in named.items()
    }
    if args.list:
        print("\n".join(statements))
        return OK
    wanted = args.names or list(statements)
    found = {
        key: sql
        for key, sql in statements.items()
        if key in wanted or key.partition(".")[2] in wanted
    }
    unknown = [n for n in wanted if not any(n in (k, k.partition(".")[2]) for k in statements)]
    if unknown:
        raise CliError(f"no statement named {', '.join(unknown)} (stall-nudge sql --list)")
    for key, sql in found.items():
        print(f"-- name: {key}\n{sql.rstrip()}\n")
    return OK
