"""Hostile hook configuration in notify_hooks: refused one hook at a time, never leaked."""

from __future__ import annotations

import base64
import logging
import re
from datetime import timedelta

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.cli._status import render_table, status_json
from adapters.http import (
    DeliveryPolicy,
    HookDispatcher,
    MalformedSecret,
    UnsupportedUrl,
    parse_secret,
    safe_url,
)
from adapters.postgres import PostgresHooks, PostgresLedger
from stall_core import PacingPolicy, Sweeper
from stall_testing import PostgresHost
from tests.http.conftest import SECRET, Receiver
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
    """Bad scheme, host or secret: each refused with a logged reason, no request; good delivered."""
    host = PostgresHost(pg_pool)
    await host.add_endpoint("e1")
    bad = {
        "h-scheme": (f"ftp://u:{PASSWORD}@127.0.0.1/hook", SECRET),
        "h-nohost": ("http:///hook", SECRET),
        "h-badhost": (f"http://u:{PASSWORD}@a..b/hook", SECRET),
        "h-secret": (receiver.url("bad-secret"), BAD_SECRET),
        "h-short": (receiver.url("short"), SHORT_SECRET),
    }
    for hook_id, (url, secret) in bad.items():
        await host.add_hook(hook_id, endpoint_id="e1", url=url, secret=secret)
    good_url = (
        receiver.url("good").replace("http://", f"http://u:{PASSWORD}@") + "?token=tok-s3cret"
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
            await dispatcher.drain()
            await sweeper.settle()
    now, statuses = await ledger.status(policy=PacingPolicy())
    shown = "\n".join(
        [caplog.text, *render_table(statuses, now), status_json(statuses, now, PacingPolicy())]
    )

    assert T0 == now
    assert (1, 0) == (report.queued, sweeper.refunded)
    assert ["good"] == [r.path for r in receiver.requests]
    for hook_id in bad:
        assert f"hook {hook_id}: refused" in caplog.text
    assert "crashed" not in caplog.text
    failures = dict(await pg_pool.fetch("SELECT id, consecutive_failures FROM notify_hooks"))
    assert {**dict.fromkeys(bad, 1), "h-good": 0} == failures
    for leaked in (PASSWORD, "tok-s3cret", SECRET, BAD_SECRET, SHORT_SECRET.removeprefix("whsec_")):
        assert leaked not in shown
