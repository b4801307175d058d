"""Keeping passwords out of messages: the secrets a DSN carries, and text with them masked."""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote

__all__ = ["redact", "secrets_of"]


def secrets_of(dsn: str) -> list[str]:
    """The passwords a DSN (and the environment) carry, raw and percent-encoded, longest first."""
    found: set[str] = set()
    _, _, rest = dsn.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    creds, at, _ = netloc.rpartition("@")
    if at and ":" in creds:
        found.add(creds.split(":", 1)[1])
    query = rest.partition("?")[2]
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in {"password", "passfile", "sslpassword"}:
            found.add(value)
    env = os.environ.get("PGPASSWORD")
    if env:
        found.add(env)
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
