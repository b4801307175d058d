"""The todo_ready NOTIFY payload: our tolerant parser, and a LISTEN loop fed garbage."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stall_testing import TODO_READY_CHANNEL, PostgresHost, parse_todo_ready
from tests.support import T0

ANYTHING = st.one_of(
    st.text(),
    st.binary(),
    st.none(),
    st.integers(),
    st.floats(),
    st.lists(st.text(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
NO_NUL = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))


@given(payload=ANYTHING)
def test_parser_never_raises(payload: object) -> None:
    """Whatever another process sends, the parser returns a pair or None; it never raises."""
    parsed = parse_todo_ready(payload)

    assert parsed is None or (
        isinstance(parsed, tuple)
        and len(parsed) == 2
        and all(parsed)
        and "\x00" not in "".join(parsed)
    )


@given(
    endpoint=st.text(NO_NUL, min_size=1).filter(lambda e: ":" not in e),
    queue=st.text(NO_NUL, min_size=1),
)
def test_parser_round_trips_the_hosts_payload(endpoint: str, queue: str) -> None:
    """A colon-free endpoint id and any queue (colons, unicode, spaces) round-trip, str or bytes."""
    payload = f"{endpoint}:{queue}"

    assert (endpoint, queue) == parse_todo_ready(payload)
    assert (endpoint, queue) == parse_todo_ready(payload.encode())


@pytest.mark.parametrize(
    "payload",
    ["", ":", "no-colon", ":lane-l", "ep-1:", "ep\x00:q", b"\xff\xfe:q", None, 42, ["ep", "q"]],
)
def test_malformed_payloads_are_none(payload: object) -> None:
    """Empty parts, a missing colon, NUL, undecodable bytes and non-text are all None."""
    assert parse_todo_ready(payload) is None


def test_an_endpoint_id_with_a_colon_splits_at_the_first() -> None:
    """The documented limit: the payload shape cannot carry an endpoint id with ':'."""
    assert ("a", "b:c") == parse_todo_ready("a:b:c")


@pytest.mark.postgres
async def test_listen_loop_survives_garbage_and_still_hears_real_wakes(
    pg_pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Malformed payloads from another process are ignored; real ones before and after arrive."""
    heard: list[tuple[str, str]] = []
    ignored: list[str] = []
    arrived = asyncio.Event()

    def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        parsed = parse_todo_ready(payload)
        if parsed is None:
            ignored.append(payload)
        else:
            heard.append(parsed)
            if parsed[1] == "last":
                arrived.set()

    listener = await asyncpg.connect(pg_dsn)
    await listener.add_listener(TODO_READY_CHANNEL, on_notify)
    host = PostgresHost(pg_pool)
    try:
        await host.add_endpoint("ep-1")
        await host.create_todo("t1", endpoint_id="ep-1", queue="lane:l ü", created_at=T0)
        for garbage in ("", ":", "no colon", ":q", "ep:", '{"json"}', "x" * 7990):
            await pg_pool.execute("SELECT pg_notify($1, $2)", TODO_READY_CHANNEL, garbage)
        await host.create_todo("t2", endpoint_id="ep-1", queue="last", created_at=T0)
        await asyncio.wait_for(arrived.wait(), 10)
    finally:
        await listener.close()

    assert [("ep-1", "lane:l ü"), ("ep-1", "last")] == heard
    assert 7 == len(ignored)
