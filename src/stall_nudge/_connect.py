"""The database pool every entry point uses: a checked DSN, bounded calls, a bounded close."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import asyncpg

from adapters.postgres import DATABASE_ERRORS, describe
from stall_core import positive_seconds

from .redaction import redact, secrets_of

__all__ = ["StartupError", "check_dsn", "close_pool", "connect"]


class StartupError(Exception):
    """The database cannot be used: a one-line reason that never quotes a password."""


_SCHEMES = ("postgresql://", "postgres://")
_PORT = re.compile(r"[0-9]{1,5}")


def _where(dsn: str) -> str:
    """The DSN's hosts and database, for messages: no user, no password, no options."""
    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "the DSN's server"
    socket = dict(parse_qsl(parts.query)).get("host")
    return f"{hosts or socket or 'the default host'}{parts.path}"


def check_dsn(dsn: str) -> None:
    """Refuse a DSN asyncpg would choke on, naming the field and never quoting its value."""
    try:
        dsn.encode("utf-8")
    except UnicodeEncodeError:
        raise StartupError("the DSN holds text that is not valid UTF-8") from None
    if not dsn.startswith(_SCHEMES):
        raise StartupError("malformed DSN: expected postgresql://user@host:port/db")
    netloc = dsn.partition("://")[2].split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    ports = [_port_of(host) for host in netloc.split(",")]
    ports = [p for p in ports if p is not None]
    ports += [v for k, v in parse_qsl(dsn.partition("?")[2]) if k == "port"]
    for port in ports:
        if port and not _valid_port(port):
            raise StartupError("malformed DSN: the port must be a number from 1 to 65535")
    env_port = os.environ.get("PGPORT")
    # asyncpg reads PGPORT only when the DSN names no port.
    if not ports and env_port and not all(_valid_port(p) for p in env_port.split(",")):
        raise StartupError("PGPORT must be a number from 1 to 65535")
    for name in ("PGHOST", "PGUSER", "PGDATABASE", "PGPASSWORD", "PGOPTIONS"):
        value = os.environ.get(name)
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise StartupError(f"{name} holds text that is not valid UTF-8") from None


def _port_of(host: str) -> str | None:
    """The port typed after a host (``h:5432``, ``[::1]:5432``), or None."""
    if host.startswith("["):
        _, bracket, rest = host.partition("]")
        return rest[1:] if bracket and rest.startswith(":") else None
    return host.rpartition(":")[2] if ":" in host else None


def _valid_port(text: str) -> bool:
    return bool(_PORT.fullmatch(text)) and 0 < int(text) < 65536


async def close_pool(pool: asyncpg.Pool, within: float) -> None:
    """Close ``pool`` gracefully within ``within`` seconds, else cut its connections off."""
    try:
        async with asyncio.timeout(within):
            await pool.close()
    except TimeoutError:
        # A black-holed server never answers the goodbye.
        pool.terminate()
    except BaseException:
        pool.terminate()
        raise


@asynccontextmanager
async def connect(
    dsn: str,
    *,
    # Not this call's deadline but each statement's, as PostgresLedger(timeout=...) names it.
    timeout: float = 30.0,  # noqa: ASYNC109
    max_size: int = 4,
) -> AsyncIterator[asyncpg.Pool]:
    """A pool on ``dsn`` whose every statement is bounded by ``timeout`` seconds.

    Raises ``StartupError`` (one line, no password) when the DSN is malformed
    or the server cannot be reached. Leaving the block closes the pool
    within ``timeout`` seconds; leaving on an exception (a cancellation)
    cuts the connections off at once.
    """
    positive_seconds("timeout", timeout)
    check_dsn(dsn)
    secrets = secrets_of(dsn)
    options: dict[str, Any] = {
        "min_size": 1,
        "max_size": max_size,
        "timeout": timeout,  # connecting, TLS and authentication included
        # A hung server or a long lock wait fails the call instead of freezing the loop.
        "command_timeout": timeout,
        "server_settings": {"application_name": "stall-nudge"},
    }
    try:
        pool = await asyncpg.create_pool(dsn, **options)
    except DATABASE_ERRORS as exc:
        raise StartupError(
            redact(f"cannot connect to {_where(dsn)}: {describe(exc)}", secrets)
        ) from None
    except UnicodeError:  # the IDNA codec, before any lookup
        raise StartupError("malformed DSN: a host name is not a valid DNS name") from None
    except (ValueError, OverflowError) as exc:  # asyncpg's DSN and option parsing
        raise StartupError(redact(f"malformed DSN: {exc}", secrets)) from None
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    await close_pool(pool, timeout)
