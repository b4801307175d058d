"""Huge, hidden and control characters in names, end to end: what a person reads stays short and
shows what is hidden; JSON keeps each name whole, in ASCII (D22).

The one place output escaping is tested through the command line and the log;
the status page's rendering, in tests/ops/test_status_page.py, and /metrics,
in tests/ops/test_metrics.py.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from adapters.http import DeliveryPolicy, HookDispatcher
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import PacingPolicy, Sweeper
from stall_testing import PostgresHost, Receiver
from tests.cli.conftest import cli
from tests.http.conftest import SECRET

pytestmark = pytest.mark.postgres

#: What a sender could put in a name to drive a terminal: ESC with a screen clear, BEL, CR,
#: a C1 CSI and a right-to-left override.
CONTROL = "\x1b[2J\x07\r\x9b\u202e"
CONTROL_SHOWN = "\\x1b[2J\\x07\\x0d\\x9b\\u202e"
#: Behind a zero-width space, and control characters and a word joiner: together the most a
#: pair's names may hold and be swept (2,000 bytes; a longer pair is only listed by status).
QUEUE = "\u200b" + "q" * 1000
ENDPOINT = CONTROL + "\u2060" + "e" * 979
ENDPOINT_SHOWN = CONTROL_SHOWN + "\\u2060eee"
#: 64 KiB each: about the most a primary key's index takes (a title too: aiohttp warns of a
#: body over 1 MiB).
TODO = "\ufeff" + "t" * 2**16
HOOK = "h" * 2**16
TITLE = "x" * 2**16
#: Reads as "lane-l" on a screen: a soft hyphen, zero-width characters and tags hide in it.
LOOKALIKE = "lane\u00ad\u200b\u2060\ufeff\U000e0041\U000e007f-l"
LOOKALIKE_SHOWN = "lane\\xad\\u200b\\u2060\\ufeff\\U000e0041\\U000e007f-l"
#: What must never reach a person's screen raw (a newline ends a line, a tab is harmless).
HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b\u202e\u2060\ufeff\U000e0000-\U000e007f]"
)
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
    """Two nudges on 1 MiB, control and look-alike names: one line under 1 KB, every hidden
    and control character shown as its escape."""
    result = await cli("sweep", "--once", "--dsn", pg_dsn)

    assert 0 == result.status, result.err[:2000]
    assert 1 == len(result.out.splitlines())
    assert len(result.out.encode()) < 1024
    assert LOOKALIKE_SHOWN in result.out
    assert ENDPOINT_SHOWN in result.out
    assert "\\u200b" + "q" * 55 + "..." in result.out
    assert [] == HIDDEN.findall(result.out + result.err)


async def test_sweep_once_json_keeps_every_name_whole(pg_dsn: str, host: PostgresHost) -> None:
    """--json names the endpoint, queue and todo of each nudge exactly as the sender wrote them,
    in ASCII: every other character, a control one included, is a JSON escape."""
    result = await cli("sweep", "--once", "--json", "--dsn", pg_dsn)

    assert 0 == result.status, result.err[:2000]
    assert (True, []) == (result.out.isascii(), HIDDEN.findall(result.out))
    assert {(ENDPOINT, QUEUE, TODO), (ENDPOINT, LOOKALIKE, "t-look")} == {
        (n["endpoint_id"], n["queue"], n["todo_id"]) for n in json.loads(result.out)["charged"]
    }


async def test_status_text_is_short_and_escaped_and_its_json_whole(
    pg_dsn: str, host: PostgresHost
) -> None:
    """Each table line stays under 400 characters, a huge name cut with a marker, and shows the
    hidden and control characters as escapes; --json has every name whole, in ASCII."""
    table = await cli("status", "--dsn", pg_dsn)
    as_json = await cli("status", "--json", "--dsn", pg_dsn)

    assert (0, 0) == (table.status, as_json.status), table.err + as_json.err
    assert max(len(line) for line in table.out.splitlines()) < 400
    assert (True, True, True) == (
        LOOKALIKE_SHOWN in table.out,
        ENDPOINT_SHOWN in table.out,
        "\\u200b" + "q" * 55 + "..." in table.out,
    )
    assert [] == HIDDEN.findall(table.out) + CUT_RUN.findall(table.out)
    assert (True, []) == (as_json.out.isascii(), HIDDEN.findall(as_json.out))
    assert {(ENDPOINT, QUEUE), (ENDPOINT, LOOKALIKE)} == {
        (p["endpoint_id"], p["queue"]) for p in json.loads(as_json.out)["pairs"]
    }


async def test_a_sweep_logs_each_nudge_in_a_few_lines_of_bounded_length(
    pg_dsn: str, host: PostgresHost, receiver: Receiver
) -> None:
    """At debug, from start to the refund of a nudge no receiver took, every line is under
    1.5 KB and the lines naming the huge queue come to under 4 KB; nothing hidden is raw."""
    receiver.route("hook", 410)  # a final failure: the nudge reached nobody and is refunded

    result = await cli("--log-level", "debug", "sweep", "--once", "--dsn", pg_dsn)

    lines = result.err.splitlines()
    huge = [line for line in lines if "\\u200bqqq" in line]
    assert 0 == result.status, result.err[-2000:]
    assert 2 == sum("reached no receiver" in line for line in lines), result.err[-2000:]
    assert max(len(line.encode()) for line in lines) < 1536
    assert 0 < len(huge)
    assert sum(len(line.encode()) for line in huge) < 4096
    assert ENDPOINT_SHOWN in result.err
    assert [] == HIDDEN.findall(result.err) + CUT_RUN.findall(result.err)


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
