"""The ops port against what a raw socket can send: every answer carries the security headers,
a request HTTP cannot parse is a quiet 400, and HTTP/0.9 gets nothing useful."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import attrs
import pytest

import stall_nudge
from stall_nudge.ops_port import serve_ops_port

pytestmark = pytest.mark.postgres

#: More than aiohttp reads of a request line or a header (8190 bytes).
LONG = "a" * 9000


@attrs.frozen
class Answer:
    status_line: str
    headers: dict[str, str]
    body: bytes


async def exchange(url: str, request: bytes) -> bytes:
    """Send ``request`` on a fresh loopback connection; everything read until the port closes it."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(60):  # a hang guard, not a measurement
            return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def parse(raw: bytes) -> Answer:
    """The status line, headers (lower-case names) and body of one raw HTTP answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {}
    for field in fields:
        name, _, value = field.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(status_line, headers, body)


@pytest.fixture(name="url")
async def _url(pg_pool: asyncpg.Pool) -> AsyncIterator[str]:
    """The base URL of an ops port over a real reaper."""
    async with (
        stall_nudge.open_reaper(pg_pool, stop_timeout=5) as reaper,
        serve_ops_port(reaper, host="127.0.0.1", port=0) as url,
    ):
        yield url


def assert_guarded(answer: Answer) -> None:
    """The answer carries the policy (nothing to run, never framed) and nosniff."""
    policy = answer.headers.get("content-security-policy", "")
    assert "default-src 'none'" in policy, answer
    assert "frame-ancestors 'none'" in policy
    assert "script" not in policy
    assert "nosniff" == answer.headers.get("x-content-type-options")


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        ("GET / HTTP/1.1", 200),
        ("GET /metrics HTTP/1.1", 200),
        ("GET /healthz HTTP/1.1", 503),
        ("GET /readyz HTTP/1.1", 503),
        ("GET /nothing-here HTTP/1.1", 404),
        ("POST / HTTP/1.1", 405),
        ("HEAD / HTTP/1.1", 200),
        ("GET /?x=1 HTTP/1.0", 200),
    ],
)
async def test_every_answer_carries_the_security_headers(
    url: str, request_line: str, status: int
) -> None:
    """Pages, errors and HEAD alike send the content security policy and nosniff."""
    raw = await exchange(url, f"{request_line}\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    answer = parse(raw)

    assert f" {status} " in answer.status_line + " ", answer.status_line
    assert_guarded(answer)


async def test_head_answers_the_headers_of_the_page_without_its_body(url: str) -> None:
    """HEAD / has the page's type and no body."""
    answer = parse(await exchange(url, b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))

    assert ("text/html; charset=utf-8", b"") == (answer.headers["content-type"], answer.body)


@pytest.mark.parametrize(
    "request_",
    [
        f"GET /{LONG} HTTP/1.1\r\nHost: x\r\n\r\n",
        f"GET / HTTP/1.1\r\nHost: x\r\nX-Long: {LONG}\r\n\r\n",
        f"GET / HTTP/1.1\r\nHost: x\r\n{LONG}: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not HTTP at all\r\n\r\n",
    ],
    ids=["long request line", "long header value", "long header name", "malformed", "tls"],
)
async def test_a_request_http_cannot_parse_is_a_quiet_400(
    url: str, request_: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 400 with the headers and a fixed text, no echo of the request, and at most one log line
    (at debug), never a traceback."""
    for name in ("aiohttp", "stall_nudge"):  # whatever an in-process CLI run left them at
        caplog.set_level(logging.DEBUG, logger=name)

    answer = parse(await exchange(url, request_.encode("latin-1")))
    records = [r for r in caplog.records if r.name.startswith(("aiohttp", "stall_nudge"))]

    assert "HTTP/1.0 400 Bad Request" == answer.status_line
    assert b"400 Bad Request\n" == answer.body
    assert_guarded(answer)
    assert [] == [r.getMessage() for r in records if r.exc_info or r.exc_text]
    assert [logging.DEBUG] == [r.levelno for r in records]


async def test_an_http_0_9_request_gets_nothing_useful(url: str) -> None:
    """A bare ``GET /`` line (HTTP/0.9) is answered 400 and closed: never the page."""
    raw = await exchange(url, b"GET /\r\n\r\n")

    assert b"queue" not in raw
    assert raw.startswith(b"HTTP/0.9 400 ")
