"""The ``stall-nudge`` command line, part of the composition root ``stall_nudge``.

Each subcommand lives in its own module with a ``register(subparsers)``
function; its parser sets ``run``, a callable taking the parsed arguments
and returning the exit status. A ``CliError`` is a user mistake: one line on
stderr and a non-zero exit, never a traceback. The parts a command uses
come from the composition root's one ``bootstrap`` (``common.open_parts``),
or from ``open_reaper``, which an embedder uses too.

Starting is cheap: a command module's top level imports only what its
parser needs, and each function imports the driver, the HTTP stack, the
core or the simulator when it runs. The demo's module is all real parts, so
its parser is built here and the module loads in its ``run``.
tests/cli/test_start.py keeps to that; benchmarks/cli_start.py times it.

Exit statuses, for every command: 0 done and nothing needs a person, 1 could
not do it (database unreachable or unusable, the tick failed), 2 usage, 3
done and something needs a person.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import history, migrate, operate, simulate, sql, status, sweep
from .common import CliError, quiet_stdout

__all__ = ["CliError", "build_parser", "main"]


class _Version(argparse.Action):
    """``--version``, looked up only when asked: importlib.metadata is slow to import."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib import metadata

        try:
            version = metadata.version("stall-nudge")
        except metadata.PackageNotFoundError:  # running from a source tree
            version = "0+unknown"
        print(f"{parser.prog} {version}")
        parser.exit()


def _register_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="play the reported case and the lost wake end to end (embedded PostgreSQL)",
        description="Start an embedded PostgreSQL, a loopback notify hook and a one-shot "
        "consumer, and play SPEC-0038's reported case and lost wake on an accelerated clock.",
    )
    parser.add_argument(
        "--dsn",
        help="use this PostgreSQL server instead of the embedded one (a throwaway "
        "database is created on it and dropped afterwards)",
    )
    parser.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args)


class _Parser(argparse.ArgumentParser):
    """Reports a bad option like every user mistake: one line naming it, exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        raise CliError(message.removeprefix("argument "))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stall-nudge",
        description="Level-triggered queue-stall nudges for switchboard (SPEC-0038).",
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    parser.add_argument(
        "--log-level",
        choices=_LEVELS,
        default=None,
        help="the least severe log record written to stderr (default: info for the sweep "
        "loop, where a tick that charged, cleared or refused nothing logs at debug; warning "
        "for one-shot commands, whose answer is on stdout)",
    )
    parser.add_argument(
        "--log-format",
        choices=_FORMATS,
        default=None,
        help="how each log record is written to stderr: text (default), or json, one object a "
        'line with the keys "ts", "level", "logger", "event", "message", then the record\'s '
        "fields (docs/operations.md)",
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    migrate.register(commands)
    sweep.register(commands)
    status.register(commands)
    operate.register(commands)
    history.register(commands)
    _register_demo(commands)
    simulate.register(commands)
    sql.register(commands)
    # Global, and accepted after the command as well, where operators tend to type it.
    for command in commands.choices.values():
        command.add_argument(
            "--log-level", choices=_LEVELS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        command.add_argument(
            "--log-format", choices=_FORMATS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


_LEVELS = ("debug", "info", "warning", "error")
_FORMATS = ("text", "json")
#: The structured fields our records carry (``extra=``), in the order they are shown.
_FIELDS = ("tick", "endpoint", "queue", "nudge", "todo", "failures")


class _Formatter(logging.Formatter):
    """One line a record: the message, then its structured fields as ``key=value``.

    Control characters are escaped: a queue name or an error text quoting
    one cannot drive the operator's terminal.
    """

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{name}={getattr(record, name)}" for name in _FIELDS if hasattr(record, name)
        )
        message = record.getMessage() + (f" [{fields}]" if fields else "")
        from stall_nudge._text import line  # loads the library only when a line is written

        safe = logging.makeLogRecord({**record.__dict__, "msg": line(message), "args": None})
        # A traceback keeps its lines: it comes from our code, not from a sender.
        return super().format(safe)


class _JsonFormatter(logging.Formatter):
    """One JSON object a record, on one line, for a log pipeline.

    Always ``ts`` (UTC, ISO 8601 with microseconds), ``level``, ``logger``,
    ``event`` (a stable name for the records a pipeline keys on, else null)
    and ``message`` (escaped as in text); then those of ``_FIELDS`` the record
    carries, and ``traceback`` when it has one.
    """

    def format(self, record: logging.LogRecord) -> str:
        import json
        from datetime import UTC, datetime

        from stall_nudge._text import line

        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None),
            "message": line(record.getMessage()),
        }
        entry.update((name, getattr(record, name)) for name in _FIELDS if hasattr(record, name))
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=True, default=str)


def _configure_logging(level: str, form: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if form == "json"
        else _Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Drivers stay at warning; the level applies to this library's own loggers.
    root.setLevel(logging.WARNING)
    for name in ("stall_core", "adapters", "stall_nudge"):
        logging.getLogger(name).setLevel(level.upper())


def _default_level(args: argparse.Namespace) -> str:
    """info for the sidecar loop (its log is its output), warning for one-shot commands."""
    loop = args.command == "sweep" and not args.once
    return "info" if loop else "warning"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status. A closed stdout only drops output (``quiet_stdout``)."""
    with quiet_stdout():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _configure_logging(args.log_level or _default_level(args), args.log_format or "text")
        run = getattr(args, "run", None)
        if run is None:
            parser.print_help()
            return 2
        status: int = run(args)
    except CliError as exc:
        from stall_nudge._text import line

        print(f"stall-nudge: error: {line(str(exc))}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    return status
