"""Refused settings, named before any connection; libpq's variables at the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from stall_nudge import DsnError, StartupError, check_dsn, connect
from stall_nudge.cli.common import (
    LIBPQ_VARIABLES,
    CliError,
    Handling,
    resolve_dsn,
    with_libpq_environment,
)
from stall_nudge.redaction import redact, secrets_of

MARKER = "s3cret-MARKER-42"
#: Nothing listens on loopback port 1; every refusal here comes before asyncpg would dial it.
NEVER_DIALED = f"postgresql://u:{MARKER}@127.0.0.1:1/db"
MISSING = "/nonexistent/stall-nudge/root.crt"


@pytest.fixture(name="no_pg")
def _no_pg(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without any PG* variable; set the case's own on it."""
    for name in [n for n in os.environ if n.startswith("PG")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    ("dsn", "env", "start", "hidden"),
    [
        (f"{NEVER_DIALED}?sslmode=bogus", {}, "asyncpg refuses the DSN: `sslmode`", "bogus"),
        (
            f"postgresql://u:{MARKER}@127.0.0.1/db",
            {"PGPORT": "abc", "PGAPPNAME": "x"},
            "asyncpg refuses the DSN or PGPORT: ",
            "abc",
        ),
        # A raw '#' ends the authority early: the password's head lands in the port.
        ("postgresql://u:head#tail@127.0.0.1:1/db", {}, "asyncpg refuses the DSN: ", "head"),
        (
            NEVER_DIALED,
            {"PGSSLMODE": "verify-ca", "PGSSLROOTCERT": MISSING},
            "PGSSLROOTCERT names no file this process can read",
            MISSING,
        ),
        (
            f"postgresql://u:p@{MARKER}@127.0.0.1:1/db",
            {},
            "the DSN's user or password holds a raw '@': write it as %40",
            "p@",
        ),
        (
            NEVER_DIALED,
            {"PGUSER": "name\udcff"},
            "PGUSER holds text that is not valid UTF-8",
            "name",
        ),
        (
            f"{NEVER_DIALED}?connect_timeout=0",
            {},
            "the DSN's connect_timeout must be a whole number of seconds from 1",
            "=0",
        ),
    ],
)
async def test_a_refused_setting_is_one_line_naming_where_and_not_its_value(
    no_pg: pytest.MonkeyPatch, dsn: str, env: dict[str, str], start: str, hidden: str
) -> None:
    """A setting asyncpg refuses, or one it would misuse, is a DsnError naming where, no value."""
    for name, value in env.items():
        no_pg.setenv(name, value)

    with pytest.raises(StartupError) as caught:
        async with connect(dsn, timeout=5):
            pass

    message = str(caught.value)
    assert (DsnError, True, False, False, 1) == (
        type(caught.value),
        message.startswith(start),
        hidden in message,
        MARKER in message,
        len(message.splitlines()),
    ), message


def test_a_service_file_problem_is_named_by_line(tmp_path: Path) -> None:
    """A service its file lacks (asyncpg would skip it) and a file configparser cannot read."""
    services = tmp_path / "services.conf"
    services.write_text("[main]\nhost=127.0.0.1\n")
    broken = tmp_path / "broken.conf"
    broken.write_text(f"password={MARKER}\n")
    env = {"HOME": str(tmp_path), "PGSERVICEFILE": str(services)}

    passed = check_dsn("postgresql:///db?service=main", env=env)
    refusals = []
    for service, file in (("other", services), ("main", broken)):
        with pytest.raises(DsnError) as caught:
            check_dsn(f"postgresql:///db?service={service}", env=env | {"PGSERVICEFILE": str(file)})
        refusals.append(str(caught.value))

    assert (
        None,
        [
            "the DSN's service is not in the service file (PGSERVICEFILE): asyncpg would ignore it",
            "the service file (PGSERVICEFILE) is not valid: line 1",
        ],
    ) == (passed, refusals)


def test_every_password_form_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DSN's password (raw and percent-decoded), a query password and PGPASSWORD go."""
    monkeypatch.setenv("PGPASSWORD", "from-env")
    dsn = "postgresql://u:p%40ss@h/db?password=in-query"
    text = f"p%40ss p@ss in-query from-env {dsn}"

    assert "*** *** *** *** postgresql://u:***@h/db?password=***" == redact(text, secrets_of(dsn))


# -- libpq's environment variables at the command line --------------------------------

#: Every variable libpq 18 reads ("Environment Variables" in libpq's documentation), and
#: PGREQUIRESSL, which older libpq reads. Written out here, apart from the table it checks.
LIBPQ_READS = {
    *("PGHOST", "PGSSLNEGOTIATION", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER"),
    *("PGPASSWORD", "PGPASSFILE", "PGREQUIREAUTH", "PGCHANNELBINDING", "PGSERVICE"),
    *("PGSERVICEFILE", "PGOPTIONS", "PGAPPNAME", "PGSSLMODE", "PGREQUIRESSL"),
    *("PGSSLCOMPRESSION", "PGSSLCERT", "PGSSLKEY", "PGSSLCERTMODE", "PGSSLROOTCERT"),
    *("PGSSLCRL", "PGSSLCRLDIR", "PGSSLSNI", "PGREQUIREPEER", "PGSSLMINPROTOCOLVERSION"),
    *("PGSSLMAXPROTOCOLVERSION", "PGGSSENCMODE", "PGKRBSRVNAME", "PGGSSLIB"),
    *("PGGSSDELEGATION", "PGCONNECT_TIMEOUT", "PGCLIENTENCODING", "PGTARGETSESSIONATTRS"),
    *("PGLOADBALANCEHOSTS", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION"),
    *("PGDATESTYLE", "PGTZ", "PGGEQO", "PGSYSCONFDIR", "PGLOCALEDIR"),
}
#: The ones asyncpg reads: libpq's variable for each connection parameter it documents taking,
#: as stall_nudge._connect.ASYNCPG_VARIABLES lists them (PGSERVICEFILE, read only for a DSN's
#: service=, is refused at the command line).
ASYNCPG_READS = {
    *("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGPASSFILE", "PGSSLMODE"),
    *("PGSSLNEGOTIATION", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLKEY", "PGSSLCERT"),
    *("PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGTARGETSESSIONATTRS"),
    *("PGKRBSRVNAME", "PGGSSLIB"),
}
DSN = "postgresql://u@h/db"


def _handled(handling: Handling) -> set[str]:
    return {name for name, row in LIBPQ_VARIABLES.items() if row.handling is handling}


def test_every_libpq_variable_is_left_to_asyncpg_honoured_or_refused() -> None:
    """The table holds each libpq variable once, and leaves to asyncpg exactly those it reads."""
    assert (sorted(LIBPQ_READS), sorted(ASYNCPG_READS)) == (
        sorted(LIBPQ_VARIABLES),
        sorted(_handled(Handling.ASYNCPG)),
    )


@pytest.mark.parametrize("name", sorted(_handled(Handling.REFUSED)))
def test_a_variable_asyncpg_ignores_is_one_usage_line_naming_it(
    no_pg: pytest.MonkeyPatch, name: str
) -> None:
    """Each refused variable, set, stops a command with exit 2 naming it, why, never its value."""
    no_pg.setenv(name, MARKER)

    with pytest.raises(CliError) as caught:
        resolve_dsn(argparse.Namespace(dsn=NEVER_DIALED))

    message = str(caught.value)
    assert (2, True, False, 1) == (
        caught.value.status,
        message.startswith(f"{name} is set, but {LIBPQ_VARIABLES[name].reason}; unset it"),
        MARKER in message,
        len(message.splitlines()),
    ), message


def test_an_empty_variable_counts_as_unset() -> None:
    """PGSERVICE= (as env files blank a variable) is neither refused nor handed on."""
    env = dict.fromkeys(LIBPQ_VARIABLES, "")

    assert DSN == with_libpq_environment(DSN, env)


def test_honoured_variables_become_dsn_parameters_unless_the_dsn_names_them() -> None:
    """PGAPPNAME, PGTZ and the rest are handed on, percent-encoded; the DSN's own win, any case."""
    env = {
        "PGAPPNAME": "billing sidecar&1",
        "PGTZ": "Asia/Tokyo",
        "PGDATESTYLE": "ISO, DMY",
        "PGGEQO": "off",
        "PGCONNECT_TIMEOUT": "7",
        "PGCLIENTENCODING": "utf-8",  # what asyncpg asks for anyway: adds nothing
        "PGHOST": "elsewhere",  # asyncpg's own: left to it
    }

    assert (
        "postgresql://u@h/db?timezone=UTC&application_name=billing%20sidecar%261"
        "&connect_timeout=7&DateStyle=ISO%2C%20DMY&geqo=off"
    ) == with_libpq_environment(f"{DSN}?timezone=UTC", env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PGCONNECT_TIMEOUT": "0"}, "PGCONNECT_TIMEOUT must be a whole number of seconds from 1"),
        (
            {"PGCLIENTENCODING": "LATIN1"},
            "PGCLIENTENCODING must name UTF8: asyncpg speaks UTF-8 only",
        ),
    ],
)
def test_an_honoured_variable_with_a_value_it_cannot_have_is_refused(
    env: dict[str, str], message: str
) -> None:
    """PGCONNECT_TIMEOUT in whole seconds from 1 (0 is libpq's "forever"), UTF8 only: one line."""
    with pytest.raises((CliError, DsnError)) as caught:
        with_libpq_environment(DSN, env)

    assert message == str(caught.value)
