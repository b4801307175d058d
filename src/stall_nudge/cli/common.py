"""What every subcommand shares: errors, exit statuses, the DSN, and connecting."""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO, cast

import stall_nudge

if TYPE_CHECKING:
    from stall_core import Clock
    from stall_nudge._bootstrap import Parts

__all__ = [
    "ATTENTION",
    "FAILED",
    "LIBPQ_VARIABLES",
    "OK",
    "USAGE",
    "CliError",
    "Handling",
    "LibpqVariable",
    "add_dsn_argument",
    "duration",
    "open_parts",
    "positive_duration",
    "quiet_stdout",
    "resolve_dsn",
    "stdout_gone",
    "with_libpq_environment",
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


# -- libpq's environment variables ----------------------------------------------------
#
# Operators set libpq's variables for psql and expect every PostgreSQL client
# to follow them; asyncpg reads only some. The command line's rule: each
# variable libpq reads is honoured, by asyncpg or by us, or refused (exit 2,
# one line naming it, never its value); none is silently ignored. Refused are
# those that would change where or how securely we connect and that asyncpg
# ignores. Embedders pass what they mean to stall_nudge.connect and are not
# held to this. The table is the whole rule: libpq 18's list ("Environment
# Variables" in its documentation, and PGREQUIRESSL of older releases), and
# what asyncpg reads (stall_nudge._connect.ASYNCPG_VARIABLES). An empty
# variable counts as unset, as asyncpg takes its own.


class Handling(enum.Enum):
    """What the command line does with one of libpq's environment variables."""

    ASYNCPG = "asyncpg reads it as libpq does"
    PASSED = "stall-nudge hands it on, as a DSN parameter, where the DSN names none"
    REFUSED = "refused: exit 2, naming it"


class LibpqVariable(NamedTuple):
    """One row of the table: how a variable is honoured, or why it is refused.

    A NamedTuple, not an attrs value: this module loads at every start.
    """

    handling: Handling
    #: The connection parameter (ASYNCPG) or DSN parameter (PASSED) it stands for.
    parameter: str = ""
    #: For REFUSED: why it cannot be honoured, and what to do instead.
    reason: str = ""
    advice: str = ""


def _asyncpg(parameter: str) -> LibpqVariable:
    return LibpqVariable(Handling.ASYNCPG, parameter)


def _passed(parameter: str) -> LibpqVariable:
    return LibpqVariable(Handling.PASSED, parameter)


def _refused(reason: str, advice: str = "") -> LibpqVariable:
    return LibpqVariable(Handling.REFUSED, reason=reason, advice=advice)


_IGNORED = "asyncpg ignores it"

#: Every environment variable libpq reads, in its documentation's order.
LIBPQ_VARIABLES: dict[str, LibpqVariable] = {
    "PGHOST": _asyncpg("host"),
    "PGSSLNEGOTIATION": _asyncpg("sslnegotiation"),
    "PGHOSTADDR": _refused(_IGNORED, "put the address in the DSN's host"),
    "PGPORT": _asyncpg("port"),
    "PGDATABASE": _asyncpg("dbname"),
    "PGUSER": _asyncpg("user"),
    "PGPASSWORD": _asyncpg("password"),
    "PGPASSFILE": _asyncpg("passfile"),
    "PGREQUIREAUTH": _refused("asyncpg cannot limit the authentication methods a server asks for"),
    "PGCHANNELBINDING": _refused("asyncpg does no SCRAM channel binding"),
    "PGSERVICE": _refused(_IGNORED, "name the server in --dsn or STALL_DSN"),
    # asyncpg reads it only for a DSN's service=, never with PGSERVICE or the
    # system-wide file: not libpq's service lookup, so the DSN says it all.
    "PGSERVICEFILE": _refused(
        "the command line takes no service file from the environment",
        "name the server in --dsn or STALL_DSN (a DSN's service= reads ~/.pg_service.conf)",
    ),
    "PGOPTIONS": _refused(_IGNORED, "put options= in the DSN"),
    "PGAPPNAME": _passed("application_name"),
    "PGSSLMODE": _asyncpg("sslmode"),
    "PGREQUIRESSL": _refused(_IGNORED, "set sslmode=require in the DSN or PGSSLMODE"),
    "PGSSLCOMPRESSION": _refused(_IGNORED),
    "PGSSLCERT": _asyncpg("sslcert"),
    "PGSSLKEY": _asyncpg("sslkey"),
    "PGSSLCERTMODE": _refused(_IGNORED),
    "PGSSLROOTCERT": _asyncpg("sslrootcert"),
    "PGSSLCRL": _asyncpg("sslcrl"),
    "PGSSLCRLDIR": _refused(_IGNORED, "name a file in the DSN's sslcrl or PGSSLCRL"),
    "PGSSLSNI": _refused(_IGNORED),
    "PGREQUIREPEER": _refused("asyncpg cannot check which user runs the server's socket"),
    "PGSSLMINPROTOCOLVERSION": _asyncpg("ssl_min_protocol_version"),
    "PGSSLMAXPROTOCOLVERSION": _asyncpg("ssl_max_protocol_version"),
    "PGGSSENCMODE": _refused("asyncpg has no GSSAPI encryption", "use sslmode"),
    "PGKRBSRVNAME": _asyncpg("krbsrvname"),
    "PGGSSLIB": _asyncpg("gsslib"),
    "PGGSSDELEGATION": _refused("asyncpg never delegates GSSAPI credentials"),
    "PGCONNECT_TIMEOUT": _passed("connect_timeout"),  # stall_nudge.connect reads it
    # asyncpg speaks UTF-8 only: UTF8 is honoured as it is, any other encoding refused.
    "PGCLIENTENCODING": _passed("client_encoding"),
    "PGTARGETSESSIONATTRS": _asyncpg("target_session_attrs"),
    "PGLOADBALANCEHOSTS": _refused(_IGNORED, "order the DSN's hosts as wanted"),
    "PGMINPROTOCOLVERSION": _refused("asyncpg speaks protocol 3.0 only and ignores it"),
    "PGMAXPROTOCOLVERSION": _refused("asyncpg speaks protocol 3.0 only and ignores it"),
    # Session defaults libpq sets after connecting; we send them as startup settings.
    "PGDATESTYLE": _passed("DateStyle"),
    "PGTZ": _passed("TimeZone"),
    "PGGEQO": _passed("geqo"),
    # Where libpq finds the system-wide service file and its message translations.
    "PGSYSCONFDIR": _refused("asyncpg never reads the system-wide service file"),
    "PGLOCALEDIR": _refused("nothing here prints libpq's translated messages"),
}


def _refuse(env: Mapping[str, str]) -> None:
    """Raise ``CliError`` naming the first REFUSED variable ``env`` sets (not its value)."""
    for name, variable in LIBPQ_VARIABLES.items():
        if env.get(name) and variable.handling is Handling.REFUSED:
            advice = f" and {variable.advice}" if variable.advice else ""
            raise CliError(f"{name} is set, but {variable.reason}; unset it{advice}")


def _utf8(encoding: str) -> bool:
    """Whether PostgreSQL reads ``encoding`` as UTF8 (it ignores case and punctuation)."""
    return "".join(c for c in encoding if c.isalnum()).lower() in {"utf8", "unicode"}


def with_libpq_environment(dsn: str, env: Mapping[str, str]) -> str:
    """``dsn`` with the variables the command line hands on; refuses a REFUSED one.

    Raises ``CliError`` naming the first refused variable set, or one whose
    value cannot be honoured (``stall_nudge.DsnError`` for PGCONNECT_TIMEOUT).
    A parameter the DSN already names wins over its variable, as in libpq.
    """
    _refuse(env)
    from urllib.parse import parse_qsl, quote, urlencode, urlsplit

    from stall_nudge._connect import connect_timeout_seconds

    query = urlsplit(dsn).query
    named = {key.lower() for key, _ in parse_qsl(query)}
    added: list[tuple[str, str]] = []
    for name, variable in LIBPQ_VARIABLES.items():
        value = env.get(name)
        if not value or variable.handling is not Handling.PASSED:
            continue
        if name == "PGCLIENTENCODING":
            if not _utf8(value):
                raise CliError(f"{name} must name UTF8: asyncpg speaks UTF-8 only")
            continue  # what asyncpg asks for anyway
        if name == "PGCONNECT_TIMEOUT":
            connect_timeout_seconds(value, name)
        if variable.parameter.lower() not in named:
            added.append((variable.parameter, value))
    if not added:
        return dsn
    joint = "&" if query else "" if dsn.endswith("?") else "?"
    return f"{dsn}{joint}{urlencode(added, quote_via=quote)}"


def resolve_dsn(args: argparse.Namespace) -> str:
    """The DSN from --dsn or STALL_DSN, checked, with libpq's variables honoured or refused."""
    dsn: str | None = args.dsn or os.environ.get("STALL_DSN")
    if not dsn:
        raise CliError("no database given: pass --dsn DSN or set STALL_DSN")
    try:
        _refuse(os.environ)  # first: PGSERVICEFILE would otherwise be read by the check
        stall_nudge.check_dsn(dsn)
        return with_libpq_environment(dsn, os.environ)
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None


def duration(text: str) -> timedelta:
    """argparse type for a duration of 0 or more: ``15s``, ``2m``, ``1h30m``, or bare seconds."""
    from stall_core import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_duration(text: str) -> timedelta:
    """argparse type for intervals: a ``duration`` above 0."""
    value = duration(text)
    if not value > timedelta(0):
        raise argparse.ArgumentTypeError(f"must be a positive duration, got {text!r}")
    return value


@asynccontextmanager
async def open_parts(
    dsn: str,
    *,
    max_size: int = 4,
    clock: Clock | None = None,
    queue_size: int | None = None,
) -> AsyncIterator[Parts]:
    """The composition root's parts on ``dsn`` (``stall_nudge._bootstrap``), or a one-line CliError.

    Every statement is bounded by ``COMMAND_TIMEOUT_S``. A DSN mistake is a
    usage error; a server that cannot be reached, or refuses, is not.
    """
    from stall_nudge._bootstrap import QUEUE_SIZE, bootstrap

    try:
        async with bootstrap(
            dsn,
            clock=clock,
            timeout=COMMAND_TIMEOUT_S,
            max_size=max_size,
            queue_size=QUEUE_SIZE if queue_size is None else queue_size,
        ) as parts:
            yield parts
    except stall_nudge.DsnError as exc:
        raise CliError(str(exc), status=USAGE) from None
    except stall_nudge.StartupError as exc:
        raise CliError(str(exc), status=FAILED) from None


class _QuietStdout:
    """stdout while a command runs: a reader that went away (``| head -1``) ends the output only.

    The first ``BrokenPipeError`` points the descriptor at /dev/null (what
    Python's documentation advises, so the interpreter's last flush cannot
    fail either) and drops what follows; the command goes on to its usual
    exit status. Anything else is the real stream's.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._to_devnull()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._to_devnull()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _to_devnull(self) -> None:
        self.gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """While a command runs, a closed stdout drops its output instead of raising."""
    real = sys.stdout
    quiet = _QuietStdout(real)
    sys.stdout = cast("TextIO", quiet)
    try:
        yield
    finally:
        quiet.flush()  # what is still buffered, while a closed pipe is still caught
        sys.stdout = real


def stdout_gone() -> bool:
    """Whether the reader of stdout went away (``quiet_stdout``): what is printed is dropped."""
    stdout: object = sys.stdout
    return isinstance(stdout, _QuietStdout) and stdout.gone
