"""What every subcommand shares: errors, the DSN, and connecting."""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from adapters.postgres import DATABASE_ERRORS, describe

#: Seconds any one statement may take before it is abandoned.
COMMAND_TIMEOUT_S = 60.0

__all__ = ["CliError", "add_dsn_argument", "open_pool", "positive_float", "resolve_dsn"]


class CliError(Exception):
    """A user mistake or an unusable environment: reported as one line, exit ``status``."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def add_dsn_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        help="PostgreSQL DSN, e.g. postgresql://user@host:5432/db (default: $STALL_DSN)",
    )


def resolve_dsn(args: argparse.Namespace) -> str:
    dsn: str | None = args.dsn or os.environ.get("STALL_DSN")
    if not dsn:
        raise CliError("no database given: pass --dsn DSN or set STALL_DSN")
    if not dsn.startswith(("postgresql://", "postgres://")):
        raise CliError(f"malformed DSN {_redact(dsn)!r}: expected postgresql://user@host:port/db")
    return dsn


def positive_float(text: str) -> float:
    """argparse type for intervals: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


@asynccontextmanager
async def open_pool(dsn: str, *, max_size: int = 4) -> AsyncIterator[asyncpg.Pool]:
    """An asyncpg pool, or a one-line CliError naming why the database is unusable."""
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=max_size,
            timeout=10,
            # A hung server or a long lock wait fails the tick instead of freezing the loop.
            command_timeout=COMMAND_TIMEOUT_S,
            server_settings={"application_name": "stall-nudge"},
        )
    except DATABASE_ERRORS as exc:
        raise CliError(f"cannot connect to {_redact(dsn)}: {describe(exc)}", status=1) from None
    except ValueError as exc:  # asyncpg's DSN parser
        raise CliError(f"malformed DSN {_redact(dsn)!r}: {exc}") from None
    try:
        yield pool
    finally:
        await pool.close()


def _redact(dsn: str) -> str:
    """The DSN with any password replaced, for messages."""
    scheme, sep, rest = dsn.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return dsn
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
