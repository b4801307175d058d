"""Standard Webhooks v1 signing, and the per-hook checks that run before any request.

A hook whose secret or URL is unusable is refused on its own: the error
names the hook's problem but never the secret, and a URL is only ever shown
without its credentials and query (``safe_url``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
from urllib.parse import urlsplit

__all__ = [
    "HookRefused",
    "MalformedSecret",
    "UnsupportedUrl",
    "check_text",
    "parse_secret",
    "safe_url",
    "sign",
    "signed_headers",
]

_PREFIX = "whsec_"
_MIN_KEY, _MAX_KEY = 24, 64
_SCHEMES = frozenset({"http", "https"})
#: Characters no host name can hold (besides whitespace and controls).
_NOT_IN_HOSTS = frozenset('<>"{}|\\^`%')


class HookRefused(ValueError):
    """One hook cannot be delivered to as configured; the others still are."""


class MalformedSecret(HookRefused):
    """The hook secret is not ``whsec_`` + base64 of a 24..64 byte key."""


class UnsupportedUrl(HookRefused):
    """The hook URL is not an http(s) URL with a host."""


def check_text(field: str, value: str | None) -> None:
    """Refuse text that cannot be sent or stored (NUL, a lone surrogate), naming only the field."""
    if value is None:
        return
    if "\x00" in value:
        raise HookRefused(f"{field} holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise HookRefused(f"{field} holds text that cannot be encoded (a lone surrogate)") from None


def parse_secret(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret; the message never quotes the secret."""
    if not isinstance(secret, str) or not secret.startswith(_PREFIX):
        raise MalformedSecret("secret does not start with 'whsec_'")
    encoded = secret[len(_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise MalformedSecret("secret after 'whsec_' is not valid base64") from None
    if not _MIN_KEY <= len(key) <= _MAX_KEY:
        raise MalformedSecret(
            f"secret key is {len(key)} bytes; Standard Webhooks keys are {_MIN_KEY}..{_MAX_KEY}"
        )
    return key


def safe_url(url: str) -> str:
    """The URL as logs may show it: scheme, host, port and path, nothing secret."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UnsupportedUrl("URL cannot be parsed") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise UnsupportedUrl(f"URL scheme {scheme or '(none)'!r} is not http or https")
    if not parts.hostname:
        raise UnsupportedUrl("URL has no host")
    _check_host(parts.hostname)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path}"


def _check_host(host: str) -> None:
    """Refuse a host no resolver can look up, so it is never handed to the network stack."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return
    if any(c.isspace() or not c.isprintable() or c in _NOT_IN_HOSTS for c in host):
        raise UnsupportedUrl("URL host contains characters no host name can hold")
    try:
        host.encode("idna")
    except UnicodeError:
        raise UnsupportedUrl("URL host is not a valid host name") from None


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` + base64 HMAC-SHA256 of id.timestamp.body."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The request headers of one attempt; the id is the message's, the timestamp the attempt's."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, msg_id, timestamp, body),
    }
