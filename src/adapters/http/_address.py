"""Where hooks may point: every address a delivery connects to is checked, after DNS.

Theory of operation
-------------------
A hook's URL is a tenant's text, so what is checked is the address the
socket is about to connect to, not the spelling of the URL. ``RANGES``
(one row per network) and ``METADATA_HOSTS`` are the whole rule:
link-local and metadata addresses and names are always refused; with
``refuse_private`` (multi-tenant deployments) every range of IANA's IPv4
and IPv6 Special-Purpose Address Registries is refused too (loopback,
private, shared, unique-local, documentation, benchmarking, ...), and
multicast and the IPv6 space IANA keeps reserved. An IPv6 address that
carries an IPv4 one is judged by every IPv4 address it may carry: a
gateway would deliver the packet there. A translation form (IPv4-mapped
``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``, NAT64
``64:ff9b::/96`` and ``64:ff9b:1::/48``) is judged by that alone; a tunnel
(6to4, Teredo, IPv4-compatible ``::a.b.c.d``) by the address itself too.
A local-use NAT64 address carries one at each RFC 6052 prefix length an
operator may carve from the /48 (48, 56, 64, 96), and a translator set up
for one length reads the bits the others call the "u" octet and the
suffix as address or ignores them, so every one of those readings is
judged, whatever those bits hold.

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
#: Each comment names the row's entry in the IANA IPv4 or IPv6 Special-Purpose
#: Address Registry ("SP4", "SP6"), or the registry it comes from otherwise.
#:
#: The opt-in rows are the whole of both Special-Purpose registries, plus
#: multicast and what IANA's IPv6 Address Space registry keeps "Reserved by
#: IETF", with these readings:
#:
#: * Translation prefixes have no row: SP6's "IPv4-mapped Address"
#:   ``::ffff:0:0/96``, "IPv4-IPv6 Translat." ``64:ff9b::/96`` and "Local-use
#:   IPv4/IPv6 Translation" ``64:ff9b:1::/48``, and the SIIT form
#:   ``::ffff:0:0:0/96``. A translator delivers to the IPv4 address the
#:   address carries, so that address alone is judged (``_carried``).
#: * Tunnels are rows (6to4 ``2002::/16``, Teredo ``2001::/32``, and the
#:   deprecated IPv4-compatible ``::/96`` inside ``::/8``): the packet goes
#:   through a relay to whatever sits behind the carried router, so the
#:   address is refused with ``refuse_private`` and its IPv4 address is judged
#:   too, so link-local inside one is refused always.
#: * Entries the registries call globally reachable (the AS112 and AMT blocks,
#:   the PCP, TURN and DNS-SD anycast addresses, ORCHIDv2, Drone Remote ID)
#:   are refused all the same: no hook lives at a DNS sink, a multicast relay
#:   or a protocol's anycast address, and a rule with exceptions is one more
#:   thing to get wrong. So ``2001::/23`` is one row, whole.
#:
#: ``ipaddress``'s ``is_private``/``is_global`` are not used: they change
#: between the Python releases we support (3.11 leaves out, among others,
#: 192.0.0.0/24 beyond /29, 2002::/16, 3fff::/20, 5f00::/16, AS112 and AMT;
#: later releases add some), and this table must read the same on each.
RANGES: tuple[Range, ...] = (
    # -- always refused --
    Range("169.254.0.0/16", "link-local", always=True),  # SP4 Link Local; holds 169.254.169.254
    Range("fe80::/10", "link-local", always=True),  # SP6 Link-Local Unicast
    Range("fd00:ec2::254/128", "a metadata service", always=True),  # AWS over IPv6
    Range("100.100.100.200/32", "a metadata service", always=True),  # Alibaba Cloud
    # -- IPv4, refused with refuse_private --
    Range("127.0.0.0/8", "loopback"),  # SP4 Loopback
    Range("0.0.0.0/8", "unspecified"),  # SP4 "This network" and "This host on this network"
    Range("10.0.0.0/8", "private"),  # SP4 Private-Use
    Range("172.16.0.0/12", "private"),  # SP4 Private-Use
    Range("192.168.0.0/16", "private"),  # SP4 Private-Use
    Range("100.64.0.0/10", "shared (CGNAT)"),  # SP4 Shared Address Space
    # SP4 IETF Protocol Assignments: holds IPv4 Service Continuity Prefix /29, IPv4 dummy
    # address, PCP and TURN Anycast, NAT64/DNS64 Discovery (192.0.0.170, .171).
    Range("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    Range("192.0.2.0/24", "reserved (documentation)"),  # SP4 Documentation (TEST-NET-1)
    Range("198.51.100.0/24", "reserved (documentation)"),  # SP4 Documentation (TEST-NET-2)
    Range("203.0.113.0/24", "reserved (documentation)"),  # SP4 Documentation (TEST-NET-3)
    Range("198.18.0.0/15", "reserved (benchmarking)"),  # SP4 Benchmarking
    Range("192.31.196.0/24", "reserved (AS112)"),  # SP4 AS112-v4
    Range("192.175.48.0/24", "reserved (AS112)"),  # SP4 Direct Delegation AS112 Service
    Range("192.52.193.0/24", "reserved (AMT)"),  # SP4 AMT
    Range("192.88.99.0/24", "reserved (6to4 relay anycast)"),  # SP4 Deprecated (6to4 Relay Anycast)
    Range("224.0.0.0/4", "multicast"),  # IPv4 Multicast Address Space registry
    # SP4 Reserved; holds SP4 Limited Broadcast 255.255.255.255/32.
    Range("240.0.0.0/4", "reserved"),
    # -- IPv6, refused with refuse_private --
    Range("::1/128", "loopback"),  # SP6 Loopback Address
    Range("::/128", "unspecified"),  # SP6 Unspecified Address
    Range("fc00::/7", "unique-local"),  # SP6 Unique-Local
    Range("fec0::/10", "site-local (deprecated)"),  # IPv6 Address Space: site-local, RFC 3879
    Range("ff00::/8", "multicast"),  # IPv6 Address Space: Multicast
    Range("100::/64", "reserved (discard-only)"),  # SP6 Discard-Only Address Block
    Range("2001::/32", "reserved (Teredo)"),  # SP6 TEREDO (a tunnel: see above)
    # SP6 IETF Protocol Assignments: holds TEREDO (above), PCP, TURN and DNS-SD SRP Anycast,
    # Benchmarking 2001:2::/48, AMT 2001:3::/32, AS112-v6 2001:4:112::/48, ORCHID
    # 2001:10::/28 (deprecated), ORCHIDv2 2001:20::/28, Drone Remote ID 2001:30::/28.
    Range("2001::/23", "reserved (IETF protocol assignments)"),
    Range("2001:db8::/32", "reserved (documentation)"),  # SP6 Documentation
    Range("3fff::/20", "reserved (documentation)"),  # SP6 Documentation (RFC 9637)
    Range("2002::/16", "reserved (6to4)"),  # SP6 6to4 (a tunnel: see above)
    Range("2620:4f:8000::/48", "reserved (AS112)"),  # SP6 Direct Delegation AS112 Service
    Range("5f00::/16", "reserved (SRv6 SIDs)"),  # SP6 Segment Routing (SRv6) SIDs
    # IPv6 Address Space "Reserved by IETF": all of it outside 2000::/3 that no row above
    # names. ::/8 holds the IPv4-compatible and translation forms (judged as said above);
    # 100::/8 also SP6 Dummy IPv6 Prefix 100:0:0:1::/64; 4000::/3 also SRv6 (above).
    *(
        Range(network, "reserved (unallocated)")
        for network in (
            "::/8",
            "100::/8",
            "200::/7",
            "400::/6",
            "800::/5",
            "1000::/4",
            "4000::/3",
            "6000::/3",
            "8000::/3",
            "a000::/3",
            "c000::/3",
            "e000::/4",
            "f000::/5",
            "f800::/6",
            "fe00::/9",
        )
    ),
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

#: The well-known NAT64 prefix (RFC 6052): the IPv4 address is the last 32 bits.
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
#: The local-use NAT64 prefix (RFC 8215): an operator may carve any RFC 6052 prefix
#: length from /48 up out of it, so the reading at each of those lengths is judged.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
#: "This network" (RFC 1122 3.2.1.3, RFC 6890): never a destination a translator
#: forwards to. Only the zero bits of one RFC 6052 layout read through another
#: land here, as in the /64 reading 0.0.0.a of 64:ff9b:1::a.b.c.d, so such a
#: reading is left out when another one lies outside it.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
#: IPv4-translated addresses (RFC 2765, SIIT): ::ffff:0:a.b.c.d.
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
#: Where RFC 6052 puts the 32 IPv4 bits for a prefix length, as (first bit, bit count)
#: runs counted from the address's top bit; bits 64..71 (the "u" octet) are skipped.
#: The /96 layout comes first: it is the usual one, and a refusal names the first reading refused.
_RFC6052_BITS: dict[int, tuple[tuple[int, int], ...]] = {
    96: ((96, 32),),
    48: ((48, 16), (72, 16)),
    56: ((56, 8), (72, 24)),
    64: ((72, 32),),
}


class AddressRefused(HookRefused):
    """The hook's host is an address (or a metadata name) a hook may not point to."""


class AddressRefusedError(OSError):
    """Raised inside aiohttp's connection path for a refused address; never retried."""


def _rfc6052(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address RFC 6052 embeds after a prefix of ``prefix_length`` bits."""
    inner = 0
    for first, count in _RFC6052_BITS[prefix_length]:
        inner = (inner << count) | ((value >> (128 - first - count)) & ((1 << count) - 1))
    return ipaddress.IPv4Address(inner)


def _local_nat64(value: int) -> list[ipaddress.IPv4Address]:
    """The IPv4 address a local-use NAT64 address carries at /96, /48, /56 and /64.

    Every length is read whatever the "u" octet (bits 64..71) and the suffix
    (the bits after the IPv4 address) hold: RFC 6052 wants them zero, but a
    translator need not check, and one set up for another length reads them
    as part of the address. Readings in 0.0.0.0/8 are left out when another
    lies outside it (``_THIS_NETWORK``); when none does, the /96 one stays,
    so the address is still judged, and fails closed.
    """
    readings = list(dict.fromkeys(_rfc6052(value, length) for length in _RFC6052_BITS))
    outside = [reading for reading in readings if reading not in _THIS_NETWORK]
    return outside or readings[:1]


def _carried(address: ipaddress.IPv6Address) -> tuple[list[ipaddress.IPv4Address], bool]:
    """The IPv4 addresses an IPv6 one may carry, and whether the IPv6 address is judged too.

    A translation form is judged by what it carries alone: the translator
    delivers there. A tunnel (6to4, Teredo, IPv4-compatible) is judged both
    ways: its IPv4 address first, so a refusal names it, then the address
    itself, which the table refuses with ``refuse_private``.
    """
    value = int(address)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped], False
    if address in _TRANSLATED or address in _NAT64_WELL_KNOWN:
        return [_rfc6052(value, 96)], False
    if address in _NAT64_LOCAL:
        return _local_nat64(value), False
    if address.sixtofour is not None:
        return [address.sixtofour], True
    if address.teredo is not None:
        server, client = address.teredo
        return [client, server], True
    if value >> 32 == 0 and value > 1:  # IPv4-compatible ::a.b.c.d
        return [_rfc6052(value, 96)], True
    return [], True


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
        carried, itself = _carried(address)
        candidates = [*carried, address] if itself else [*carried]
    # The always-refused rows first, over every candidate: a tunnel to a link-local
    # address is named link-local, not a tunnel, with refuse_private too.
    for always in (True, False) if refuse_private else (True,):
        for candidate in candidates:
            for row in RANGES:
                if row.always is always and candidate in row.network:
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
