"""The ``stall-nudge`` command: the composition root that wires the adapters.

Each subcommand lives in its own module with a ``register(subparsers)``
function; its parser sets ``run``, a callable taking the parsed arguments
and returning the exit status. A ``CliError`` is a user mistake: one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib import metadata

from . import _demo, _migrate, _simulate, _status, _sweep
from ._common import CliError

__all__ = ["CliError", "build_parser", "main"]


def _version() -> str:
    try:
        return metadata.version("stall-nudge")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stall-nudge",
        description="Level-triggered queue-stall nudges for switchboard (SPEC-0038).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for module in (_migrate, _sweep, _status, _demo, _simulate):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        status: int = run(args)
    except CliError as exc:
        print(f"stall-nudge: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    return status
