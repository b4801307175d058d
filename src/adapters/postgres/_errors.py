"""Turning database failures into the one error type the sweeper logs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

from stall_core import LedgerError

__all__ = ["DATABASE_ERRORS", "as_ledger_error", "describe"]

#: What a database call can raise when the server, the network or the schema fails.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    # asyncpg's protocol state error: a pool resetting a connection the server just
    # terminated (pg_terminate_backend) raises it; it is neither of the two above.
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


def describe(exc: BaseException) -> str:
    """A one-line reason for a database failure, with a hint for the usual fixes."""
    if isinstance(exc, asyncpg.UndefinedTableError):
        return (
            f"{exc} (is the database migrated? `stall-nudge migrate --check` says what is missing)"
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"{exc} (the database named in the DSN does not exist)"
    if isinstance(exc, TimeoutError):  # an OSError too, usually with no text at all
        return f"timed out ({str(exc).strip() or 'no answer from PostgreSQL'})"
    if isinstance(exc, OSError):
        return f"cannot reach PostgreSQL: {exc.strerror or exc}"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@contextmanager
def as_ledger_error(what: str) -> Iterator[None]:
    """Re-raise database and connection failures as ``LedgerError`` naming ``what`` failed."""
    try:
        yield
    except DATABASE_ERRORS as exc:
        raise LedgerError(f"{what}: {describe(exc)}") from exc
