"""The database pool every entry point uses: a checked DSN, bounded calls, a bounded close."""

from __future__ import annotations

import asyncio
import configparser
import os
import re
from collections.abc import AsyncIterator, Mapping
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
    "DsnError",
    "check_dsn",
    "close_pool",
    "connect",
    "connect_timeout_seconds",
]


class DsnError(StartupError):
    """A mistake in the DSN, a libpq variable or the service file: the caller's to fix."""


# -- checking the DSN ----------------------------------------------------------------
#
# asyncpg reads a DSN's query, then the service file it names, then libpq's
# environment variables, and fails late and unclearly on a bad value: an
# int() traceback for PGPORT=abc, "cannot reach PostgreSQL" for a missing
# certificate file, a repr for a bad target_session_attrs. check_dsn reads
# the same sources in the same order and refuses, by name, what asyncpg
# would choke on or misread. It quotes no value: a password may sit next to it.
#
# Which asyncpg. This mirrors the reading order of asyncpg's private parser
# (connect_utils._parse_connect_dsn_and_args) as of 0.31 and 0.32: service
# files, sslnegotiation, gsslib and krbsrvname, and one port serving every
# host of a list, came in 0.30 and 0.31 (0.29 sent service= and
# sslnegotiation= to the server as settings). A parser of our own could not
# say what asyncpg will do, which is the check's whole point, and private
# code changes without notice; so pyproject pins asyncpg to the releases this
# was written for (>=0.31,<0.33), tests/unit/test_connect.py fails on any
# other, and raising the pin means reading the new parser against this file.

_SCHEMES = ("postgresql://", "postgres://")
_PORT = re.compile(r"[0-9]{1,5}")
_BRACKETED = re.compile(r"\[[^\]]+\](?::(.*))?")
_IPV6 = "an IPv6 address must be written whole in brackets, as [::1] or [::1]:5432"
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_REQUIRE, _VERIFY_CA = _SSL_MODES.index("require"), _SSL_MODES.index("verify-ca")
_TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
#: The values each enumerated parameter takes (sslmode and the TLS versions in either spelling).
_CHOICES = {
    "sslmode": _SSL_MODES,
    "sslnegotiation": ("postgres", "direct"),
    "target_session_attrs": (
        "any",
        "primary",
        "standby",
        "prefer-standby",
        "read-write",
        "read-only",
    ),
    "gsslib": ("gssapi", "sspi"),
    "ssl_min_protocol_version": _TLS_VERSIONS,
    "ssl_max_protocol_version": _TLS_VERSIONS,
}
#: libpq's environment variable for each parameter asyncpg also reads from there.
_ENV = {
    "sslmode": "PGSSLMODE",
    "sslnegotiation": "PGSSLNEGOTIATION",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "gsslib": "PGGSSLIB",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcrl": "PGSSLCRL",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
}
#: Variables whose text asyncpg sends to the server, so it must encode as UTF-8.
_SENT = ("PGHOST", "PGUSER", "PGDATABASE", "PGPASSWORD")
#: libpq's connect_timeout, which asyncpg would send to the server as a setting
#: (and fail): connect() takes it out of the DSN and bounds connecting with it.
_CONNECT_TIMEOUT = "connect_timeout"
#: The longest connect_timeout libpq accepts (a C int of seconds).
_MOST_SECONDS = 2**31 - 1


class _Sources:
    """A DSN's parameters where asyncpg looks: its query, the named service, the environment."""

    def __init__(
        self, query: dict[str, str], service: dict[str, str], env: Mapping[str, str]
    ) -> None:
        self.query = query
        self.service = service
        self.env = env

    def get(self, name: str) -> tuple[str, str] | None:
        """``(value, label)`` of ``name`` from the first source that sets it, or None."""
        if name in self.query:
            return self.query[name], f"the DSN's {name}"
        if name in self.service:
            return self.service[name], f"the service file's {name}"
        variable = _ENV.get(name, "")
        if variable in self.env:
            return self.env[variable], variable
        return None


def check_dsn(dsn: str, *, env: Mapping[str, str] | None = None) -> None:
    """Refuse what asyncpg would choke on or misread, naming the parameter or variable at fault.

    ``env`` stands for ``os.environ`` (the default), where libpq's variables live.
    Raises ``DsnError``; its message never quotes a value.
    """
    env = os.environ if env is None else env
    _check_text(dsn, env)
    if not dsn.startswith(_SCHEMES):
        raise DsnError("malformed DSN: expected postgresql://user@host:port/db")
    raw_netloc = dsn.partition("://")[2].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    userinfo, at, rest = raw_netloc.partition("@")
    if at and "@" in rest:  # asyncpg splits at the first '@', so the host would be wrong
        raise DsnError("malformed DSN: the user or password holds a raw '@': write it as %40")
    if at and ("[" in userinfo or "]" in userinfo):
        raise DsnError(
            "malformed DSN: the user or password holds a raw '[' or ']': write them as %5B, %5D"
        )
    try:
        parts = urlsplit(dsn)
    except ValueError:  # brackets that do not hold an IPv6 address
        raise DsnError(f"the DSN's host: {_IPV6}") from None
    if "#" in dsn:
        raise DsnError("malformed DSN: a raw '#' ends it early: write it as %23")
    try:
        # Blank values dropped and the last of a repeated name kept, as asyncpg does.
        query = dict(parse_qsl(parts.query, strict_parsing=True)) if parts.query else {}
    except ValueError:
        raise DsnError("malformed DSN: the query must be name=value pairs") from None
    if _CONNECT_TIMEOUT in query:
        connect_timeout_seconds(query[_CONNECT_TIMEOUT], f"the DSN's {_CONNECT_TIMEOUT}")
    sources = _Sources(query, _service(query.get("service"), env), env)
    authority = parts.netloc.partition("@")[2] if "@" in parts.netloc else parts.netloc
    hosts = _check_hosts(authority, sources)
    _check_ports(authority, hosts, sources)
    _check_choices(sources)
    level = _ssl_level(sources, hosts)
    negotiation = sources.get("sslnegotiation")
    if negotiation is not None and negotiation[0] == "direct" and level < _REQUIRE:
        raise DsnError(f"{negotiation[1]}=direct needs sslmode require, verify-ca or verify-full")
    _check_files(sources, level)


def connect_timeout_seconds(text: str, label: str) -> int:
    """libpq's connect_timeout in whole seconds, from 1 (never "wait forever", libpq's 0)."""
    if not (text.isascii() and text.isdigit() and 0 < int(text) <= _MOST_SECONDS):
        raise DsnError(f"{label} must be a whole number of seconds from 1")
    return int(text)


def _check_text(dsn: str, env: Mapping[str, str]) -> None:
    for name, text in (("the DSN", dsn), *((n, env[n]) for n in _SENT if n in env)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise DsnError(f"{name} holds text that is not valid UTF-8") from None


def _service(name: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The parameters of the service a DSN names, from the service file asyncpg reads."""
    if name is None:
        return {}
    if "PGSERVICEFILE" in env:
        path, label = Path(env["PGSERVICEFILE"]), "the service file (PGSERVICEFILE)"
    else:
        path, label = _home(env) / ".pg_service.conf", "the service file (~/.pg_service.conf)"
    parser = configparser.ConfigParser()
    try:
        parser.read(path)  # a missing or unreadable file reads as empty, as in asyncpg
        if not parser.has_section(name):
            raise DsnError(f"the DSN's service is not in {label}")
        return dict(parser[name])
    except configparser.Error as exc:  # its text may quote a password
        line = getattr(exc, "lineno", None)
        raise DsnError(f"{label} is not valid{f': line {line}' if line else ''}") from None


def _check_hosts(authority: str, sources: _Sources) -> list[str] | None:
    """The hosts asyncpg will try, each checked, or None for its defaults (localhost first)."""
    for text, source, unquoted in (
        (authority, "the DSN's", True),
        (sources.query.get("host"), "the DSN's", False),
        (sources.service.get("host"), "the service file's", False),
        (sources.env.get("PGHOST"), "PGHOST", False),
    ):
        if text:
            return [_host(spec, source, unquoted=unquoted) for spec in text.split(",")]
    return None


def _host(spec: str, source: str, *, unquoted: bool) -> str:
    """One host of a list (``h``, ``h:5432``, ``[::1]:5432``, ``/socket/dir``), its port checked."""
    label, port_label = (
        ("PGHOST", "the port in PGHOST")
        if source == "PGHOST"
        else (f"{source} host", f"{source} port")
    )
    if not spec:
        raise DsnError(f"{label} has an empty entry in its list")
    if spec.startswith("/"):  # a Unix socket directory
        return spec
    if spec.startswith("["):
        match = _BRACKETED.fullmatch(spec)
        if match is None:
            raise DsnError(f"{label}: {_IPV6}")
        host, port = spec[1 : spec.index("]")], match.group(1)
    else:
        host, _, port = spec.partition(":")
        host = unquote(host) if unquoted else host
        try:
            host.encode("idna")  # what the resolver does first, before any lookup
        except UnicodeError:
            raise DsnError(f"{label} is not a valid DNS name") from None
    if port:
        _check_port(unquote(port) if unquoted else port, port_label)
    return host


def _check_ports(authority: str, hosts: list[str] | None, sources: _Sources) -> None:
    """Every port written in the DSN or the service, and PGPORT whenever asyncpg reads it."""
    written = [
        (text, label)
        for text, label in (
            (sources.query.get("port"), "the DSN's port"),
            (sources.service.get("port"), "the service file's port"),
        )
        if text
    ]
    for text, label in written:
        for number in text.split(","):
            _check_port(number, label)
    pgport = sources.env.get("PGPORT")
    # asyncpg takes PGPORT as the default for hosts written before the path, and when
    # no port is named; else a port the query or the service names serves every host.
    if pgport and (authority or not written):
        text, label = pgport, "PGPORT"
    elif written and not authority:
        text, label = written[0]
    else:
        return
    numbers = text.split(",")
    for number in numbers:
        _check_port(number, label)
    if hosts is not None and 1 < len(numbers) != len(hosts):
        plural = "" if len(hosts) == 1 else "s"
        raise DsnError(f"{label} names {len(numbers)} ports for {len(hosts)} host{plural}")


def _check_port(text: str, label: str) -> None:
    if not (_PORT.fullmatch(text) and 0 < int(text) < 65536):
        raise DsnError(f"{label} must be a number from 1 to 65535")


def _check_choices(sources: _Sources) -> None:
    for name, choices in _CHOICES.items():
        found = sources.get(name)
        if found is None:
            continue
        value, label = found
        if name.startswith("ssl_m") and not value:  # asyncpg skips an empty TLS version
            continue
        if value.replace("_", "-" if name == "sslmode" else ".") not in choices:
            raise DsnError(f"{label} must be one of {', '.join(choices)}")


def _ssl_level(sources: _Sources, hosts: list[str] | None) -> int:
    """The sslmode asyncpg applies, as an index into _SSL_MODES; -1 for none (sockets only)."""
    mode = sources.get("sslmode")
    if mode is not None:
        return _SSL_MODES.index(mode[0].replace("_", "-"))
    tcp = hosts is None or any(not host.startswith("/") for host in hosts)
    return _SSL_MODES.index("prefer") if tcp else -1


def _check_files(sources: _Sources, level: int) -> None:
    """The certificate, key and revocation list files asyncpg will load must be there."""
    if level < _SSL_MODES.index("allow"):
        return
    if level >= _REQUIRE:
        root = _file(sources, "sslrootcert")
        at_home = _home(sources.env) / ".postgresql" / "root.crt"
        if root is None and level >= _VERIFY_CA and not at_home.is_file():
            raise DsnError(
                f"sslmode {_SSL_MODES[level]} needs a root certificate: set the DSN's "
                "sslrootcert or PGSSLROOTCERT, or put one at ~/.postgresql/root.crt"
            )
        _file(sources, "sslcrl")
    if _file(sources, "sslcert") is not None:
        _file(sources, "sslkey")


def _file(sources: _Sources, name: str) -> str | None:
    """The path ``name`` sets, refused unless it is a readable file; None when unset."""
    found = sources.get(name)
    if found is None or not found[0]:
        return None
    path, label = Path(found[0]), found[1]
    if not path.exists():
        raise DsnError(f"{label} names a file that does not exist")
    if path.is_dir():
        raise DsnError(f"{label} names a directory, not a file")
    if not os.access(path, os.R_OK):
        raise DsnError(f"{label} names a file this process cannot read")
    return found[0]


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


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
    query = urlsplit(dsn).query
    named = {name.lower() for name, _ in parse_qsl(query)} if query else set()
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

    Raises ``DsnError`` for a mistake in the DSN or libpq's variables, and
    ``StartupError`` when the server cannot be reached or refuses: one line,
    no password. Leaving the block closes the pool within ``timeout``
    seconds; leaving on an exception (a cancellation) cuts the connections
    off at once.
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
    except asyncpg.ClientConfigurationError as exc:  # a mistake check_dsn does not know
        raise DsnError(redact(f"malformed DSN: {describe(exc)}", secrets)) from None
    except DATABASE_ERRORS as exc:
        raise StartupError(
            redact(f"cannot connect to {_where(dsn)}: {describe(exc)}", secrets)
        ) from None
    except (ValueError, OverflowError) as exc:  # asyncpg's DSN parsing, IDNA included
        raise DsnError(redact(f"malformed DSN: {exc}", secrets)) from None
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    await close_pool(pool, timeout)
