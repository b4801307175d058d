"""`/` on the ops port: "is my queue drained?" as a self-refreshing page, in a real browser."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg
import attrs
import pytest
from aiohttp import web

import stall_nudge
from adapters.http import CREATED
from stall_core import HistoryEntry, PacingPolicy, PairStatus, Silence, TodoRef, Verdict
from stall_nudge.ops_port import SECURITY_HEADERS, serve_ops_port
from stall_nudge.status_page import ROW_LIMIT, render_page
from stall_testing import PostgresHost, Receiver

from .browser import CHROMIUM, Browser
from .conftest import ago, stalled_pair

NOW = datetime(2026, 12, 3, 3, 30, tzinfo=UTC)
POLICY = PacingPolicy()
HOSTILE = '<script>window.pwned = 1</script>"&\x1b[2J\u202e'


def pair(queue: str, verdict: Verdict, *, age_min: float = 30, **fields: object) -> PairStatus:
    """A status line on ep-1 whose oldest gated todo is ``age_min`` minutes old."""
    return PairStatus(
        endpoint_id="ep-1",
        queue=queue,
        sendable=1,
        held_by_gate=0,
        oldest_age=timedelta(minutes=age_min),
        effective_nudges=None,
        last_nudged_at=None,
        next_due_at=None,
        verdict=verdict,
        **fields,
    )


def rows_of(page: str) -> list[str]:
    """The queue cell of each table row, in page order."""
    return [
        line.split('data-queue="', 1)[1].split('"', 1)[0]
        for line in page.splitlines()
        if "data-queue=" in line
    ]


def test_a_hostile_name_is_escaped_and_never_markup() -> None:
    """A queue named like a script tag shows as text: no raw tag, quote or control character."""
    page = render_page(NOW, [pair(HOSTILE, Verdict.DUE)], policy=POLICY, refresh_s=15)

    assert "<script" not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;&quot;&amp;\\x1b[2J\\u202e" in page
    assert "\x1b" not in page
    assert "\u202e" not in page


def test_a_page_of_huge_names_past_the_row_limit_stays_bounded_cell_by_cell() -> None:
    """1 MiB names made of what HTML escapes widest, on more pairs than a page shows: the
    page holds ROW_LIMIT rows, counts the rest, and no cell grows past a name's width."""
    huge = '"' * 2**20
    pairs = [
        attrs.evolve(
            pair(huge + str(i), Verdict.BACKING_OFF, hook_failures=2**62, hooks_disabled=2**62),
            endpoint_id=huge,
            sendable=2**62,
            held_by_gate=2**62,
            oldest_age=timedelta(days=10**6),
            effective_nudges=2**62,
            last_nudged_at=NOW - timedelta(days=700_000),
            next_due_at=NOW + timedelta(days=10**6),
        )
        for i in range(ROW_LIMIT + 50)
    ]

    page = render_page(NOW, pairs, policy=POLICY, refresh_s=15)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", line) for line in page.splitlines()]
    cells = [[html.unescape(cell) for cell in row] for row in rows if row]

    assert ROW_LIMIT == len(cells) == len(rows_of(page))
    assert "50 more pairs, less urgent, not shown" in page
    assert {64} == {len(cell) for row in cells for cell in row[:2]}  # the names
    assert max(len(cell) for row in cells for cell in row[:-1]) < 128
    assert max(len(row[-1]) for row in cells) < 2 * 64 + 100  # the next step: two names at most
    assert max(len(line.encode()) for line in page.splitlines()) < 2048
    assert len(page.encode()) < ROW_LIMIT * 2048


def test_hidden_characters_in_a_name_are_shown_as_escapes() -> None:
    """Zero-width characters, a word joiner, a BOM, a soft hyphen and tags never reach the page."""
    page = render_page(
        NOW,
        [pair("lane\u200b\u2060\ufeff\u00ad\U000e0041-l", Verdict.DUE)],
        policy=POLICY,
        refresh_s=15,
    )

    assert "lane\\u200b\\u2060\\ufeff\\xad\\U000e0041-l" in page
    assert [] == re.findall("[\u200b\u2060\ufeff\u00ad\U000e0000-\U000e007f]", page)


def test_the_count_columns_say_what_they_count_and_ages_are_whole_seconds() -> None:
    """Sendable and Held by gate head the pending counts; ages and waits drop their fractions."""
    status = attrs.evolve(
        pair("lane", Verdict.BACKING_OFF, age_min=1.151),
        effective_nudges=1,
        last_nudged_at=NOW - timedelta(seconds=9.066),
        next_due_at=NOW + timedelta(seconds=290.9),
    )

    page = render_page(NOW, [status], policy=POLICY, refresh_s=15)
    heads = re.findall(r"<th[^>]*>(.*?)</th>", page)
    [row] = [line for line in page.splitlines() if "data-queue=" in line]

    assert ["Sendable", "Held by gate"] == heads[4:6]
    assert [] == [h for h in heads if "gated" in h.lower()]
    assert ["1m9s", "9s ago", "in 4m50s"] == re.findall(r"<td>([^<]*)</td>", row)[-3:]


def test_the_most_urgent_pairs_come_first() -> None:
    """A person's pairs, then failing hooks, then due, backing off, fresh, drained; oldest first."""
    pairs = [
        pair("drained", Verdict.DRAINED),
        pair("fresh", Verdict.FRESH, age_min=1),
        pair("backing-off", Verdict.BACKING_OFF),
        pair("due-young", Verdict.DUE, age_min=10),
        pair("due-old", Verdict.DUE, age_min=50),
        pair("failing-hook", Verdict.BACKING_OFF, hook_failures=4),
        pair("capped", Verdict.CAPPED),
        pair("no-receiver-stuck", Verdict.NO_RECEIVER),
        pair("no-receiver-fresh", Verdict.NO_RECEIVER, age_min=1),
    ]

    page = render_page(NOW, pairs, policy=POLICY, refresh_s=15)

    # The failing hook's old work needs a person too (as status --check says), and comes
    # first of those by its verdict.
    assert [
        "failing-hook",
        "capped",
        "no-receiver-stuck",
        "due-old",
        "due-young",
        "backing-off",
        "fresh",
        "no-receiver-fresh",
        "drained",
    ] == rows_of(page)


def test_rows_are_bounded_and_the_rest_counted() -> None:
    """Past the row limit the least urgent pairs are left out, and the page says how many."""
    pairs = [pair(f"q{i}", Verdict.DUE, age_min=10 + i) for i in range(5)]

    page = render_page(NOW, pairs, policy=POLICY, refresh_s=15, limit=3)

    assert ["q4", "q3", "q2"] == rows_of(page)
    assert "2 more pairs, less urgent, not shown" in page


def test_the_page_refreshes_itself_and_says_when_a_board_is_drained() -> None:
    """An empty board is one sentence; every page carries its meta refresh."""
    page = render_page(NOW, [], policy=POLICY, refresh_s=7)

    assert '<meta http-equiv="refresh" content="7">' in page
    assert "every queue is drained" in page


def test_hook_health_shows_beside_the_verdict() -> None:
    """Failures in a row and disabled hooks are shown in the pair's hooks cell."""
    page = render_page(
        NOW,
        [pair("lane", Verdict.DUE, hook_failures=3, hooks_disabled=1)],
        policy=POLICY,
        refresh_s=15,
    )

    assert "3 failures in a row, 1 disabled" in page


needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)

ROWS = """Array.from(document.querySelectorAll('tbody tr')).map(
    r => [r.cells[1].textContent, r.dataset.verdict])"""
#: One page load's rows, whether a script of a name ran, and the style: read in one go, so a
#: refresh cannot fall between them.
LOADED = f"""document.readyState === 'complete' && document.querySelector('tbody tr') && {{
    rows: {ROWS}, pwned: window.pwned !== undefined, scripts: document.scripts.length,
    steps: Array.from(document.querySelectorAll('tbody tr')).map(
        r => [r.cells[1].textContent, r.dataset.receiver, r.cells[r.cells.length - 1].textContent]),
    style: getComputedStyle(document.querySelector('th')).backgroundColor}}"""


@pytest.mark.postgres
@needs_browser
async def test_the_browser_shows_every_verdict_runs_no_hostile_script_and_keeps_refreshing(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """Each pair's verdict renders in chromium under the port's content security policy, which
    lets the page's own style apply; a queue named like a script tag stays text; with the page
    left open, a pair that appears later shows up without anyone reloading."""
    await stalled_pair(host, receiver, queue="lane-due")
    await host.create_todo("f", endpoint_id="ep-1", queue="lane-fresh", created_at=ago(0))
    await host.create_todo("h", endpoint_id="ep-1", queue=HOSTILE, created_at=ago(30))
    await host.add_endpoint("ep-2")
    await host.create_todo("n", endpoint_id="ep-2", queue="lane-nobody", created_at=ago(30))
    await host.add_endpoint("ep-3", state="paused")
    await host.add_hook(
        "hook-3", endpoint_id="ep-3", url=receiver.url("paused", "whsec_eA=="), secret="whsec_eA=="
    )
    await host.create_todo("p", endpoint_id="ep-3", queue="lane-paused", created_at=ago(30))
    async with (
        stall_nudge.open_reaper(pg_pool) as reaper,
        serve_ops_port(reaper, host="127.0.0.1", port=0, refresh=1) as url,
        Browser() as browser,
    ):
        await browser.goto(url + "/")
        first = await browser.until(LOADED)
        await host.create_todo("late", endpoint_id="ep-1", queue="lane-late", created_at=ago(30))
        later = await browser.until(ROWS + ".some(r => r[0] === 'lane-late')")

    assert {
        ("lane-due", "due"),
        ("lane-fresh", "fresh"),
        ('<script>window.pwned = 1</script>"&\\x1b[2J\\u202e', "due"),
        ("lane-nobody", "no-receiver"),
        ("lane-paused", "endpoint-inactive"),
    } == {tuple(r) for r in first["rows"]}
    assert (False, 0) == (first["pwned"], first["scripts"])
    assert "rgb(242, 242, 242)" == first["style"]
    assert True is later
    steps = {queue: (receiver, step) for queue, receiver, step in first["steps"]}
    assert (
        "none",
        "no enabled hook covers lane-nobody: enable one, or this queue is drained by pull only",
    ) == steps["lane-nobody"]
    assert ("ok", "") == steps["lane-due"]
    assert steps["lane-paused"][1].startswith("endpoint ep-3 is paused or disabled: resume it")


async def serve(page: str) -> AsyncIterator[str]:
    """``page`` on loopback with the ops port's headers; yields its URL."""

    async def answer(_: web.Request) -> web.Response:
        response = web.Response(text=page, content_type="text/html")
        response.headers.update(SECURITY_HEADERS)
        return response

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/"
    finally:
        await runner.cleanup()


@needs_browser
async def test_the_browser_shows_a_recovered_receiver_as_good_news_and_each_next_step() -> None:
    """A receiver failing now, one that answers again since its pair's failed nudge, and a queue
    no hook covers, rendered in chromium under the port's policy: the failing one is marked for
    a person with its step; the recovered one reads "recovered" in green, unmarked, no step."""
    pairs = [
        pair("lane-failing", Verdict.BACKING_OFF, hook_failures=2),
        pair(
            "lane-recovered",
            Verdict.BACKING_OFF,
            last_failure_at=NOW - timedelta(hours=2),
            last_outcomes=(
                HistoryEntry(
                    at=NOW - timedelta(hours=2),
                    endpoint_id="ep-1",
                    queue="lane-recovered",
                    event="charged",
                    nudge=1,
                    todo_id="t1",
                    outcome="gave-up",
                ),
            ),
        ),
        pair("lane-m", Verdict.NO_RECEIVER, has_receiver=False),
    ]
    page = render_page(NOW, pairs, policy=POLICY, refresh_s=60)

    async with asynccontextmanager(serve)(page) as url, Browser() as browser:
        await browser.goto(url)
        shown = await browser.until(CELLS)

    assert {
        "lane-failing": (
            "person",
            "2 failures in a row",
            "ep-1's hook fails every attempt: check its URL and the receiver's logs",
        ),
        "lane-recovered": ("", "recovered (failed 2h ago)", ""),
        "lane-m": (
            "person",
            "none",
            "no enabled hook covers lane-m: enable one, or this queue is drained by pull only",
        ),
    } == {queue: (kind, receivers, step) for queue, kind, receivers, step, _ in shown}
    assert {"rgb(23, 107, 44)"} == {
        color for queue, *_, color in shown if queue == "lane-recovered"
    }


#: Each row's queue, class, receivers cell, next step and the receivers cell's text colour.
CELLS = """document.readyState === 'complete' && document.querySelector('tbody tr') &&
    Array.from(document.querySelectorAll('tbody tr')).map(r => [
        r.cells[1].textContent, r.className, r.cells[3].textContent,
        r.cells[r.cells.length - 1].textContent,
        getComputedStyle(r.cells[3].firstElementChild || r.cells[3]).color])"""


def charge(minutes_ago: float, nudge: int, outcome: str | None) -> HistoryEntry:
    """A charge of ep-1's pair ``minutes_ago`` before NOW, with its outcome."""
    return HistoryEntry(
        at=NOW - timedelta(minutes=minutes_ago),
        endpoint_id="ep-1",
        queue="lane",
        event="charged",
        nudge=nudge,
        outcome=outcome,
    )


def test_each_pairs_last_outcomes_show_newest_first_those_that_reached_nobody_in_red() -> None:
    """A line per charge: its number, its outcome (under way while it has none), how long ago."""
    outcomes = (charge(1, 3, None), charge(6, 2, "gave-up"), charge(11, 1, "delivered"))
    status = pair("lane", Verdict.BACKING_OFF, last_outcomes=outcomes)

    page = render_page(NOW, [status], policy=POLICY, refresh_s=15)
    [cell] = re.findall(r'<td class="outcomes">(.*?)</td>', page)

    assert [
        "nudge 3: under way, 1m ago",
        '<span class="unreached">nudge 2: gave-up, 6m ago</span>',
        "nudge 1: delivered, 11m ago",
    ] == cell.split("<br>")
    assert "Last outcomes" in re.findall(r"<th[^>]*>(.*?)</th>", page)


def test_a_silence_shows_in_its_row_with_its_end_who_and_why_escaped() -> None:
    """A silenced pair is no one's to fix: its own row colour, no mark; the step cell says until
    when, who and why, a reason like markup as text."""
    cover = Silence(
        endpoint_id="ep-1",
        queue=None,
        starts_at=NOW,
        ends_at=NOW + timedelta(hours=2),
        by="ann",
        reason="<b>deploy</b>",
    )
    status = pair("lane", Verdict.SILENCED, silenced_until=cover.ends_at, silence=cover)

    page = render_page(NOW, [status], policy=POLICY, refresh_s=15)
    [row] = [line for line in page.splitlines() if "data-queue=" in line]

    assert row.startswith('<tr class="silenced" data-verdict="silenced"')
    assert (
        '<td class="step">silenced (every queue) until 2026-12-03 05:30 UTC (in 2h) by ann: '
        "&lt;b&gt;deploy&lt;/b&gt;; `stall-nudge unsilence ep-1` ends it early</td>"
    ) in row
    assert "0 need a person" in page


#: Each row's queue, verdict, class, receivers cell, last outcomes, next step and the
#: receivers cell's text colour.
BOARD = """document.readyState === 'complete' && document.querySelector('tbody tr') &&
    Array.from(document.querySelectorAll('tbody tr')).map(r => [
        r.cells[1].textContent, r.dataset.verdict, r.className, r.cells[3].textContent,
        r.cells[r.cells.length - 2].innerText, r.cells[r.cells.length - 1].innerText,
        getComputedStyle(r.cells[3].firstElementChild || r.cells[3]).color])"""


@pytest.mark.postgres
@needs_browser
async def test_a_real_board_shows_a_silence_a_recovered_receiver_and_a_next_step(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver
) -> None:
    """A reaper sweeps a Postgres board: a nudge its hook turns down (400) is refunded; the
    receiver fixed, it answers the host's next creation wake. A silenced endpoint and a queue
    no hook covers beside it. In chromium the page shows the receiver recovered (green,
    unmarked) with the failed outcome, the silence with its end, who and why, and the
    uncovered queue's step."""
    await stalled_pair(host, receiver, queue="lane-back")
    await stalled_pair(host, receiver, endpoint="ep-2", queue="lane-quiet", todo="q-0")
    await host.add_endpoint("ep-3")
    await host.create_todo("n", endpoint_id="ep-3", queue="lane-nobody", created_at=ago(30))
    receiver.route("hook", 400)  # a final answer: booked against the hook, the nudge refunded
    async with stall_nudge.open_reaper(pg_pool) as reaper:
        await reaper.silence("ep-2", None, lasting=timedelta(hours=2), by="ann", reason="deploy")
        assert [("ep-1", "lane-back")] == [n.key for n in (await reaper.tick()).charged]
        await reaper.settle()
        receiver.route("hook", 204)  # the receiver is fixed; the host's next todo wakes it
        new = TodoRef(id="l-1", created_at=ago(0))
        await host.create_todo(new.id, endpoint_id="ep-1", queue="lane-back", created_at=ago(0))
        await reaper.notify(endpoint_id="ep-1", queue="lane-back", todo=new, reason=CREATED)
        await reaper.settle()
        async with (
            serve_ops_port(reaper, host="127.0.0.1", port=0, refresh=1) as url,
            Browser() as browser,
        ):
            await browser.goto(url + "/")
            # Successes are booked in a batch: the page refreshes until the hook's is.
            await browser.until(BOARD + ".some(r => r[3].startsWith('recovered'))")
            shown = await browser.until(BOARD)

    rows = {queue: rest for queue, *rest in shown}
    assert 2 == len(receiver.at("hook"))
    verdict, kind, receivers, outcomes, step, color = rows["lane-back"]
    assert ("backing-off", "", "", "rgb(23, 107, 44)") == (verdict, kind, step, color)
    assert re.fullmatch(r"recovered \(failed [\dms]+ ago\)", receivers), receivers
    assert ["nudge 1: gave-up"] == [line.rsplit(",", 1)[0] for line in outcomes.splitlines()]
    verdict, kind, receivers, outcomes, step, _ = rows["lane-quiet"]
    assert ("silenced", "silenced", "ok", "") == (verdict, kind, receivers, outcomes)
    assert re.fullmatch(
        r"silenced \(every queue\) until \d{4}-\d\d-\d\d \d\d:\d\d UTC \(in (2h|1h59m(\d+s)?)\) "
        r"by ann: deploy; `stall-nudge unsilence ep-2` ends it early",
        step,
    ), step
    verdict, kind, receivers, _, step, _ = rows["lane-nobody"]
    assert ("no-receiver", "person", "none") == (verdict, kind, receivers)
    assert (
        "no enabled hook covers lane-nobody: enable one, or this queue is drained by pull only"
        == step
    )
