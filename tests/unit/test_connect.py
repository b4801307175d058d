"""stall_nudge's DSN checks and redaction, before anything reaches the driver."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from stall_nudge import DsnError, StartupError, check_dsn
from stall_nudge.cli.common import (
    LIBPQ_VARIABLES,
    CliError,
    Handling,
    with_libpq_environment,
)
from stall_nudge.redaction import redact, secrets_of

ROOT = Path(__file__).parents[2]
#: The asyncpg releases check_dsn mirrors (src/stall_nudge/_connect.py, "Which asyncpg"):
#: from the first to before the second. Raise it only after reading the new parser.
WRITTEN_FOR = ((0, 31), (0, 33))

#: A file that exists, for the certificate and key parameters.
HERE = __file__
MISSING = "/nonexistent/stall-nudge/root.crt"
SSL_MODES = "disable, allow, prefer, require, verify-ca, verify-full"
TARGETS = "any, primary, standby, prefer-standby, read-write, read-only"
TLS = "TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"


@pytest.fixture(name="home")
def _home(tmp_path: Path) -> dict[str, str]:
    """An environment whose only variable is a HOME with no ~/.postgresql in it."""
    return {"HOME": str(tmp_path)}


@pytest.mark.parametrize(
    ("dsn", "env"),
    [
        ("postgresql://u@h/db", {}),
        ("postgres://u:pw@h:5432/db", {}),
        ("postgresql://u@[::1]/db", {}),
        ("postgresql://u@[::1]:5432/db", {}),
        ("postgresql://u@h1:5432,h2:5433/db", {}),
        ("postgresql://u@h:%35432/db", {}),
        ("postgresql:///db?host=/tmp/sock", {}),
        ("postgresql:///db?host=h1,h2&port=5432,5433", {}),
        ("postgresql:///db?host=h&port=5432", {"PGPORT": "abc"}),
        ("postgresql://u@h/db?sslmode=verify_full&sslrootcert=" + HERE, {}),
        ("postgresql://u@h/db?sslmode=require", {}),
        ("postgresql://u@h/db?sslmode=disable&sslcert=" + MISSING, {}),
        ("postgresql://u@h/db?sslmode=prefer&sslrootcert=" + MISSING, {}),
        ("postgresql://u@h/db?sslmode=require", {"PGSSLMODE": "bogus"}),
        ("postgresql://u@h/db?target_session_attrs=read-write&application_name=x", {}),
        ("postgresql://u@h/db?ssl_min_protocol_version=TLSv1.3", {}),
        ("postgresql://u@h/db?sslmode=verify-ca", {"PGSSLROOTCERT": HERE}),
        ("postgresql://u@h/db", {"PGSSLMINPROTOCOLVERSION": "", "PGPORT": "", "PGHOST": ""}),
    ],
)
def test_dsns_asyncpg_accepts_pass(home: dict[str, str], dsn: str, env: dict[str, str]) -> None:
    """DSNs and environments asyncpg reads as meant, IPv6 and multi-host included, pass."""
    assert None is check_dsn(dsn, env=home | env)


BAD_PORT = "the DSN's port must be a number from 1 to 65535"
IPV6 = "an IPv6 address must be written whole in brackets, as [::1] or [::1]:5432"


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("mysql://u@h/db", "malformed DSN: expected postgresql://user@host:port/db"),
        ("postgresql://u@h:99999/db", BAD_PORT),
        ("postgresql://u@h:0/db", BAD_PORT),
        ("postgresql://u@h1:1,h2:x/db", BAD_PORT),
        ("postgresql://u@h/db?port=70000", BAD_PORT),
        ("postgresql:///db?host=h1,h2,h3&port=1,2", "the DSN's port names 2 ports for 3 hosts"),
        ("postgresql://u:pw\udcff@h/db", "the DSN holds text that is not valid UTF-8"),
        ("postgresql://u@[::1/db", f"the DSN's host: {IPV6}"),
        ("postgresql://u@[::1]x/db", f"the DSN's host: {IPV6}"),
        ("postgresql:///db?host=[::1", f"the DSN's host: {IPV6}"),
        ("postgresql://u@h1,,h2/db", "the DSN's host has an empty entry in its list"),
        ("postgresql://u@h1,/db", "the DSN's host has an empty entry in its list"),
        ("postgresql://u@" + "a" * 64 + ".invalid/db", "the DSN's host is not a valid DNS name"),
        (
            "postgresql://u:p@ss@h/db",
            "malformed DSN: the user or password holds a raw '@': write it as %40",
        ),
        (
            "postgresql://u:pa[ss@h/db",
            "malformed DSN: the user or password holds a raw '[' or ']': write them as %5B, %5D",
        ),
        ("postgresql://u:pa#ss@h/db", "malformed DSN: a raw '#' ends it early: write it as %23"),
        ("postgresql://u@h/db?sslmode", "malformed DSN: the query must be name=value pairs"),
        ("postgresql://u@h/db?a=1&", "malformed DSN: the query must be name=value pairs"),
        ("postgresql://u@h/db?sslmode=bogus", f"the DSN's sslmode must be one of {SSL_MODES}"),
        ("postgresql://u@h/db?sslmode=parse", f"the DSN's sslmode must be one of {SSL_MODES}"),
        (
            "postgresql://u@h/db?target_session_attrs=bogus",
            f"the DSN's target_session_attrs must be one of {TARGETS}",
        ),
        ("postgresql://u@h/db?gsslib=krb", "the DSN's gsslib must be one of gssapi, sspi"),
        (
            "postgresql://u@h/db?sslnegotiation=tls",
            "the DSN's sslnegotiation must be one of postgres, direct",
        ),
        (
            "postgresql://u@h/db?sslnegotiation=direct&sslmode=prefer",
            "the DSN's sslnegotiation=direct needs sslmode require, verify-ca or verify-full",
        ),
        (
            "postgresql://u@h/db?ssl_max_protocol_version=SSLv3",
            f"the DSN's ssl_max_protocol_version must be one of {TLS}",
        ),
        (
            f"postgresql://u@h/db?sslmode=verify-full&sslrootcert={MISSING}",
            "the DSN's sslrootcert names a file that does not exist",
        ),
        (
            f"postgresql://u@h/db?sslmode=require&sslrootcert={MISSING}",
            "the DSN's sslrootcert names a file that does not exist",
        ),
        (
            "postgresql://u@h/db?sslmode=verify-ca&sslrootcert=/",
            "the DSN's sslrootcert names a directory, not a file",
        ),
        (
            "postgresql://u@h/db?sslmode=verify-ca",
            "sslmode verify-ca needs a root certificate: set the DSN's sslrootcert "
            "or PGSSLROOTCERT, or put one at ~/.postgresql/root.crt",
        ),
        (
            f"postgresql://u@h/db?sslmode=require&sslcrl={MISSING}",
            "the DSN's sslcrl names a file that does not exist",
        ),
        (
            f"postgresql://u@h/db?sslcert={MISSING}",
            "the DSN's sslcert names a file that does not exist",
        ),
        (
            f"postgresql://u@h/db?sslcert={HERE}&sslkey={MISSING}",
            "the DSN's sslkey names a file that does not exist",
        ),
    ],
)
def test_dsn_mistakes_are_refused_naming_the_parameter(
    home: dict[str, str], dsn: str, message: str
) -> None:
    """Each DSN mistake is a DsnError whose message names the parameter, never its value."""
    with pytest.raises(DsnError) as caught:
        check_dsn(dsn, env=home)

    assert message == str(caught.value)


@pytest.mark.parametrize(
    ("dsn", "env", "message"),
    [
        ("postgresql://u@h/db", {"PGPORT": "abc"}, "PGPORT must be a number from 1 to 65535"),
        ("postgresql://u@h:5432/db", {"PGPORT": "abc"}, "PGPORT must be a number from 1 to 65535"),
        ("postgresql:///db?host=h", {"PGPORT": "1,x"}, "PGPORT must be a number from 1 to 65535"),
        ("postgresql://u@h/db", {"PGPORT": "1,2"}, "PGPORT names 2 ports for 1 host"),
        ("postgresql:///db", {"PGHOST": "[::1"}, f"PGHOST: {IPV6}"),
        ("postgresql:///db", {"PGHOST": "h1,"}, "PGHOST has an empty entry in its list"),
        ("postgresql://u@h/db", {"PGSSLMODE": "bogus"}, f"PGSSLMODE must be one of {SSL_MODES}"),
        ("postgresql://u@h/db", {"PGSSLMODE": ""}, f"PGSSLMODE must be one of {SSL_MODES}"),
        (
            "postgresql://u@h/db",
            {"PGTARGETSESSIONATTRS": "bogus"},
            f"PGTARGETSESSIONATTRS must be one of {TARGETS}",
        ),
        (
            "postgresql://u@h/db",
            {"PGSSLMODE": "verify-full", "PGSSLROOTCERT": MISSING},
            "PGSSLROOTCERT names a file that does not exist",
        ),
        (
            "postgresql://u@h/db",
            {"PGSSLCERT": MISSING},
            "PGSSLCERT names a file that does not exist",
        ),
        ("postgresql://u@h/db", {"PGUSER": "x\udcff"}, "PGUSER holds text that is not valid UTF-8"),
    ],
)
def test_libpq_variable_mistakes_are_refused_naming_the_variable(
    home: dict[str, str], dsn: str, env: dict[str, str], message: str
) -> None:
    """A libpq variable asyncpg would read and choke on is a DsnError naming the variable."""
    with pytest.raises(DsnError) as caught:
        check_dsn(dsn, env=home | env)

    assert message == str(caught.value)


def test_a_root_certificate_in_home_satisfies_verify_full(tmp_path: Path) -> None:
    """With ~/.postgresql/root.crt present, sslmode=verify-full needs no sslrootcert."""
    (tmp_path / ".postgresql").mkdir()
    (tmp_path / ".postgresql" / "root.crt").write_text("")

    assert None is check_dsn("postgresql://u@h/db?sslmode=verify-full", env={"HOME": str(tmp_path)})


def test_the_service_file_is_read_as_asyncpg_reads_it(tmp_path: Path) -> None:
    """A named service's values are checked; a missing service or a broken file is refused."""
    good = tmp_path / "good.conf"
    good.write_text("[main]\nhost=h\nport=5432\nsslmode=require\n[bad]\nsslmode=bogus\n")
    broken = tmp_path / "broken.conf"
    broken.write_text("host=h\n")
    env = {"HOME": str(tmp_path), "PGSERVICEFILE": str(good)}

    passed = check_dsn("postgresql:///db?service=main", env=env)
    refusals = {}
    for service, file in (("bad", good), ("other", good), ("main", broken)):
        with pytest.raises(DsnError) as caught:
            check_dsn(f"postgresql:///db?service={service}", env=env | {"PGSERVICEFILE": str(file)})
        refusals[service] = str(caught.value)

    assert None is passed
    assert {
        "bad": f"the service file's sslmode must be one of {SSL_MODES}",
        "other": "the DSN's service is not in the service file (PGSERVICEFILE)",
        "main": "the service file (PGSERVICEFILE) is not valid: line 1",
    } == refusals


def test_a_dsn_mistake_is_a_startup_error() -> None:
    """Embedders catching StartupError still catch a DSN mistake."""
    assert issubclass(DsnError, StartupError)


def test_every_password_form_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DSN's password (raw and percent-decoded), a query password and PGPASSWORD go."""
    monkeypatch.setenv("PGPASSWORD", "from-env")
    dsn = "postgresql://u:p%40ss@h/db?password=in-query"
    text = f"p%40ss p@ss in-query from-env {dsn}"

    assert "*** *** *** *** postgresql://u:***@h/db?password=***" == redact(text, secrets_of(dsn))


def _release(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    assert match is not None, version
    return int(match[1]), int(match[2])


def test_the_installed_asyncpg_is_one_the_dsn_check_was_written_for() -> None:
    """check_dsn mirrors asyncpg 0.31 and 0.32: any other release fails here, not in production."""
    low, high = WRITTEN_FOR

    assert low <= _release(metadata.version("asyncpg")) < high


def test_pyproject_pins_asyncpg_to_the_releases_the_check_was_written_for() -> None:
    """The dependency allows exactly the releases WRITTEN_FOR names: pip installs no other."""
    (low_major, low_minor), (high_major, high_minor) = WRITTEN_FOR
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [d for d in project["dependencies"] if d.startswith("asyncpg")]

    assert [f"asyncpg>={low_major}.{low_minor},<{high_major}.{high_minor}"] == pins


@pytest.mark.parametrize("value", ["1", "30", "2147483647"])
def test_a_dsn_connect_timeout_in_whole_seconds_passes(home: dict[str, str], value: str) -> None:
    """libpq's connect_timeout, which stall_nudge.connect honours, passes from 1 second."""
    assert None is check_dsn(f"postgresql://u@h/db?connect_timeout={value}", env=home)


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "abc", "\u0661", "2147483648"])
def test_a_dsn_connect_timeout_that_is_not_whole_seconds_is_refused(
    home: dict[str, str], value: str
) -> None:
    """Zero (libpq's "wait forever"), fractions and junk are refused, naming the parameter."""
    with pytest.raises(DsnError) as caught:
        check_dsn(f"postgresql://u@h/db?connect_timeout={value}", env=home)

    assert "the DSN's connect_timeout must be a whole number of seconds from 1" == str(caught.value)


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
#: The ones issue 27 names: refused, because asyncpg ignores them and they change where
#: or how securely we connect.
MUST_REFUSE = {
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGHOSTADDR",
    "PGOPTIONS",
    "PGREQUIREAUTH",
    "PGCHANNELBINDING",
    "PGSSLCOMPRESSION",
    "PGSSLCERTMODE",
    "PGSSLCRLDIR",
    "PGSSLSNI",
}
#: The ones asyncpg 0.31 and 0.32 read from the environment (connect_utils.py).
ASYNCPG_READS = {
    *("PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE", "PGPASSFILE", "PGSSLMODE"),
    *("PGSSLNEGOTIATION", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLKEY", "PGSSLCERT"),
    *("PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGTARGETSESSIONATTRS"),
    *("PGKRBSRVNAME", "PGGSSLIB"),
}
DSN = "postgresql://u@h/db"


def _handled(handling: Handling) -> set[str]:
    return {name for name, row in LIBPQ_VARIABLES.items() if row.handling is handling}


def test_every_variable_libpq_reads_is_classified() -> None:
    """The table holds each libpq variable once, and nothing else: none is left unhandled."""
    assert sorted(LIBPQ_READS) == sorted(LIBPQ_VARIABLES)


def test_asyncpgs_own_variables_are_left_to_it_and_the_issues_list_is_refused() -> None:
    """What asyncpg reads is its own; PGSERVICE, PGHOSTADDR, PGOPTIONS and the rest are refused."""
    assert (ASYNCPG_READS, set()) == (
        _handled(Handling.ASYNCPG),
        MUST_REFUSE - _handled(Handling.REFUSED),
    )


def test_every_refused_variable_says_why() -> None:
    """A refused row carries its reason; an honoured one names the parameter it stands for."""
    assert ([], []) == (
        [n for n in _handled(Handling.REFUSED) if not LIBPQ_VARIABLES[n].reason],
        [n for n, row in LIBPQ_VARIABLES.items() if not row.reason and not row.parameter],
    )


MARKER = "s3cret-MARKER-42"


@pytest.mark.parametrize("name", sorted(_handled(Handling.REFUSED)))
def test_a_refused_variable_is_one_usage_line_naming_it_and_not_its_value(name: str) -> None:
    """Each refused variable, set, is a usage error naming it; its value appears nowhere."""
    with pytest.raises(CliError) as caught:
        with_libpq_environment(DSN, {name: MARKER})

    message = str(caught.value)
    assert (2, True, False, 1) == (
        caught.value.status,
        message.startswith(f"{name} is set, but "),
        MARKER in message,
        len(message.splitlines()),
    )


def test_refusals_read_as_sentences() -> None:
    """Two refusals as printed: the reason, then what to do instead."""
    messages = []
    for name in ("PGSERVICE", "PGCHANNELBINDING"):
        with pytest.raises(CliError) as caught:
            with_libpq_environment(DSN, {name: "x"})
        messages.append(str(caught.value))

    assert [
        "PGSERVICE is set, but asyncpg ignores it; unset it and name the server in --dsn"
        " or STALL_DSN",
        "PGCHANNELBINDING is set, but asyncpg does no SCRAM channel binding; unset it",
    ] == messages


def test_an_empty_variable_counts_as_unset() -> None:
    """PGSERVICE= (as env files blank a variable) is neither refused nor handed on."""
    env = dict.fromkeys(LIBPQ_VARIABLES, "")

    assert DSN == with_libpq_environment(DSN, env)


def test_honoured_variables_become_dsn_parameters() -> None:
    """PGAPPNAME, PGTZ, PGDATESTYLE, PGGEQO and PGCONNECT_TIMEOUT are handed on, percent-encoded."""
    env = {
        "PGAPPNAME": "billing sidecar&1",
        "PGTZ": "Asia/Tokyo",
        "PGDATESTYLE": "ISO, DMY",
        "PGGEQO": "off",
        "PGCONNECT_TIMEOUT": "7",
        "PGCLIENTENCODING": "utf-8",
        "PGHOST": "elsewhere",  # asyncpg's own: left to it
    }

    assert (
        "postgresql://u@h/db?sslmode=disable&application_name=billing%20sidecar%261"
        "&connect_timeout=7&DateStyle=ISO%2C%20DMY&TimeZone=Asia%2FTokyo&geqo=off"
    ) == with_libpq_environment(f"{DSN}?sslmode=disable", env)


def test_a_parameter_the_dsn_names_wins_over_its_variable() -> None:
    """As in libpq, the DSN's application_name and timezone (any case) beat PGAPPNAME and PGTZ."""
    dsn = f"{DSN}?application_name=mine&timezone=UTC"

    assert dsn == with_libpq_environment(dsn, {"PGAPPNAME": "theirs", "PGTZ": "Asia/Tokyo"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PGCONNECT_TIMEOUT": "0"}, "PGCONNECT_TIMEOUT must be a whole number of seconds from 1"),
        (
            {"PGCONNECT_TIMEOUT": "2.5"},
            "PGCONNECT_TIMEOUT must be a whole number of seconds from 1",
        ),
        (
            {"PGCLIENTENCODING": "LATIN1"},
            "PGCLIENTENCODING must name UTF8: asyncpg speaks UTF-8 only",
        ),
    ],
)
def test_an_honoured_variable_with_a_value_it_cannot_have_is_refused(
    env: dict[str, str], message: str
) -> None:
    """PGCONNECT_TIMEOUT in whole seconds from 1, PGCLIENTENCODING UTF8 only: else one line."""
    with pytest.raises((CliError, DsnError)) as caught:
        with_libpq_environment(DSN, env)

    assert message == str(caught.value)


@pytest.mark.parametrize("encoding", ["UTF8", "utf-8", "Unicode", "UTF_8"])
def test_every_spelling_of_utf8_is_honoured_as_it_is(encoding: str) -> None:
    """PostgreSQL's spellings of UTF8 pass and add nothing: asyncpg asks for UTF-8 itself."""
    assert DSN == with_libpq_environment(DSN, {"PGCLIENTENCODING": encoding})
