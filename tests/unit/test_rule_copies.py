"""Each restatement of a core rule outside the core names the function it mirrors, and it exists.

The simulator restates the core's rules on plain integers, and the
adapters restate some in SQL or for the memory board; each copy carries
``mirrors stall_core.NAME`` next to it. A rename in the core that leaves a
copy naming the old function fails here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import adapters
import stall_sim

ROOTS = (Path(stall_sim.__file__).parent, Path(adapters.__file__).parent)
MIRROR = re.compile(r"\bmirrors (stall_core\..*)")
NAME = re.compile(r"stall_core\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
#: The rules SPEC-0038 states that the simulator restates rather than calls.
SIMULATED = {"is_candidate", "made_progress", "effective_nudges", "charge_order", "plan_tick"}
#: The rules the Postgres judge restates: the tick limit and the charge must be in the query.
JUDGED = {
    "work_of",
    "is_candidate",
    "latest_claim",
    "has_departed",
    "made_progress",
    "is_due",
    "charge_order",
    "plan_tick",
    "charge_row",
    "charge_stamp",
    "reset_row",
    "refunded_row",
}


def copies() -> list[tuple[str, str]]:
    """(where, name) of each name on a ``mirrors stall_core.NAME[, ...]`` line, outside the core."""
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*")):
            if path.suffix not in {".py", ".sql"}:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                where = f"{path.relative_to(root.parent).as_posix()}:{number}"
                for names in MIRROR.findall(line):
                    found += [(where, name) for name in NAME.findall(names)]
    return found


COPIES = copies()


def resolve(name: str) -> object:
    """``stall_core.NAME``, attribute by attribute (``PacingPolicy.delay_before`` too)."""
    value: object = importlib.import_module("stall_core")
    for part in name.split("."):
        value = getattr(value, part)
    return value


def test_the_simulator_names_each_rule_it_restates() -> None:
    """Candidacy, progress, the count, the order and the tick limit each have a named copy."""
    named = {name for where, name in COPIES if where.startswith("stall_sim/")}

    assert set() == SIMULATED - named


def test_the_postgres_judge_names_each_rule_it_restates() -> None:
    """Work, candidacy, progress, due, order, tick limit, charge, reset and refund, each named."""
    named = {name for where, name in COPIES if where.startswith("adapters/postgres/")}

    assert set() == JUDGED - named


@pytest.mark.parametrize(("where", "name"), COPIES, ids=[f"{w}:{n}" for w, n in COPIES])
def test_a_named_rule_exists_in_the_core(where: str, name: str) -> None:
    """The function a copy says it mirrors is a public name of stall_core."""
    try:
        resolve(name)
    except AttributeError:
        pytest.fail(f"{where} mirrors stall_core.{name}, which does not exist")
