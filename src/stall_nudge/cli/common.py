"""What every subcommand shares: errors, exit statuses, the DSN, and connecting."""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

import stall_nudge

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "ATTENTION",
    "FAILED",
    "OK",
    "USAGE",
    "CliError",
    "add_dsn_argument",
    "open_pool",
    "positive_duration",
    "resolve_dsn",
]

#: Exit statuses, the same for every command (docs/operations.md, "Exit statuses").
OK = 0  # done, and nothing needs a person
FAILED = 1  # could not do it: the database is unreachable or unusable, or the tick failed
USAGE = 2  # a bad option or DSN (argparse uses 2 as well)
ATTENTION = 3  # done, and something needs a person (status --check, an unrefunded nudge)

#: Seconds any one statement may take before it is abandoned.
COMMAND_TIMEOUT_S = 60.0


class CliError(Exception):
    """A user mistake or an unusable environment: reported as one line, exit ``status``."""

    def __init__(self, message: str, *, status: int = USAGE) -> None:
        super().__init__(message)
        self.status = status


def add_dsn_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        help="PostgreSQL DSN, e.g. postgresql://user@host:5432/db (default: $STALL_DSN)",
    )


def resolve_dsn(args: argparse.Namespace) -> str:
    """The DSN from --dsn or STALL_DSN, checked before it reaches the driver."""
    dsn: str | None = args.dsn or os.environ.get("STALL_DSN")
    if not dsn:
        raise CliError("no database given: pass --dsn DSN or set STALL_DSN")
    try:
        stall_nudge.check_dsn(dsn)
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None
    return dsn


def positive_duration(text: str) -> timedelta:
    """argparse type for intervals: ``15s``, ``2m``, ``1h``, ``1h30m``, or bare seconds, above 0."""
    from stall_core import parse_duration

    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not value > timedelta(0):
        raise argparse.ArgumentTypeError(f"must be a positive duration, got {text!r}")
    return value


@asynccontextmanager
async def open_pool(dsn: str, *, max_size: int = 4) -> AsyncIterator[asyncpg.Pool]:
    """stall_nudge's pool (every statement bounded), or a one-line CliError saying why not.

    A DSN mistake is a usage error; a server that cannot be reached, or refuses, is not.
    """
    try:
        async with stall_nudge.connect(dsn, timeout=COMMAND_TIMEOUT_S, max_size=max_size) as pool:
            yield pool
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None
    except stall_nudge.StartupError as exc:
        raise CliError(str(exc), status=FAILED) from None
