"""Huge and hidden names, end to end: what a person reads stays short and shows what is hidden;
JSON keeps each name whole (D22)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
from datetime import UTC, datetime, timedelta

import aiohttp
import asyncpg
import pytest

import stall_nudge
from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import PacingPolicy, Sweeper
from stall_nudge.ops_port import serve_ops_port
from stall_testing import PostgresHost, Receiver
from tests.cli.conftest import cli
from tests.http.conftest import SECRET

pytestmark = pytest.mark.postgres

#: Behind a zero-width space and a word joiner: together the most a pair's names may hold
#: and be swept (2,000 bytes; a longer pair is only listed by status).
QUEUE = "\u200b" + "q" * 1000
ENDPOINT = "\u2060" + "e" * 990
#: 64 KiB each: about the most a primary key's index takes (a title too: aiohttp warns of a
#: body over 1 MiB).
TODO = "\ufeff" + "t" * 2**16
HOOK = "h" * 2**16
TITLE = "x" * 2**16
#: Reads as "lane-l" on a screen: a soft hyphen, zero-width characters and tags hide in it.
LOOKALIKE = "lane\u00ad\u200b\u2060\ufeff\U000e0041\U000e007f-l"
LOOKALIKE_SHOWN = "lane\\xad\\u200b\\u2060\\ufeff\\U000e0041\\U000e007f-l"
#: What must never reach a person's screen raw.
HIDDEN = re.compile("[\u00ad\u200b\u2060\ufeff\U000e0000-\U000e007f]")
#: The longest run of one name's characters a cut name shows.
CUT_RUN = re.compile("q{62}|e{62}|t{62}|h{62}")


async def huge_board(host: PostgresHost, url: str) -> None:
    """Two stalled pairs on a huge endpoint: a 1 MiB queue and a look-alike of lane-l."""
    await host.add_endpoint(ENDPOINT)
    await host.add_hook(HOOK, endpoint_id=ENDPOINT, url=url, secret=SECRET)
    for todo, queue in ((TODO, QUEUE), ("t-look", LOOKALIKE)):
        await host.create_todo(
            todo,
            endpoint_id=ENDPOINT,
            queue=queue,
            created_at=datetime.now(UTC) - timedelta(minutes=30),
            title=TITLE,
        )


@pytest.fixture(name="host")
async def _host(pg_pool: asyncpg.Pool, receiver: Receiver) -> PostgresHost:
    host = PostgresHost(pg_pool)
    await huge_board(host, receiver.url("hook", SECRET))
    return host


async def test_sweep_once_prints_one_short_line_with_hidden_characters_escaped(
    pg_dsn: str, host: PostgresHost
) -> None:
    """Two nudges on 1 MiB and look-alike names: one line under 1 KB, every hidden one shown."""
    result = await cli("sweep", "--once", "--dsn", pg_dsn)

    assert 0 == result.status, result.err[:2000]
    assert 1 == len(result.out.splitlines())
    assert len(result.out.encode()) < 1024
    assert LOOKALIKE_SHOWN in result.out
    assert "\\u200b" + "q" * 55 + "..." in result.out
    assert [] == HIDDEN.findall(result.out + result.err)


async def test_sweep_once_json_keeps_every_name_whole(pg_dsn: str, host: PostgresHost) -> None:
    """--json names the endpoint, queue and todo of each nudge exactly as the sender wrote them."""
    result = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    assert 0 == result.status, result.err[:2000]
    assert {(ENDPOINT, QUEUE, TODO), (ENDPOINT, LOOKALIKE, "t-look")} == {
        (n["endpoint_id"], n["queue"], n["todo_id"]) for n in json.loads(result.out)["charged"]
    }


async def test_status_text_is_short_and_escaped_and_its_json_whole(
    pg_dsn: str, host: PostgresHost
) -> None:
    """Each table line stays under 400 characters and shows the look-alike's hidden characters;
    --json has both names whole."""
    table = await cli("status", "--dsn", pg_dsn)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)

    assert (0, 0) == (table.status, as_json.status), table.err + as_json.err
    assert max(len(line) for line in table.out.splitlines()) < 400
    assert LOOKALIKE_SHOWN in table.out
    assert [] == HIDDEN.findall(table.out) + CUT_RUN.findall(table.out)
    assert {QUEUE, LOOKALIKE} == {p["queue"] for p in json.loads(as_json.out)["pairs"]}


async def test_the_sidecar_logs_each_nudge_in_a_few_lines_of_bounded_length(
    pg_dsn: str, host: PostgresHost, receiver: Receiver
) -> None:
    """At debug, from start to the first refund of a nudge no receiver took, every line is under
    1.5 KB and the lines naming the huge queue come to under 4 KB; nothing hidden is raw."""
    receiver.route("hook", 410)  # a final failure: the nudge reached nobody and is refunded
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "stall_nudge.cli", "--log-level", "debug"),
        *("sweep", "--interval", "50ms", "--dsn", pg_dsn),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[bytes] = []
    async with asyncio.timeout(60):  # a hang guard, not a measurement
        while not lines or b"reached no receiver" not in lines[-1]:
            line = await proc.stderr.readline()
            assert line, b"".join(lines)[-2000:]
            lines.append(line)
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), 60)
    log = b"".join(lines).decode()
    huge = [line for line in lines if b"\\u200bqqq" in line]

    assert 0 == proc.returncode
    assert max(len(line) for line in lines) < 1536
    assert 0 < len(huge)
    assert sum(len(line) for line in huge) < 4096
    assert [] == HIDDEN.findall(log) + CUT_RUN.findall(log)


# The 1 MiB queue is in the body twice; aiohttp warns of a body over 1 MiB (tests turn
# warnings into errors, which would crash the delivery instead of failing it).
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
async def test_retries_failures_and_refunds_log_short_lines(
    pg_pool: asyncpg.Pool, host: PostgresHost, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook failing every attempt: each retry, failure and refund record is under 1.5 KB,
    with durations as format_duration writes them."""
    receiver.route("hook", 500)
    fast = DeliveryPolicy(
        retry_delays=(timedelta(milliseconds=10), timedelta(milliseconds=20)),
        timeout=timedelta(seconds=5),
    )
    for name in ("stall_core", "adapters"):  # whatever an in-process CLI run left them at
        caplog.set_level(logging.DEBUG, logger=name)
    ledger = PostgresLedger(pg_pool)
    async with HookDispatcher(hooks=PostgresHooks(pg_pool), policy=fast) as dispatcher:
        sweeper = Sweeper(ledger=ledger, wake=dispatcher, policy=PacingPolicy())
        await sweeper.tick()
        await dispatcher.settle()
        await sweeper.settle()
    ours = [r for r in caplog.records if r.name.startswith(("stall_core", "adapters"))]
    said = [r.getMessage() for r in ours]
    fields = [str(vars(r).get(key, "")) for r in ours for key in ("endpoint", "queue")]

    assert 2 == sweeper.refunded
    # The 2 MiB body of the huge queue's nudge is refused at once (413), the other is retried.
    assert [True, True] == [any(f"retrying in {d}" in m for m in said) for d in ("10ms", "20ms")]
    assert max(len(m) for m in said) < 1536
    assert max(len(f) for f in fields) <= 64
    assert [] == HIDDEN.findall("".join(said)) + CUT_RUN.findall("".join(said))


async def test_the_status_page_stays_small_for_huge_names(
    pg_pool: asyncpg.Pool, host: PostgresHost
) -> None:
    """Served by the ops port, the page for a 1 MiB queue and a look-alike is under 16 KB."""
    async with (
        stall_nudge.open_reaper(pg_pool) as reaper,
        serve_ops_port(reaper, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as session,
        session.get(url + "/") as response,
    ):
        page = await response.text()

    assert 200 == response.status
    assert len(page.encode()) < 16384
    assert LOOKALIKE_SHOWN in page
    assert [] == HIDDEN.findall(page) + CUT_RUN.findall(page)
