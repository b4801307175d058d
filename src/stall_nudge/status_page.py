""" "Is my queue drained?" as a small read-only HTML page that refreshes itself.

No script and no framework: one table, the most urgent pairs first, with
each pair's last outcomes and any silence, each
name a sender chose escaped and cut by ``stall_core.printable`` and then
HTML-escaped, so a queue named ``<script>`` is text and a 1 MiB name takes
a cell's width. At most ``ROW_LIMIT`` rows, the rest counted, so the page
stays small for any board. The page reloads itself with a meta refresh;
each load reads the status view afresh. ``CONTENT_SECURITY_POLICY`` allows
it its one inline style and nothing else (no script, no frame around it).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

from stall_core import (
    REACHED_NOBODY,
    PacingPolicy,
    PairStatus,
    Receiver,
    Verdict,
    format_seconds,
    next_step,
    printable,
    printable_text,
    receiver_health,
)

from ._pairs import (
    by_urgency,
    counts_and_times,
    endpoint_label,
    hook_trouble,
    hooks_cell,
    needs_person,
    outcome_lines,
    silence_note,
    unreadable_note,
)
from ._tally import Health

__all__ = ["CONTENT_SECURITY_POLICY", "ROW_LIMIT", "render_page"]

#: The most pairs one page shows; the rest, least urgent, are counted.
ROW_LIMIT = 200

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
p { margin: .3em 0; }
table { border-collapse: collapse; margin-top: .8em; }
th, td { padding: .25em .6em; text-align: left; border-bottom: 1px solid #ddd; }
td { white-space: nowrap; } td.wrap { white-space: normal; }
th { background: #f2f2f2; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.person td { background: #fde2e1; }
tr.hooks td { background: #fff3cd; }
tr.silenced td { background: #eef1f6; }
td.step { min-width: 18em; font-size: .93em; white-space: normal; }
.recovered { color: #176b2c; }
.unreached { color: #a31616; }
td.outcomes { font-size: .93em; }
.verdict { font-weight: 600; white-space: nowrap; }
.ready { color: #176b2c; } .unready { color: #a31616; }
code { font: 13px ui-monospace, monospace; }
"""

_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
#: What the ops port sends with every answer: this page's style, nothing else to load
#: or run, never inside a frame, no form, no base URL.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)

#: Each column's head, and what it counts when a person hovers over it, in the words of
#: `status` (cli/status.py): "Sendable" passes the sender gate, "Held by gate" does not.
_COLUMNS = (
    ("Endpoint", ""),
    ("Queue", ""),
    ("Verdict", "the sweep's own decision for the pair"),
    (
        "Receivers",
        "the enabled notify hooks covering the pair: none, ok, failures in a row, or "
        "recovered (answering again since the pair's last failed nudge); then disabled hooks",
    ),
    (
        "Sendable",
        "pending todos that pass the sender gate (a verified delivery, or none): "
        "what the sweep nudges for",
    ),
    ("Held by gate", "pending todos of unverified deliveries: claimed by pull, never nudged"),
    ("Oldest", "age of the oldest sendable pending todo"),
    ("Nudges", "nudges since the last progress"),
    ("Last nudge", ""),
    ("Next due", ""),
    (
        "Last outcomes",
        "the pair's last nudges, newest first: delivered, or how it reached no receiver",
    ),
    ("Next step", "what a person can do about the pair, and any silence: until when, who, why"),
)


def _name(value: str) -> str:
    """A name a sender chose as safe HTML: escaped and cut, then markup."""
    return html.escape(printable(value), quote=True)


def _head(column: str, hint: str) -> str:
    return (
        f'<th title="{html.escape(hint, quote=True)}">{column}</th>'
        if hint
        else f"<th>{column}</th>"
    )


def _receivers(pair: PairStatus, now: datetime) -> str:
    """The receivers cell: a recovered receiver reads as good news, not as trouble."""
    cell = html.escape(hooks_cell(pair, now), quote=True)
    if receiver_health(pair) is Receiver.RECOVERED:
        return f'<span class="recovered">{cell}</span>'
    return cell


def _outcomes(pair: PairStatus, now: datetime) -> str:
    """The last outcomes cell, a line each: those that reached no receiver in red."""
    return "<br>".join(
        f'<span class="unreached">{html.escape(text, quote=True)}</span>'
        if entry.outcome in REACHED_NOBODY
        else html.escape(text, quote=True)
        for entry, text in zip(pair.last_outcomes, outcome_lines(pair, now), strict=True)
    )


def _row(pair: PairStatus, now: datetime, policy: PacingPolicy) -> str:
    kind = (
        "person"
        if needs_person(pair, policy)
        else "hooks"
        if hook_trouble(pair)
        else "silenced"
        if pair.verdict is Verdict.SILENCED
        else ""
    )
    verdict = pair.verdict.value
    notes = (next_step(pair), silence_note(pair, now))
    cells = (
        _name(endpoint_label(pair)),
        _name(pair.queue),
        f'<span class="verdict">{verdict}</span>',
        _receivers(pair, now),
        *counts_and_times(pair, now),
        _outcomes(pair, now),
        "<br>".join(html.escape(note, quote=True) for note in notes if note is not None),
    )
    classes = {
        1: "wrap",
        3: "wrap",
        4: "n",
        5: "n",
        7: "n",
        len(cells) - 2: "outcomes",
        len(cells) - 1: "step",
    }
    tds = "".join(
        f'<td class="{classes[i]}">{cell}</td>' if i in classes else f"<td>{cell}</td>"
        for i, cell in enumerate(cells)
    )
    return (
        f'<tr class="{kind}" data-verdict="{verdict}" '
        f'data-receiver="{receiver_health(pair).value}" data-queue="{_name(pair.queue)}">'
        f"{tds}</tr>"
    )


def render_page(
    now: datetime,
    pairs: Sequence[PairStatus],
    *,
    policy: PacingPolicy,
    refresh_s: int,
    limit: int = ROW_LIMIT,
    health: Health | None = None,
) -> str:
    """The page for the pairs judged at ``now``: at most ``limit`` rows, the rest counted."""
    ordered = by_urgency(pairs, policy)
    shown, rest = ordered[:limit], len(ordered) - limit
    verdicts = Counter(p.verdict.value for p in ordered)
    people = sum(needs_person(p, policy) for p in ordered)
    summary = ", ".join(f"{count} {verdict}" for verdict, count in sorted(verdicts.items()))
    lines = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{refresh_s}">',
        "<title>stall-nudge: is my queue drained?</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Is my queue drained?</h1>",
    ]
    if health is not None:
        state = "ready" if health.ready else "unready"
        lines.append(
            f'<p class="{state}">Sweep {"ready" if health.ready else "not ready"}: '
            f"{html.escape(printable_text(health.reason), quote=True)}</p>"
        )
    lines.append(
        f"<p>As of {now.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, on the database's clock; "
        f"refreshes every {format_seconds(refresh_s)}.</p>"
    )
    if not ordered:
        lines.append("<p>No pending work and no ledger rows: every queue is drained.</p>")
    else:
        lines.append(
            f"<p>{len(ordered)} pairs: {people} need a person; {summary}. Most urgent first.</p>"
        )
        lines.append("<table><thead><tr>")
        lines.append("".join(_head(column, hint) for column, hint in _COLUMNS))
        lines.append("</tr></thead><tbody>")
        lines.extend(_row(pair, now, policy) for pair in shown)
        lines.append("</tbody></table>")
        lines.extend(
            f"<p>{html.escape(note, quote=True)}</p>"
            for note in map(unreadable_note, shown)
            if note is not None
        )
        if rest > 0:
            lines.append(
                f"<p>{rest} more pairs, less urgent, not shown "
                "(<code>stall-nudge status --json</code> lists every pair).</p>"
            )
    lines.append("</body></html>")
    return "\n".join(lines) + "\n"
