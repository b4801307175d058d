"""A host's history, as a replay reads it: todos, endpoints, hooks, and the nudges really sent.

Theory of operation
-------------------
A history is a list of records (``parse_records``): one per todo, and,
optionally, one per endpoint, per hook, per nudge the real sweep sent, and
one for the window. They come from a JSON lines or CSV file (``parse_jsonl``,
``parse_csv``) or from the host's database (the command line reads it with
``adapters.postgres.read_history``, which yields the same records). Every
mistake is a ``HistoryError`` naming the source, the line and the field.

Fields (instants are ISO 8601 with a time zone; ids are text or integers):

==========  ============================================================================
record      fields
==========  ============================================================================
todo        ``id``, ``endpoint_id``, ``queue``, ``created_at``; ``claimed_at`` (none:
            never claimed); ``state`` (pending, or any other state a todo leaves
            pending for; default claimed with a claim stamp, else pending);
            ``verified`` (passes the
            sender gate: a verified delivery or none; default true)
endpoint    ``id``, ``state`` (only ``active`` is nudged)
hook        ``id``, ``endpoint_id``; ``queues`` (a list; none: all queues);
            ``enabled`` (default true)
nudge       ``endpoint_id``, ``queue``, ``nudge`` (its number), ``todo_id``,
            ``charged_at``: a nudge the real sweep charged; ``outcome`` (one
            of ``stall_core.OUTCOMES``; none: not known, taken as delivered)
window      ``start``, ``end``: the span replayed; ``nudges`` (true: the source
            recorded every nudge sent, even none; default: whether any is)
==========  ============================================================================

``record`` names the kind (default ``todo``). A JSON line with a
``charged`` list and no ``record`` is a ``stall-nudge sweep --json`` tick
record, and each of its nudges is a nudge record: a sweep's log is the
operators' history of what was sent. No endpoint record: every endpoint
is active. No hook record: every endpoint has one enabled hook covering
all its queues. No window: from the first todo's creation to the last
instant recorded.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from datetime import datetime

import attrs

from stall_core import OUTCOMES, REACHED_NOBODY

__all__ = [
    "History",
    "HistoryError",
    "HistoryHook",
    "HistoryTodo",
    "RecordedNudge",
    "parse_csv",
    "parse_jsonl",
    "parse_nudges",
    "parse_records",
]

RECORDS = ("todo", "endpoint", "hook", "nudge", "window")


class HistoryError(ValueError):
    """A history that cannot be replayed, naming where: source, line, field."""


@attrs.frozen(kw_only=True)
class HistoryTodo:
    """One todo as the history shows it at the window's end."""

    id: str
    endpoint_id: str
    queue: str
    created_at: datetime
    claimed_at: datetime | None
    state: str
    verified: bool


@attrs.frozen(kw_only=True)
class HistoryHook:
    """One notify hook: its endpoint, queue filter (None: all) and whether it is enabled."""

    id: str
    endpoint_id: str
    queues: tuple[str, ...] | None
    enabled: bool


@attrs.frozen(kw_only=True)
class RecordedNudge:
    """A nudge the real sweep charged, and what became of it (None: not known)."""

    endpoint_id: str
    queue: str
    todo_id: str
    number: int
    charged_at: datetime
    outcome: str | None = None

    @property
    def reached(self) -> bool:
        """Whether it may have woken a consumer: every outcome but one that reached nobody."""
        return self.outcome not in REACHED_NOBODY


@attrs.frozen(kw_only=True)
class History:
    """What a replay reads; ``endpoints``/``hooks``/``nudges`` None when the source had none."""

    start: datetime
    end: datetime
    todos: tuple[HistoryTodo, ...]
    #: Endpoint id to state; None: every endpoint is active.
    endpoints: Mapping[str, str] | None
    #: None: every endpoint has one enabled hook covering all its queues.
    hooks: tuple[HistoryHook, ...] | None
    #: None: no record of what the real sweep sent.
    nudges: tuple[RecordedNudge, ...] | None


# -- reading files ------------------------------------------------------------------


def parse_jsonl(lines: Iterable[str], *, source: str) -> History:
    """A history from JSON lines, one object per line; blank lines are skipped."""
    return parse_records(_jsonl_records(lines, source), source=source)


def parse_nudges(lines: Iterable[str], *, source: str) -> tuple[RecordedNudge, ...]:
    """The nudges of a ``sweep --json`` log (or of nudge records), as JSON lines.

    Tick records that charged nothing, skipped or failed add none.
    """
    nudges = []
    for line, values in _jsonl_records(lines, source):
        if values.get("record") == "nudge":
            nudges.append(_nudge(_Fields(where=f"{source} line {line}", values=values)))
        elif "charged" not in values:
            raise HistoryError(
                f"{source} line {line}: expected a nudge record or a `sweep --json` tick record"
            )
    return tuple(sorted(nudges, key=lambda n: n.charged_at))


def _jsonl_records(lines: Iterable[str], source: str) -> list[tuple[int, Mapping[str, object]]]:
    """The records of JSON lines; a tick record's nudges become nudge records."""
    records: list[tuple[int, Mapping[str, object]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HistoryError(f"{source} line {number}: not JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise HistoryError(f"{source} line {number}: expected a JSON object")
        if "record" not in value and isinstance(value.get("charged"), list):
            for charged in value["charged"]:
                if not isinstance(charged, dict):
                    raise HistoryError(f"{source} line {number}: 'charged' holds a non-object")
                records.append((number, {"record": "nudge", **charged}))
            if not value["charged"]:
                records.append((number, {"record": "tick", "charged": []}))
        else:
            records.append((number, value))
    return records


def parse_csv(lines: Iterable[str], *, source: str) -> History:
    """A history from CSV with a header row; an empty cell is a field left out.

    ``queues`` is a JSON list; ``verified`` and ``enabled`` are true or false.
    """
    reader = csv.DictReader(iter(lines))
    records: list[tuple[int, Mapping[str, object]]] = []
    try:
        for row in reader:
            extra = row.pop(None, None)
            if extra:
                raise HistoryError(f"{source} line {reader.line_num}: more cells than the header")
            cells: dict[str, object] = {k: v for k, v in row.items() if v not in (None, "")}
            for field in ("verified", "enabled"):
                if field in cells:
                    cells[field] = _csv_bool(source, reader.line_num, field, str(cells[field]))
            if "queues" in cells:
                try:
                    cells["queues"] = json.loads(str(cells["queues"]))
                except json.JSONDecodeError:
                    raise HistoryError(
                        f"{source} line {reader.line_num}: field 'queues': expected a JSON list"
                    ) from None
            if "nudge" in cells:
                cells["nudge"] = _csv_int(source, reader.line_num, str(cells["nudge"]))
            records.append((reader.line_num, cells))
    except csv.Error as exc:
        raise HistoryError(f"{source} line {reader.line_num}: {exc}") from None
    if reader.fieldnames is None:
        raise HistoryError(f"{source}: empty, expected a header row")
    return parse_records(records, source=source)


def _csv_bool(source: str, line: int, field: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise HistoryError(f"{source} line {line}: field {field!r}: expected true or false")
    return lowered == "true"


def _csv_int(source: str, line: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HistoryError(f"{source} line {line}: field 'nudge': expected an integer") from None


# -- records ------------------------------------------------------------------------


@attrs.define
class _Fields:
    """One record's fields, read with errors naming the record's place."""

    where: str
    values: Mapping[str, object]

    def fail(self, field: str, message: str) -> HistoryError:
        return HistoryError(f"{self.where}: field {field!r}: {message}")

    def text(self, field: str) -> str:
        value = self.values.get(field)
        if value is None:
            raise self.fail(field, "missing")
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.fail(field, f"expected text, got {_shown(value)}")
        if isinstance(value, str) and not value:
            raise self.fail(field, "empty")
        return str(value)

    def instant(self, field: str, *, required: bool = True) -> datetime | None:
        value = self.values.get(field)
        if value is None:
            if required:
                raise self.fail(field, "missing")
            return None
        if isinstance(value, datetime):
            at = value
        elif isinstance(value, str):
            try:
                at = datetime.fromisoformat(value)
            except ValueError:
                raise self.fail(field, f"expected an ISO 8601 instant, got {value!r}") from None
        else:
            raise self.fail(field, f"expected an ISO 8601 instant, got {_shown(value)}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise self.fail(field, f"expected a time zone, got {at.isoformat()!r}")
        return at

    def flag(self, field: str, default: bool) -> bool:
        value = self.values.get(field)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(field, f"expected true or false, got {_shown(value)}")
        return value


def _shown(value: object) -> str:
    return (
        json.dumps(value) if isinstance(value, str | int | float | bool) else type(value).__name__
    )


def parse_records(records: Iterable[tuple[int, Mapping[str, object]]], *, source: str) -> History:
    """A history from records, each with the line it came from (see the module's table)."""
    todos: list[HistoryTodo] = []
    endpoints: dict[str, str] = {}
    hooks: list[HistoryHook] = []
    nudges: list[RecordedNudge] = []
    window: tuple[datetime, datetime] | None = None
    recorded = False
    seen: set[str] = set()
    for line, values in records:
        f = _Fields(where=f"{source} line {line}", values=values)
        kind = values.get("record", "todo")
        if kind == "tick":
            continue  # a sweep --json tick record that charged nothing
        if kind not in RECORDS:
            raise f.fail("record", f"expected one of {', '.join(RECORDS)}, got {_shown(kind)}")
        if kind == "todo":
            todo = _todo(f)
            if todo.id in seen:
                raise f.fail("id", f"todo {todo.id!r} appears twice")
            seen.add(todo.id)
            todos.append(todo)
        elif kind == "endpoint":
            endpoints[f.text("id")] = f.text("state")
        elif kind == "hook":
            hooks.append(_hook(f))
        elif kind == "nudge":
            nudges.append(_nudge(f))
        else:
            start, end = f.instant("start"), f.instant("end")
            assert start is not None
            assert end is not None
            if end <= start:
                raise f.fail("end", "must be after start")
            window = (start, end)
            recorded = f.flag("nudges", False)
    if not todos:
        raise HistoryError(f"{source}: no todo records")
    if window is None:
        instants = [t.created_at for t in todos]
        instants += [t.claimed_at for t in todos if t.claimed_at is not None]
        instants += [n.charged_at for n in nudges]
        window = (min(t.created_at for t in todos), max(instants))
        if window[1] <= window[0]:
            raise HistoryError(f"{source}: every record is at one instant; add a window record")
    return History(
        start=window[0],
        end=window[1],
        todos=tuple(todos),
        endpoints=endpoints or None,
        hooks=tuple(hooks) or None,
        nudges=tuple(sorted(nudges, key=lambda n: n.charged_at)) if nudges or recorded else None,
    )


def _todo(f: _Fields) -> HistoryTodo:
    created_at = f.instant("created_at")
    claimed_at = f.instant("claimed_at", required=False)
    assert created_at is not None  # required
    state = (
        f.text("state")
        if f.values.get("state") is not None
        else ("pending" if claimed_at is None else "claimed")
    )
    return HistoryTodo(
        id=f.text("id"),
        endpoint_id=f.text("endpoint_id"),
        queue=f.text("queue"),
        created_at=created_at,
        claimed_at=claimed_at,
        state=state,
        verified=f.flag("verified", True),
    )


def _hook(f: _Fields) -> HistoryHook:
    queues = f.values.get("queues")
    if queues is not None and not (
        isinstance(queues, list) and all(isinstance(q, str) and q for q in queues)
    ):
        raise f.fail("queues", "expected a list of queue names, or null for all queues")
    return HistoryHook(
        id=f.text("id"),
        endpoint_id=f.text("endpoint_id"),
        queues=None if queues is None else tuple(queues),
        enabled=f.flag("enabled", True),
    )


def _nudge(f: _Fields) -> RecordedNudge:
    number = f.values.get("nudge")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise f.fail("nudge", f"expected a nudge number >= 1, got {_shown(number)}")
    charged_at = f.instant("charged_at")
    assert charged_at is not None  # required
    outcome = f.values.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise f.fail("outcome", f"expected one of {', '.join(OUTCOMES)}, got {_shown(outcome)}")
    return RecordedNudge(
        endpoint_id=f.text("endpoint_id"),
        queue=f.text("queue"),
        todo_id=f.text("todo_id"),
        number=number,
        charged_at=charged_at,
        outcome=None if outcome is None else str(outcome),
    )
