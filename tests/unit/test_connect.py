"""stall_nudge's DSN checks and redaction, before anything reaches the driver."""

from __future__ import annotations

import pytest

from stall_nudge import StartupError, check_dsn
from stall_nudge.redaction import redact, secrets_of


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u@h/db",
        "postgres://u:pw@h:5432/db",
        "postgresql://u@[::1]/db",
        "postgresql://u@[::1]:5432/db",
        "postgresql://u@h1:5432,h2:5433/db",
        "postgresql:///db?host=/tmp/sock",
    ],
)
def test_well_formed_dsns_pass(dsn: str) -> None:
    """DSNs asyncpg accepts, IPv6 and multi-host included, pass the check."""
    assert None is check_dsn(dsn)


BAD_PORT = "malformed DSN: the port must be a number from 1 to 65535"


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("mysql://u@h/db", "malformed DSN: expected postgresql://user@host:port/db"),
        ("postgresql://u@h:99999/db", BAD_PORT),
        ("postgresql://u@h:0/db", BAD_PORT),
        ("postgresql://u@h1:1,h2:x/db", BAD_PORT),
        ("postgresql://u@h/db?port=70000", BAD_PORT),
        ("postgresql://u:pw\udcff@h/db", "the DSN holds text that is not valid UTF-8"),
    ],
)
def test_malformed_dsns_are_refused_without_quoting_them(dsn: str, message: str) -> None:
    """Each malformed DSN is refused with a message that names the field, not the value."""
    with pytest.raises(StartupError) as caught:
        check_dsn(dsn)

    assert message == str(caught.value)


def test_pgport_is_checked_only_when_the_dsn_names_no_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PGPORT=abc is refused for a DSN without a port, ignored for one with a port."""
    monkeypatch.setenv("PGPORT", "abc")

    with pytest.raises(StartupError, match="PGPORT must be a number from 1 to 65535"):
        check_dsn("postgresql://u@h/db")
    assert None is check_dsn("postgresql://u@h:5432/db")


def test_every_password_form_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DSN's password (raw and percent-decoded), a query password and PGPASSWORD go."""
    monkeypatch.setenv("PGPASSWORD", "from-env")
    dsn = "postgresql://u:p%40ss@h/db?password=in-query"
    text = f"p%40ss p@ss in-query from-env {dsn}"

    assert "*** *** *** *** postgresql://u:***@h/db?password=***" == redact(text, secrets_of(dsn))
