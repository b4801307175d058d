"""Hostile hook configuration in notify_hooks: refused one hook at a time, never leaked."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta

import asyncpg
import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.http import (
    CREATED,
    DeliveryPolicy,
    HookDispatcher,
    MalformedSecret,
    UnsupportedUrl,
    parse_secret,
    safe_url,
)
from adapters.memory import MemoryBoard, MemoryHooks
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import HookTarget, Nudge, PacingPolicy, Sweeper, TodoRef, WakeError
from stall_nudge.cli.status import render_table, status_json
from stall_testing import PostgresHost, Receiver
from tests.http.conftest import SECRET
from tests.support import T0, FakeClock

FAST = DeliveryPolicy(retry_delays=(), timeout=timedelta(seconds=5))
PASSWORD = "hunter2-pw"
BAD_SECRET = "whsec_hunter2-not-base64!"
REFUSALS = (
    r"secret does not start with 'whsec_'"
    r"|secret after 'whsec_' is not valid base64"
    r"|secret key is \d+ bytes; Standard Webhooks keys are 24\.\.64"
)
SHORT_SECRET = "whsec_" + base64.b64encode(b"hunter2-short-key").decode()
TODO = TodoRef(id="t1", created_at=T0)


@given(url=st.text())
def test_safe_url_refuses_or_returns_a_credential_free_http_url(url: str) -> None:
    """Any text is refused as UnsupportedUrl or shown as http(s)://host... with no userinfo."""
    try:
        shown = safe_url(url)
    except UnsupportedUrl:
        return
    scheme, _, rest = shown.partition("://")
    assert scheme in ("http", "https")
    assert "@" not in rest.split("/", 1)[0]


@given(
    url=st.sampled_from(["http://", "https://"]).flatmap(
        lambda scheme: st.text(min_size=1).map(lambda host: f"{scheme}u:{PASSWORD}@{host}/p")
    )
)
def test_safe_url_never_shows_the_password(url: str) -> None:
    """Whatever the host part, a shown URL never carries the password."""
    try:
        shown = safe_url(url)
    except UnsupportedUrl:
        return
    assert PASSWORD not in shown


@pytest.mark.parametrize(
    "url",
    [
        f"http://u:{PASSWORD}@a..b/hook",
        f"http://u:{PASSWORD}@exa mple/hook",
        "http://ho\x01st/hook",
        "http://" + "a" * 64 + ".example/hook",
    ],
)
def test_unusable_host_names_are_refused(url: str) -> None:
    """A host no resolver can look up is refused up front, not sent to the network."""
    with pytest.raises(UnsupportedUrl, match="host"):
        safe_url(url)


@given(secret=st.one_of(st.text(), st.text().map(lambda s: "whsec_" + s)))
def test_parse_secret_returns_a_key_or_refuses_without_quoting(secret: str) -> None:
    """Any secret yields a 24..64 byte key or MalformedSecret whose message never quotes it."""
    problem = ""
    try:
        key = parse_secret(secret)
    except MalformedSecret as exc:
        problem = str(exc)
    else:
        assert 24 <= len(key) <= 64
    # The refusal is one of three fixed sentences: nothing of the secret can be in it.
    assert problem == "" or re.fullmatch(REFUSALS, problem), problem


@pytest.mark.postgres
async def test_bad_hooks_are_refused_one_by_one_and_nothing_leaks(
    pg_pool: asyncpg.Pool, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad scheme, host, secret or address: each refused with a reason, no request; good sent."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    bad = {
        "h-scheme": (f"ftp://u:{PASSWORD}@127.0.0.1/hook", SECRET),
        "h-nohost": ("http:///hook", SECRET),
        "h-badhost": (f"http://u:{PASSWORD}@a..b/hook", SECRET),
        "h-secret": (receiver.url("bad-secret", BAD_SECRET), BAD_SECRET),
        "h-short": (receiver.url("short", SHORT_SECRET), SHORT_SECRET),
        "h-metadata": (f"http://u:{PASSWORD}@169.254.169.254/latest/meta-data/", SECRET),
        "h-decimal": ("http://2852039166/", SECRET),
    }
    for hook_id, (url, secret) in bad.items():
        await host.add_hook(hook_id, endpoint_id="e1", url=url, secret=secret)
    good_url = (
        receiver.url("good", SECRET).replace("http://", f"http://u:{PASSWORD}@")
        + "?token=tok-s3cret"
    )
    await host.add_hook("h-good", endpoint_id="e1", url=good_url, secret=SECRET)
    await host.create_todo(
        "t1", endpoint_id="e1", queue="lane-l", created_at=T0 - timedelta(minutes=10)
    )
    ledger = PostgresLedger(pg_pool, clock=FakeClock(T0))

    with caplog.at_level(logging.DEBUG):
        async with HookDispatcher(hooks=PostgresHooks(pg_pool), policy=FAST) as dispatcher:
            sweeper = Sweeper(ledger=ledger, wake=dispatcher)
            report = await sweeper.tick()
            await dispatcher.settle()
            await sweeper.settle()
    now, statuses = await ledger.status(policy=PacingPolicy())
    shown = "\n".join(
        [caplog.text, *render_table(statuses, now), status_json(statuses, now, PacingPolicy())]
    )

    assert T0 == now
    assert (1, 0) == (report.queued, sweeper.refunded)
    assert ["good"] == [r.path for r in receiver.messages]
    for hook_id in bad:
        assert f"hook {hook_id}: refused" in caplog.text
    assert "crashed" not in caplog.text
    failures = dict(await pg_pool.fetch("SELECT id, consecutive_failures FROM notify_hooks"))
    assert {**dict.fromkeys(bad, 1), "h-good": 0} == failures
    for leaked in (PASSWORD, "tok-s3cret", SECRET, BAD_SECRET, SHORT_SECRET.removeprefix("whsec_")):
        assert leaked not in shown


# -- text that cannot be encoded: refused by field, before the network or the database ------

#: A secret's distinctive part, so a leak anywhere is found by a substring search.
LEAKY_KEY = base64.b64encode(b"hunter2-unencodable-key-32bytes!").decode()


@pytest.mark.parametrize("bad", ["\ud800", "\x00"], ids=["lone-surrogate", "nul"])
@pytest.mark.parametrize("field", ["secret", "url"])
async def test_unencodable_secret_or_url_is_refused_by_field_and_never_echoed(
    field: str, bad: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A secret or URL with a lone surrogate or NUL is refused by field, never quoted."""
    board = MemoryBoard(clock=FakeClock(T0))
    board.add_endpoint("e1")
    url = receiver.url("hook", SECRET) + "?token=tok-s3cret"
    secret = f"whsec_{LEAKY_KEY}"
    if field == "secret":
        secret = secret[:12] + bad + secret[12:]
    else:
        url += bad
    board.add_hook("h1", endpoint_id="e1", url=url, secret=secret)
    once = attrs.evolve(FAST, disable_after=1)

    with caplog.at_level(logging.DEBUG):
        async with HookDispatcher(hooks=MemoryHooks(board), policy=once) as dispatcher:
            with pytest.raises(WakeError) as raised:
                await dispatcher.wake(
                    Nudge(endpoint_id="e1", queue="q", todo=TODO, number=1, charged_at=T0)
                )
            await dispatcher.settle()

    problem = (
        "a NUL character" if bad == "\x00" else "text that cannot be encoded (a lone surrogate)"
    )
    reason = board.hooks["h1"].disabled_reason
    assert f"refused: {field} holds {problem}" == reason
    assert ([], 1) == (receiver.messages, dispatcher.stats.refused)
    shown = "\n".join([caplog.text, str(raised.value), reason or ""])
    for leaked in (LEAKY_KEY[:6], LEAKY_KEY[6:], "tok-s3cret"):
        assert leaked not in shown


@pytest.mark.parametrize("bad", ["\ud800", "\x00"], ids=["lone-surrogate", "nul"])
@pytest.mark.parametrize("field", ["endpoint_id", "queue", "todo title"])
async def test_unencodable_names_are_refused_before_the_hooks_are_looked_up(
    field: str, bad: str, board_hooks_with_probe: tuple[MemoryBoard, list[str]]
) -> None:
    """A name or title that cannot be encoded is refused by field before any hook lookup."""
    board, looked_up = board_hooks_with_probe
    names = {"endpoint_id": "e1", "queue": "q", "todo title": "title"}
    names[field] += bad

    async with HookDispatcher(hooks=_ProbedHooks(board, looked_up), policy=FAST) as dispatcher:
        with pytest.raises(WakeError, match=f"^message refused: {field} holds ") as raised:
            await dispatcher.notify(
                endpoint_id=names["endpoint_id"],
                queue=names["queue"],
                todo=TodoRef(id="t1", created_at=T0, title=names["todo title"]),
                reason=CREATED,
            )

    assert ([], None) == (looked_up, raised.value.__cause__)
    assert bad not in str(raised.value)


class _ProbedHooks(MemoryHooks):
    """The memory directory, noting each pair it is asked about."""

    def __init__(self, board: MemoryBoard, looked_up: list[str]) -> None:
        super().__init__(board)
        self.looked_up = looked_up

    async def hooks_covering(self, endpoint_id: str, queue: str) -> tuple[HookTarget, ...]:
        self.looked_up.append(f"{endpoint_id}/{queue}")
        return tuple(await super().hooks_covering(endpoint_id, queue))


@pytest.fixture(name="board_hooks_with_probe")
def _board_hooks_with_probe() -> tuple[MemoryBoard, list[str]]:
    board = MemoryBoard(clock=FakeClock(T0))
    board.add_endpoint("e1")
    return board, []


@pytest.mark.postgres
@pytest.mark.parametrize("bad", ["\ud800", "\x00"], ids=["lone-surrogate", "nul"])
async def test_postgres_hooks_refuse_unencodable_text_before_asyncpg(
    pg_pool: asyncpg.Pool, bad: str
) -> None:
    """Every text the hook directory sends is checked first: the error names the field only."""
    hooks = PostgresHooks(pg_pool)
    value = f"hunter2-{bad}-value"
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("endpoint_id", lambda: hooks.hooks_covering(value, "q")),
        ("queue", lambda: hooks.hooks_covering("e1", value)),
        ("hook id", lambda: hooks.record_success(value)),
        ("hook id", lambda: hooks.record_successes(["h1", value])),
        ("reason", lambda: hooks.record_failure("h1", at=T0, reason=value, disable_after=10)),
    ]

    for field, call in calls:
        with pytest.raises(ValueError, match=f"^{field} holds ") as raised:
            await call()
        assert not isinstance(raised.value, asyncpg.PostgresError)
        assert "hunter2" not in str(raised.value)
