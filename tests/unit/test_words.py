"""One word per concept: a retired word never comes back in src/, docs/, README.md or the CLI.

Retired: ``pending_gated`` and ``pending_ungated`` (now ``sendable`` and
``held_by_gate``, the status table's SENDABLE and HELD BY GATE), the verdict
``ungated`` (now ``held-by-gate``), "drain" for deleting a ledger row (now
"clear": ``Clear``, ``cleared``), and the ``sweeps`` table. "Drained" stays,
for a queue with no work, as SPEC-0038 uses it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from datetime import timedelta
from pathlib import Path

import pytest

from stall_core import PacingPolicy, PairStatus, Verdict
from stall_nudge.cli import build_parser, main
from stall_nudge.cli.status import render_table, status_json
from stall_nudge.status_page import render_page
from tests.support import T0

ROOT = Path(__file__).parents[2]
TEXT = {".py", ".sql", ".md", ".html", ".js", ".css", ".txt", ".toml"}
RETIRED = {
    "pending_gated / pending_ungated": re.compile(r"pending_(un)?gated", re.I),
    "ungated": re.compile(r"(?<![a-z_])ungated\b", re.I),
    "drain, for deleting a row": re.compile(r"(?<![a-z.])drain(s|ing)?\b", re.I),
    "drained, for a deleted row": re.compile(
        r"\.drained\b|\bdrained\s*=|[\"']drained[\"']\s*:|\bdrained (\d|\{)"
    ),
    "the sweeps table": re.compile(r"\.sweeps\b|`sweeps`|\bsweeps table\b"),
}


def retired(text: str) -> list[str]:
    """Each retired word in ``text``, as ``line N: word``."""
    return [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} ({name})"
        for name, pattern in RETIRED.items()
        for m in pattern.finditer(text)
    ]


def sources() -> list[Path]:
    """The text files of src/ and docs/, and README.md."""
    found = [ROOT / "README.md"]
    for folder in ("src", "docs"):
        found += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in TEXT)
    return found


@pytest.mark.parametrize(
    ("text", "hits"),
    [
        ('{"pending_gated": 1, "pending_ungated": 2}', 2),
        ("Verdict.UNGATED, an ungated pair", 2),
        ("class Drain: a Drain() drains the row, draining it", 4),
        ('outcome.drained, drained=(), {"drained": []}, drained 0, drained {n}', 5),
        ("UPDATE stall_nudge." + "sweeps; the `sweeps` table", 2),  # split: no rename finds it
        ('is my queue drained? Verdict.DRAINED, "drained", a drained queue', 0),
        ("await writer.drain(); the sweeps ran; judged_to", 0),
    ],
)
def test_each_retired_word_is_found_and_drained_for_a_queue_is_not(text: str, hits: int) -> None:
    """The patterns catch each retired use, and leave "drained" for a queue alone."""
    assert hits == len(retired(text))


def test_no_retired_word_in_the_sources_or_the_docs() -> None:
    """No file of src/ or docs/, nor README.md, uses a retired word."""
    files = sources()
    names = {p.relative_to(ROOT).as_posix() for p in files}

    assert {"README.md", "src/stall_core/_status.py", "src/adapters/memory.py"} <= names
    assert any(name.startswith("docs/") for name in names)
    assert [] == [f"{p.relative_to(ROOT)}: {hit}" for p in files for hit in retired(p.read_text())]


def _every_verdict() -> list[PairStatus]:
    return [
        PairStatus(
            endpoint_id="ep",
            queue=verdict.value,
            sendable=1,
            held_by_gate=1,
            oldest_age=timedelta(minutes=3),
            effective_nudges=1,
            last_nudged_at=T0,
            next_due_at=T0,
            verdict=verdict,
        )
        for verdict in Verdict
    ]


def _output(*argv: str) -> str:
    """What ``stall-nudge ARGV`` prints, in process (``--help`` exits, as argparse does)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(list(argv))
    return out.getvalue()


def test_no_retired_word_in_what_the_command_line_prints() -> None:
    """Every command's help, the SQL it prints, and status as a table, JSON and a page."""
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    pairs = _every_verdict()
    printed = {
        "help": _output("--help"),
        **{f"{name} --help": _output(name, "--help") for name in commands.choices},
        "sql": _output("sql"),
        "status table": "\n".join(render_table(pairs, T0)),
        "status --json": status_json(pairs, T0, policy=PacingPolicy()),
        "status page": render_page(T0, pairs, policy=PacingPolicy(), refresh_s=15),
    }

    assert {"migrate", "sweep", "status", "sql"} <= set(commands.choices)
    assert "-- name:" in printed["sql"]
    assert '"held_by_gate": 1' in printed["status --json"]
    assert '"sendable": 1' in printed["status --json"]
    assert all(v.value in printed["status table"] for v in Verdict)
    assert [] == [f"{what}: {hit}" for what, text in printed.items() for hit in retired(text)]
