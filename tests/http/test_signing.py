"""Standard Webhooks v1 signing, checked by the standardwebhooks package, and per-hook refusals."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from adapters.http import MalformedSecret, UnsupportedUrl, parse_secret, safe_url, signed_headers

from .conftest import OTHER_SECRET, SECRET

BODY = b'{"type":"todo.ready"}'


def _now() -> int:
    return int(datetime.now(UTC).timestamp())


def test_signature_verifies_with_standardwebhooks() -> None:
    """A body signed with the hook's key verifies with a library we did not write."""
    headers = signed_headers(parse_secret(SECRET), "msg_1", _now(), BODY)

    assert {"type": "todo.ready"} == Webhook(SECRET).verify(BODY, headers)


def test_tampered_body_fails_verification() -> None:
    """A body changed after signing is rejected by the consumer."""
    headers = signed_headers(parse_secret(SECRET), "msg_1", _now(), BODY)

    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(b'{"type":"todo.gone"}', headers)


def test_wrong_secret_fails_verification() -> None:
    """A consumer holding another hook's secret rejects the signature."""
    headers = signed_headers(parse_secret(SECRET), "msg_1", _now(), BODY)

    with pytest.raises(WebhookVerificationError):
        Webhook(OTHER_SECRET).verify(BODY, headers)


def test_headers_carry_id_timestamp_and_v1_signature() -> None:
    """The three Standard Webhooks headers are present and the signature is versioned v1."""
    headers = signed_headers(parse_secret(SECRET), "msg_1", 1_700_000_000, BODY)

    assert ("msg_1", "1700000000", "v1,") == (
        headers["webhook-id"],
        headers["webhook-timestamp"],
        headers["webhook-signature"][:3],
    )
    assert "application/json" == headers["content-type"]


@pytest.mark.parametrize("size", [24, 32, 64])
def test_secret_key_sizes_accepted(size: int) -> None:
    """Keys of 24 to 64 bytes are accepted, padded or not."""
    key = bytes(range(size))
    encoded = base64.b64encode(key).decode()

    assert (key, key) == (
        parse_secret("whsec_" + encoded),
        parse_secret("whsec_" + encoded.rstrip("=")),
    )


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0", "does not start with 'whsec_'"),
        ("whsec_not*base64!!-hunter2", "not valid base64"),
        ("whsec_" + base64.b64encode(bytes(23)).decode(), "23 bytes"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), "65 bytes"),
        ("whsec_", "0 bytes"),
    ],
)
def test_malformed_secret_is_a_clear_error(secret: str, problem: str) -> None:
    """A malformed secret names its problem and never quotes the secret."""
    with pytest.raises(MalformedSecret) as caught:
        parse_secret(secret)

    assert problem in str(caught.value)
    assert secret.removeprefix("whsec_") not in str(caught.value) or secret == "whsec_"


def test_safe_url_drops_credentials_and_query() -> None:
    """Logs see scheme, host, port and path only."""
    shown = safe_url("https://alice:hunter2@Hooks.Example:8443/wake/me?token=s3cret#frag")

    assert "https://hooks.example:8443/wake/me" == shown


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://hooks.example/wake", "'ftp' is not http or https"),
        ("file:///etc/passwd", "'file' is not http or https"),
        ("hooks.example/wake", "'(none)' is not http or https"),
        ("https:///wake", "no host"),
        ("http://hooks.example:99999/wake", "cannot be parsed"),
    ],
)
def test_unsupported_url_is_refused(url: str, problem: str) -> None:
    """Only http(s) URLs with a host are delivered to."""
    with pytest.raises(UnsupportedUrl) as caught:
        safe_url(url)

    assert problem in str(caught.value)
