"""Where hooks may point: every address a delivery connects to is checked, after DNS.

Theory of operation
-------------------
A hook's URL is a tenant's text, so what is checked is the address the
socket is about to connect to, not the spelling of the URL. ``RANGES``
(one row per network) and ``METADATA_HOSTS`` are the whole rule:
link-local and metadata addresses and names are always refused; with
``refuse_private`` (multi-tenant deployments) loopback, private, shared
(CGNAT), unique-local, unspecified, multicast and reserved ranges are
refused too. An IPv6 address that carries an IPv4 one
(IPv4-mapped, IPv4-compatible, 6to4, NAT64, Teredo) is judged by both.

The rule runs in three places:

* before any request (``check_host``): metadata host names, and hosts that
  are addresses in any spelling the C resolver accepts (decimal, hex,
  octal, short forms, IPv6 literals), so the refusal names the address
  meant, not the spelling;
* in aiohttp's resolver (``GuardedResolver``): a name is refused when any
  address it resolves to is, so a rebinding or mixed answer cannot pass by
  its good half;
* in aiohttp's socket factory (``guarded_socket``): the last step before
  ``connect()``, for every address, whichever path produced it.

The last two raise ``AddressRefusedError``, an ``OSError`` that aiohttp
wraps in a ``ClientConnectorError``; the dispatcher books it as a final
failure, never retried.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import attrs
from aiohttp.abc import AbstractResolver, ResolveResult

from ._signing import HookRefused

__all__ = [
    "METADATA_HOSTS",
    "RANGES",
    "AddressRefused",
    "AddressRefusedError",
    "GuardedResolver",
    "address_refusal",
    "check_host",
    "guarded_socket",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@attrs.frozen
class Range:
    """One network a hook may not point into, what it is, and whether it is always refused."""

    network: IPNetwork = attrs.field(converter=ipaddress.ip_network)
    kind: str
    always: bool = False


#: Checked in order, first match wins: the always-refused rows come first,
#: because two of them (fd00:ec2::254, 100.100.100.200) lie inside opt-in ranges.
RANGES: tuple[Range, ...] = (
    Range("169.254.0.0/16", "link-local", always=True),  # holds 169.254.169.254 (AWS, GCP, Azure)
    Range("fe80::/10", "link-local", always=True),
    Range("fd00:ec2::254/128", "a metadata service", always=True),  # AWS over IPv6
    Range("100.100.100.200/32", "a metadata service", always=True),  # Alibaba Cloud
    Range("127.0.0.0/8", "loopback"),
    Range("::1/128", "loopback"),
    Range("0.0.0.0/8", "unspecified"),
    Range("::/128", "unspecified"),
    Range("10.0.0.0/8", "private"),
    Range("172.16.0.0/12", "private"),
    Range("192.168.0.0/16", "private"),
    Range("100.64.0.0/10", "shared (CGNAT)"),
    Range("fc00::/7", "unique-local"),
    Range("224.0.0.0/4", "multicast"),
    Range("ff00::/8", "multicast"),
    Range("240.0.0.0/4", "reserved"),  # holds the broadcast address
)

#: Names of cloud metadata services, refused whatever they resolve to.
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


class AddressRefused(HookRefused):
    """The hook's host is an address (or a metadata name) a hook may not point to."""


class AddressRefusedError(OSError):
    """Raised inside aiohttp's connection path for a refused address; never retried."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, if any: where a packet to it would really go."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in net for net in _NAT64) or (
        int(address) >> 32 == 0 and int(address) > 1  # IPv4-compatible ::a.b.c.d
    ):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: str | IPAddress, *, refuse_private: bool) -> str | None:
    """Why a hook may not connect to ``address``, or None when it may."""
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address)
        except ValueError:
            return f"address {address!r} is not an IP address"
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
            candidates = [address]
        inner = _embedded_ipv4(address)
        if inner is not None:
            candidates.append(inner)
    for candidate in candidates:
        for row in RANGES:
            if (row.always or refuse_private) and candidate in row.network:
                shown = str(address) if candidate == address else f"{address} ({candidate})"
                return f"address {shown} is {row.kind}"
    return None


def _literal(host: str) -> IPAddress | None:
    """The address a host names when it is one, in any spelling the C resolver accepts."""
    try:
        return ipaddress.ip_address(host.removesuffix("."))
    except ValueError:
        pass
    if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host):
        return None
    try:
        # inet_aton takes what getaddrinfo takes for IPv4: 2852039166, 0xa9fea9fe,
        # 0251.0376.0251.0376, 169.254.43518, so none of them dodges the table.
        return ipaddress.IPv4Address(socket.inet_aton(host.removesuffix(".")))
    except OSError:
        return None


def check_host(host: str, *, refuse_private: bool) -> None:
    """Refuse a metadata name or an address-spelled host before any request is made."""
    name = host.lower().rstrip(".")
    if name in METADATA_HOSTS:
        raise AddressRefused(f"host {name} is a metadata service")
    address = _literal(host)
    if address is not None:
        reason = address_refusal(address, refuse_private=refuse_private)
        if reason is not None:
            raise AddressRefused(reason)


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that refuses a name if any address it resolves to is refused."""

    def __init__(self, inner: AbstractResolver, *, refuse_private: bool) -> None:
        self._inner = inner
        self._refuse_private = refuse_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.lower().rstrip(".") in METADATA_HOSTS:
            raise AddressRefusedError(f"host {host.lower().rstrip('.')} is a metadata service")
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = address_refusal(result["host"], refuse_private=self._refuse_private)
            if reason is not None:
                raise AddressRefusedError(reason)
        return results

    async def close(self) -> None:
        """Nothing to release: the inner resolver belongs to whoever made it."""


def guarded_socket(*, refuse_private: bool) -> Callable[[Any], socket.socket]:
    """An aiohttp socket factory that refuses to create the socket for a refused address."""

    def factory(addr_info: Any) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        reason = address_refusal(sockaddr[0], refuse_private=refuse_private)
        if reason is not None:
            raise AddressRefusedError(reason)
        return socket.socket(family, type_, proto)

    return factory
