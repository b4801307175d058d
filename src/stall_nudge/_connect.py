"""The database pool every entry point uses: a checked DSN, bounded calls, a bounded close."""

from __future__ import annotations

import asyncio
import configparser
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncpg

from adapters.postgres import DATABASE_ERRORS, describe
from stall_core import positive_seconds

from ._startup import StartupError
from .redaction import redact, secrets_of

__all__ = [
    "ASYNCPG_VARIABLES",
    "DsnError",
    "check_dsn",
    "close_pool",
    "connect",
    "connect_timeout_seconds",
]


class DsnError(StartupError):
    """A mistake in the DSN, a libpq variable or the service file: the caller's to fix."""


# -- the DSN and libpq's variables ---------------------------------------------------
#
# asyncpg reads the DSN, the service file a DSN names and libpq's variables
# itself, and refuses a bad setting before it opens any connection: a
# ValueError (ClientConfigurationError is one), a configparser error, or an
# OSError loading a certificate file. connect() turns that into a DsnError
# naming where the fault lies: the DSN, its service file, or the variables of
# ASYNCPG_VARIABLES that are set, then asyncpg's reason with each quoted piece
# the caller wrote masked, and every password: a password may sit next to a
# value. check_dsn refuses beforehand the few mistakes asyncpg would not name,
# or would not refuse at all.

#: libpq's variables for the connection parameters asyncpg takes: it documents
#: reading their defaults from libpq's variables. Its service file aside, these
#: are the variables a setting asyncpg refuses can come from.
ASYNCPG_VARIABLES = (
    *("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGPASSFILE"),
    *("PGSSLMODE", "PGSSLNEGOTIATION", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLCRL"),
    *("PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGTARGETSESSIONATTRS"),
    *("PGKRBSRVNAME", "PGGSSLIB"),
)
#: The file parameters asyncpg loads before connecting, each with its variable.
_FILES = {
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
}
#: Variables whose text asyncpg sends to the server: it fails on one that is not UTF-8
#: with an AttributeError of its own, not a message.
_SENT = ("PGHOST", "PGUSER", "PGDATABASE", "PGPASSWORD")
#: What creating a pool raises: for a setting asyncpg refuses, or a server it cannot use.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    *(ValueError, OverflowError, configparser.Error),
    *DATABASE_ERRORS,
)
#: libpq's connect_timeout, which asyncpg would send to the server as a setting
#: (and fail): connect() takes it out of the DSN and bounds connecting with it.
_CONNECT_TIMEOUT = "connect_timeout"
#: The longest connect_timeout libpq accepts (a C int of seconds).
_MOST_SECONDS = 2**31 - 1


def check_dsn(dsn: str, *, env: Mapping[str, str] | None = None) -> None:
    """Refuse, naming it, a mistake asyncpg would not name or would pass over.

    Text that is not UTF-8; a raw '@' in the user or password, which would
    send the password's tail to the resolver as a host name; a bad
    connect_timeout; a DSN's service that its service file does not hold,
    which asyncpg skips without a word. ``env`` stands for ``os.environ``
    (the default). Raises ``DsnError``; its message never quotes a value.
    """
    env = os.environ if env is None else env
    for name, text in (("the DSN", dsn), *((n, env[n]) for n in _SENT if n in env)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise DsnError(f"{name} holds text that is not valid UTF-8") from None
    authority = re.split(r"[/?#]", dsn.partition("://")[2], maxsplit=1)[0]
    if authority.count("@") > 1:
        raise DsnError("the DSN's user or password holds a raw '@': write it as %40")
    _split_connect_timeout(dsn)
    service = _query(dsn).get("service")
    if not service:
        return
    path, label = _service_file(env)
    parser = configparser.ConfigParser()
    try:
        parser.read(path)  # a missing or unreadable file reads as empty
        # Reading the values, as asyncpg does, finds a '%' that configparser cannot expand.
        values = dict(parser[service]) if parser.has_section(service) else None
    except configparser.Error as exc:
        raise DsnError(_service_refusal(exc, env)) from None
    if values is None:
        raise DsnError(f"the DSN's service is not in {label}: asyncpg would ignore it")


def connect_timeout_seconds(text: str, label: str) -> int:
    """libpq's connect_timeout in whole seconds, from 1 (never "wait forever", libpq's 0)."""
    if not (text.isascii() and text.isdigit() and 0 < int(text) <= _MOST_SECONDS):
        raise DsnError(f"{label} must be a whole number of seconds from 1")
    return int(text)


def _query(dsn: str) -> dict[str, str]:
    """The DSN's query parameters: blank ones dropped, the last of a repeated name kept."""
    return dict(parse_qsl(dsn.partition("?")[2].partition("#")[0]))


def _service_file(env: Mapping[str, str]) -> tuple[Path, str]:
    """Where a DSN's service is looked up (libpq's PGSERVICEFILE, else ~/.pg_service.conf)."""
    if env.get("PGSERVICEFILE"):
        return Path(env["PGSERVICEFILE"]), "the service file (PGSERVICEFILE)"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".pg_service.conf", "the service file (~/.pg_service.conf)"


def _service_refusal(exc: configparser.Error, env: Mapping[str, str]) -> str:
    """Where the service file is wrong, by line or name: configparser's text quotes the value."""
    line, option = getattr(exc, "lineno", None), getattr(exc, "option", None)
    where = f": line {line}" if line else f": its {option}" if option else ""
    return f"{_service_file(env)[1]} is not valid{where}"


def _refusal(exc: BaseException, dsn: str, env: Mapping[str, str]) -> str | None:
    """The DsnError's line for what asyncpg raised, or None when no setting is at fault."""
    if isinstance(exc, configparser.Error):
        return _service_refusal(exc, env)
    query = _query(dsn)
    if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
        # Else a Unix socket that is not there: the server's fault, not the settings'.
        named = [
            label
            for parameter, variable in _FILES.items()
            for label, path in (
                (f"the DSN's {parameter}", query.get(parameter)),
                (variable, env.get(variable)),
            )
            if path and not (os.path.isfile(path) and os.access(path, os.R_OK))
        ]
        return f"{_either(named)} names no file this process can read" if named else None
    if not isinstance(exc, ValueError | OverflowError):
        return None
    where = [
        "the DSN",
        *(["its service file"] if query.get("service") else []),
        *(name for name in ASYNCPG_VARIABLES if env.get(name)),
    ]
    reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    # asyncpg may quote a value, or the head of a password that a raw '#', '/' or
    # '?' cut off into the port: mask every quoted piece the caller wrote.
    written = [dsn, *(value for name, value in env.items() if name.startswith("PG"))]
    reason = re.sub(
        r"(['\"])(.+?)\1",
        lambda m: f"{m[1]}***{m[1]}" if any(m[2] in text for text in written) else m[0],
        reason,
    )
    return f"asyncpg refuses {_either(where)}: {reason}"


def _either(names: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: the places a fault may lie."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _split_connect_timeout(dsn: str) -> tuple[str, int | None]:
    """``dsn`` without its connect_timeout, and that timeout (the last one, as for any name)."""
    head, mark, query = dsn.partition("?")
    if not mark:
        return dsn, None
    kept, seconds = [], None
    for piece in query.split("&"):
        name, _, value = piece.partition("=")
        if unquote(name) != _CONNECT_TIMEOUT:
            kept.append(piece)
        elif value:  # a blank one is dropped, as asyncpg drops any blank parameter
            seconds = connect_timeout_seconds(unquote(value), f"the DSN's {_CONNECT_TIMEOUT}")
    return (f"{head}?{'&'.join(kept)}" if kept else head), seconds


def _settings(dsn: str) -> dict[str, str]:
    """Our session settings, each yielding to one the DSN's query names, as libpq's defaults do.

    asyncpg sends the DSN's unknown query parameters as settings, but lets
    ``server_settings`` override them: a DSN's application_name would be lost.
    """
    named = {name.lower() for name in _query(dsn)}
    return {"application_name": "stall-nudge"} if "application_name" not in named else {}


def _where(dsn: str) -> str:
    """The DSN's hosts and database, for messages: no user, no password, no options."""
    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
    except ValueError:
        return "the DSN's server"
    socket = dict(parse_qsl(parts.query)).get("host")
    return f"{hosts or socket or 'the default host'}{parts.path}"


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

    Connecting (TLS and authentication included) is bounded by ``timeout``
    too, or by the DSN's ``connect_timeout`` (libpq's, in whole seconds),
    which asyncpg itself does not read. Connections say ``application_name``
    ``stall-nudge`` unless the DSN names another.

    Raises ``DsnError`` for a mistake in the DSN, its service file or
    libpq's variables, and ``StartupError`` when the server cannot be
    reached or refuses: one line, no password. Leaving the block closes the
    pool within ``timeout`` seconds; leaving on an exception (a
    cancellation) cuts the connections off at once.
    """
    positive_seconds("timeout", timeout)
    check_dsn(dsn)
    secrets = secrets_of(dsn)
    database, connect_timeout = _split_connect_timeout(dsn)
    options: dict[str, Any] = {
        "min_size": 1,
        "max_size": max_size,
        "timeout": timeout if connect_timeout is None else connect_timeout,
        # A hung server or a long lock wait fails the call instead of freezing the loop.
        "command_timeout": timeout,
        "server_settings": _settings(dsn),
    }
    try:
        pool = await asyncpg.create_pool(database, **options)
    except _CONNECT_ERRORS as exc:
        refusal = _refusal(exc, dsn, os.environ)
        if refusal is not None:
            raise DsnError(redact(refusal, secrets)) from None
        raise StartupError(
            redact(f"cannot connect to {_where(dsn)}: {describe(exc)}", secrets)
        ) from None
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    await close_pool(pool, timeout)
