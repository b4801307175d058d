"""Where hooks may point: refused URL forms, and the check on the address connected to after DNS."""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence

import attrs
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from adapters.http import (
    CREATED,
    RANGES,
    AddressRefused,
    AddressRefusedError,
    GuardedResolver,
    HookDispatcher,
    address_refusal,
    check_host,
    guarded_socket,
)
from adapters.memory import MemoryBoard, MemoryHooks
from stall_core import TodoRef
from stall_testing import Receiver
from tests.support import T0

from .conftest import FAST, SECRET

TODO = TodoRef(id="t1", created_at=T0, title="Deploy lane-l")
#: One failure disables the hook, so its disabled_reason shows what was booked.
ONCE = attrs.evolve(FAST, disable_after=1)
LINK_LOCAL = "refused: address 169.254.169.254 is link-local"


#: Addresses passed to socket.connect, one list per test (see the autouse fixture).
_DIALLED: list[list[str]] = []


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:  # a name: never dialled by these tests
        return False


def _audit(event: str, args: tuple[object, ...]) -> None:
    """Record each dial of this module's tests, and stop any but loopback before it leaves.

    Raising here aborts the connect() itself: a guard that let an address
    through fails its test without a packet sent to that address.
    """
    if event == "socket.connect" and _DIALLED and isinstance(args[1], tuple):
        host = str(args[1][0])
        _DIALLED[-1].append(host)
        if not _loopback(host):
            raise PermissionError(f"a test of the address guard dialled {host}")


sys.addaudithook(_audit)


@pytest.fixture(name="dialled", autouse=True)
def _dialled() -> Iterator[list[str]]:
    """Every address this module's tests connect to; each test ends checking all are loopback."""
    dialled: list[str] = []
    _DIALLED.append(dialled)
    try:
        yield dialled
    finally:
        _DIALLED.remove(dialled)
    assert [] == [a for a in dialled if not _loopback(a)]


class MappedResolver(AbstractResolver):
    """A resolver answering from a fixed table, as a rebinding or hostile DNS server would."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        """Nothing to release."""


async def _refusal(url: str, **options: object) -> tuple[str | None, int]:
    """Send one message to a hook at ``url``; return its disabled_reason and the refused count.

    A refusal is made before any connection: nothing is dialled, not even loopback.
    """
    dialled = _DIALLED[-1]
    before = len(dialled)
    board = MemoryBoard(clock=lambda: T0)
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)
    async with HookDispatcher(hooks=MemoryHooks(board), policy=ONCE, **options) as dispatcher:  # type: ignore[arg-type]
        await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.settle()
    assert [] == dialled[before:]
    return board.hooks["h1"].disabled_reason, dispatcher.stats.refused


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", LINK_LOCAL),
        ("http://169.254.169.254./", LINK_LOCAL),
        ("http://2852039166/", LINK_LOCAL),
        ("http://0xa9fea9fe/", LINK_LOCAL),
        ("http://0xA9.0xFE.0xA9.0xFE/", LINK_LOCAL),
        ("http://0251.0376.0251.0376/", LINK_LOCAL),
        ("http://169.254.43518/", LINK_LOCAL),
        ("https://169.254.169.254:8443/", LINK_LOCAL),
        (
            "http://[::ffff:169.254.169.254]/",
            "refused: address ::ffff:a9fe:a9fe (169.254.169.254) is link-local",
        ),
        (
            "http://[64:ff9b::a9fe:a9fe]/",
            "refused: address 64:ff9b::a9fe:a9fe (169.254.169.254) is link-local",
        ),
        (
            "http://[2002:a9fe:a9fe::]/",
            "refused: address 2002:a9fe:a9fe:: (169.254.169.254) is link-local",
        ),
        (
            "http://[::ffff:0:169.254.169.254]/",
            "refused: address ::ffff:0:a9fe:a9fe (169.254.169.254) is link-local",
        ),
        (
            "http://[::169.254.169.254]/",
            "refused: address ::a9fe:a9fe (169.254.169.254) is link-local",
        ),
        (
            "http://[64:ff9b:1::a9fe:a9fe]/",
            "refused: address 64:ff9b:1::a9fe:a9fe (169.254.169.254) is link-local",
        ),
        (
            "http://[64:ff9b:1:a9fe:a9:fe00::]/",
            "refused: address 64:ff9b:1:a9fe:a9:fe00:: (169.254.169.254) is link-local",
        ),
        (
            "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",
            "refused: address 2001:0:4136:e378:8000:63bf:5601:5601 (169.254.169.254) is link-local",
        ),
        ("http://[fe80::1]/", "refused: address fe80::1 is link-local"),
        ("http://[fd00:ec2::254]/", "refused: address fd00:ec2::254 is a metadata service"),
        ("http://100.100.100.200/", "refused: address 100.100.100.200 is a metadata service"),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            "refused: host metadata.google.internal is a metadata service",
        ),
        (
            "http://METADATA.Google.Internal./",
            "refused: host metadata.google.internal is a metadata service",
        ),
        ("http://metadata/", "refused: host metadata is a metadata service"),
        ("http://instance-data:80/", "refused: host instance-data is a metadata service"),
    ],
)
async def test_link_local_and_metadata_urls_are_always_refused(url: str, reason: str) -> None:
    """Every spelling of a link-local or metadata destination is refused, even by default."""
    assert (reason, 1) == await _refusal(url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:9/", "refused: address 127.0.0.1 is loopback"),
        ("http://2130706433/", "refused: address 127.0.0.1 is loopback"),
        ("http://0x7f000001/", "refused: address 127.0.0.1 is loopback"),
        ("http://127.1/", "refused: address 127.0.0.1 is loopback"),
        ("http://[::1]:22/", "refused: address ::1 is loopback"),
        ("http://tenant.test@127.0.0.1/", "refused: address 127.0.0.1 is loopback"),
        # Circled digits: IDNA makes the host 127.0.0.1 inside aiohttp; the socket check sees it.
        ("http://\u2460\u2461\u2466.0.0.1/", "refused: address 127.0.0.1 is loopback"),
        ("http://[::ffff:127.0.0.1]/", "refused: address ::ffff:7f00:1 (127.0.0.1) is loopback"),
        ("http://10.0.0.1/", "refused: address 10.0.0.1 is private"),
        ("http://172.16.5.4/", "refused: address 172.16.5.4 is private"),
        ("http://192.168.1.1/", "refused: address 192.168.1.1 is private"),
        ("http://[::ffff:10.1.2.3]/", "refused: address ::ffff:a01:203 (10.1.2.3) is private"),
        (
            "http://[::ffff:0:127.0.0.1]/",
            "refused: address ::ffff:0:7f00:1 (127.0.0.1) is loopback",
        ),
        ("http://[::ffff:0:10.1.2.3]/", "refused: address ::ffff:0:a01:203 (10.1.2.3) is private"),
        ("http://[::127.0.0.1]/", "refused: address ::7f00:1 (127.0.0.1) is loopback"),
        ("http://[64:ff9b::7f00:1]/", "refused: address 64:ff9b::7f00:1 (127.0.0.1) is loopback"),
        (
            "http://[64:ff9b:1::a00:1]/",
            "refused: address 64:ff9b:1::a00:1 (10.0.0.1) is private",
        ),
        ("http://[2002:c0a8:101::]/", "refused: address 2002:c0a8:101:: (192.168.1.1) is private"),
        ("http://100.64.0.1/", "refused: address 100.64.0.1 is shared (CGNAT)"),
        ("http://[fc00::1]/", "refused: address fc00::1 is unique-local"),
        ("http://[fd12:3456::1]/", "refused: address fd12:3456::1 is unique-local"),
        ("http://0.0.0.0/", "refused: address 0.0.0.0 is unspecified"),
        ("http://[::]/", "refused: address :: is unspecified"),
        ("http://224.0.0.1/", "refused: address 224.0.0.1 is multicast"),
        ("http://[ff02::1]/", "refused: address ff02::1 is multicast"),
        ("http://255.255.255.255/", "refused: address 255.255.255.255 is reserved"),
    ],
)
async def test_private_urls_are_refused_with_refuse_private(url: str, reason: str) -> None:
    """With refuse_private, loopback, private, unique-local and other local ranges are refused."""
    assert (reason, 1) == await _refusal(url, refuse_private=True)


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "::1", "10.0.0.1", "192.168.1.1", "fc00::1", "100.64.0.1"]
)
def test_private_addresses_are_allowed_by_default(address: str) -> None:
    """Without refuse_private, loopback and private addresses are not refused (single tenant)."""
    assert None is address_refusal(address, refuse_private=False)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::a9fe:a9fe", "address ::a9fe:a9fe (169.254.169.254) is link-local"),
        (
            "2001:0:4136:e378:8000:63bf:5601:5601",
            "address 2001:0:4136:e378:8000:63bf:5601:5601 (169.254.169.254) is link-local",
        ),
        ("fe80::1%eth0", "address fe80::1 is link-local"),
        ("not-an-address", "address 'not-an-address' is not an IP address"),
    ],
)
def test_embedded_and_odd_addresses_are_judged(address: str, reason: str) -> None:
    """IPv4-compatible and Teredo forms are judged by the IPv4 they carry; junk fails closed."""
    assert reason == address_refusal(address, refuse_private=False)


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "2606:2800:220:1::1",
        "8.8.8.8",
        "::ffff:0:8.8.8.8",
        "64:ff9b::808:808",
        "64:ff9b:1::808:808",
        "64:ff9b:1:808:8:800::",
        "::ffff:8.8.8.8",
        "198.20.0.1",
        "203.0.114.1",
        "2001:200::1",
        "3fff:1000::1",
        "2a00:1450:4001:81a::200e",
    ],
)
def test_public_addresses_are_allowed_even_with_refuse_private(address: str) -> None:
    """A public address passes the check with or without refuse_private."""
    assert (None, None) == (
        address_refusal(address, refuse_private=False),
        address_refusal(address, refuse_private=True),
    )


#: One address in each row of RANGES, and the kind a refusal names (first match wins).
SPECIAL = [
    ("169.254.169.254", "link-local"),
    ("fe80::1", "link-local"),
    ("fd00:ec2::254", "a metadata service"),
    ("100.100.100.200", "a metadata service"),
    ("127.0.0.1", "loopback"),
    ("0.1.2.3", "unspecified"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "shared (CGNAT)"),
    ("192.0.0.9", "reserved (IETF protocol assignments)"),  # PCP anycast: globally reachable
    ("192.0.2.1", "reserved (documentation)"),
    ("198.51.100.7", "reserved (documentation)"),
    ("203.0.113.9", "reserved (documentation)"),
    ("198.19.255.1", "reserved (benchmarking)"),
    ("192.31.196.1", "reserved (AS112)"),
    ("192.175.48.6", "reserved (AS112)"),
    ("192.52.193.1", "reserved (AMT)"),
    ("192.88.99.1", "reserved (6to4 relay anycast)"),
    ("239.255.255.250", "multicast"),
    ("255.255.255.255", "reserved"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fd12:3456::1", "unique-local"),
    ("fec0::1", "site-local (deprecated)"),
    ("ff02::1", "multicast"),
    ("100::1", "reserved (discard-only)"),
    # Teredo to client 8.8.8.8 through server 65.54.227.120: both public, the tunnel is not.
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "reserved (Teredo)"),
    ("2001:20::1", "reserved (IETF protocol assignments)"),  # ORCHIDv2
    ("2001:db8::1", "reserved (documentation)"),
    ("3fff::1", "reserved (documentation)"),
    ("2002:808:808::1", "reserved (6to4)"),  # 6to4 to 8.8.8.8: public, the tunnel is not
    ("2620:4f:8000::42", "reserved (AS112)"),
    ("5f00::1", "reserved (SRv6 SIDs)"),
    ("::1:2:3:4", "reserved (unallocated)"),
    ("100:0:0:1::1", "reserved (unallocated)"),  # the dummy prefix, RFC 9780
    *(
        (f"{head}::1", "reserved (unallocated)")
        for head in (
            "200", "400", "800", "1000", "4000", "6000", "8000",
            "a000", "c000", "e000", "f000", "f800", "fe00",
        )
    ),
]  # fmt: skip


def test_every_range_has_one_representative() -> None:
    """SPECIAL holds one address per row of RANGES, each reaching its row: a new row needs one."""
    reached = [
        next(row for row in RANGES if ipaddress.ip_address(address) in row.network)
        for address, _ in SPECIAL
    ]

    assert list(RANGES) == sorted(reached, key=RANGES.index)
    assert [row.kind for row in reached] == [kind for _, kind in SPECIAL]


@pytest.mark.parametrize(("address", "kind"), SPECIAL)
async def test_every_special_purpose_range_is_refused_after_dns_before_any_connection(
    dialled: list[str], address: str, kind: str
) -> None:
    """With refuse_private, a name resolving into any row of RANGES is refused, nothing dialled."""
    resolver = MappedResolver({"special.tenant.test": [address]})

    assert (f"refused: address {address} is {kind}", 0, 1, 0) == await _send_to(
        "http://special.tenant.test/hook", resolver, refuse_private=True
    )
    assert (["special.tenant.test"], []) == (resolver.asked, dialled)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("2002:a9fe:a9fe::", "address 2002:a9fe:a9fe:: (169.254.169.254) is link-local"),
        ("2002:c000:201::", "address 2002:c000:201:: (192.0.2.1) is reserved (documentation)"),
        ("::8.8.8.8", "address ::808:808 is reserved (unallocated)"),
        ("::ffff:198.18.0.1", "address ::ffff:c612:1 (198.18.0.1) is reserved (benchmarking)"),
        (
            "64:ff9b::c000:9",
            "address 64:ff9b::c000:9 (192.0.0.9) is reserved (IETF protocol assignments)",
        ),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
    ],
)
def test_translations_are_judged_by_what_they_carry_and_tunnels_by_themselves_too(
    address: str, reason: str | None
) -> None:
    """With refuse_private, a translation passes on a public IPv4; a tunnel never passes."""
    assert reason == address_refusal(address, refuse_private=True)


def test_check_host_leaves_names_to_the_resolver() -> None:
    """An ordinary name is not judged before DNS: the address it resolves to is."""
    check_host("hooks.example.com", refuse_private=True)
    with pytest.raises(AddressRefused, match=r"^host metadata is a metadata service$"):
        check_host("Metadata.", refuse_private=False)


def test_the_socket_factory_refuses_the_address_connected_to() -> None:
    """The last step before connect() refuses a forbidden address whatever path produced it."""
    factory = guarded_socket(refuse_private=True)
    addr_info = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))

    with pytest.raises(AddressRefusedError, match=r"^address 127\.0\.0\.1 is loopback$"):
        factory(addr_info)
    with pytest.raises(AddressRefusedError, match="link-local"):
        guarded_socket(refuse_private=False)(
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:169.254.169.254", 80, 0, 0))
        )
    with factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80))) as sock:
        assert socket.AF_INET == sock.family


async def test_guarded_resolver_refuses_a_metadata_name_without_asking_dns() -> None:
    """A metadata host name is refused before the inner resolver is asked anything."""
    inner = MappedResolver({"metadata.google.internal": ["8.8.8.8"]})
    guarded = GuardedResolver(inner, refuse_private=False)

    with pytest.raises(AddressRefusedError, match="metadata service"):
        await guarded.resolve("metadata.google.internal", 80)
    assert [] == inner.asked


# -- the check runs after DNS, on a real loopback receiver -------------------------------


async def _send_to(
    url: str, resolver: AbstractResolver, *, refuse_private: bool
) -> tuple[str | None, int, int, int]:
    """Send one message to a hook at ``url``: its disabled_reason, delivered, refused, retries."""
    board = MemoryBoard(clock=lambda: T0)
    board.add_endpoint("e1")
    board.add_hook("h1", endpoint_id="e1", url=url, secret=SECRET)
    async with HookDispatcher(
        hooks=MemoryHooks(board), policy=ONCE, resolver=resolver, refuse_private=refuse_private
    ) as dispatcher:
        await dispatcher.notify(endpoint_id="e1", queue="q", todo=TODO, reason=CREATED)
        await dispatcher.settle()
    stats = dispatcher.stats
    return board.hooks["h1"].disabled_reason, stats.delivered, stats.refused, stats.retries


async def test_a_name_resolving_to_loopback_is_delivered_by_default(
    receiver: Receiver, dialled: list[str]
) -> None:
    """A name that resolves to the loopback receiver is delivered when refuse_private is off;
    the dial is seen, so a refused URL's empty list of dials means something."""
    resolver = MappedResolver({"hooks.tenant.test": ["127.0.0.1"]})
    url = receiver.url("hook", SECRET).replace("127.0.0.1", "hooks.tenant.test")

    assert (None, 1, 0, 0) == await _send_to(url, resolver, refuse_private=False)
    assert (["hooks.tenant.test"], 1) == (resolver.asked, len(receiver.at("hook")))
    assert "127.0.0.1" in dialled


async def test_a_name_resolving_to_loopback_is_refused_after_dns(receiver: Receiver) -> None:
    """With refuse_private, the same name is refused on the address DNS gave: no request arrives."""
    resolver = MappedResolver({"hooks.tenant.test": ["127.0.0.1"]})
    url = receiver.url("hook", SECRET).replace("127.0.0.1", "hooks.tenant.test")

    assert ("refused: address 127.0.0.1 is loopback", 0, 1, 0) == await _send_to(
        url, resolver, refuse_private=True
    )
    assert (["hooks.tenant.test"], []) == (resolver.asked, receiver.messages)


async def test_a_name_rebound_to_the_metadata_address_is_refused(receiver: Receiver) -> None:
    """A name resolving to 169.254.169.254 is refused by default, after DNS, never retried."""
    resolver = MappedResolver({"innocent.tenant.test": ["169.254.169.254"]})

    assert (LINK_LOCAL, 0, 1, 0) == await _send_to(
        "http://innocent.tenant.test/hook", resolver, refuse_private=False
    )
    assert ["innocent.tenant.test"] == resolver.asked


async def test_a_mixed_answer_is_refused_whole(receiver: Receiver) -> None:
    """A name answering a good and a forbidden address is refused, not half-connected."""
    resolver = MappedResolver({"mixed.tenant.test": ["127.0.0.1", "169.254.169.254"]})
    url = receiver.url("hook", SECRET).replace("127.0.0.1", "mixed.tenant.test")

    assert (LINK_LOCAL, 0, 1, 0) == await _send_to(url, resolver, refuse_private=False)
    assert [] == receiver.messages


# -- local-use NAT64 (64:ff9b:1::/48): every RFC 6052 layout, whatever its u-octet and suffix --

#: The bytes RFC 6052 (section 2.2, figure 1) gives the IPv4 address at each prefix length;
#: byte 8 is the "u" octet, and the bytes after the IPv4 address are the suffix.
_IPV4_BYTES = {48: (6, 7, 9, 10), 56: (7, 9, 10, 11), 64: (9, 10, 11, 12), 96: (12, 13, 14, 15)}
LOCAL_USE = "64:ff9b:1::"


def rfc6052(prefix: str, length: int, ipv4: str, *, u_octet: int = 0, suffix: int = 0) -> str:
    """``ipv4`` embedded after ``prefix`` at ``length`` bits, with the u-octet and suffix given."""
    octets = bytearray(ipaddress.IPv6Address(prefix).packed)
    where = _IPV4_BYTES[length]
    for at, octet in zip(where, ipaddress.IPv4Address(ipv4).packed, strict=True):
        octets[at] = octet
    if length < 96:
        octets[8] = u_octet
        tail = 15 - where[-1]
        octets[16 - tail :] = suffix.to_bytes(tail, "big")
    return str(ipaddress.IPv6Address(bytes(octets)))


@pytest.mark.parametrize(
    ("prefix", "length", "address"),
    [
        ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::", 96, "2001:db8:122:344::c000:221"),
    ],
)
def test_the_layouts_these_tests_build_are_rfc_6052s_own_examples(
    prefix: str, length: int, address: str
) -> None:
    """The helper below puts 192.0.2.33 where RFC 6052's examples (section 2.4) put it."""
    assert address == rfc6052(prefix, length, "192.0.2.33")


#: (u-octet, suffix) pairs a translator set up for another prefix length may read as address.
STRAY_BITS = [(0xFF, 0), (0, 0xABCDEF), (0x01, 0x1)]
LAYOUTS = [
    pytest.param(length, u_octet, suffix, id=f"/{length} u={u_octet:#x} suffix={suffix:#x}")
    for length in (48, 56, 64)
    for u_octet, suffix in STRAY_BITS
]


@pytest.mark.parametrize(("length", "u_octet", "suffix"), LAYOUTS)
async def test_local_use_nat64_metadata_is_refused_whatever_its_u_octet_and_suffix(
    length: int, u_octet: int, suffix: int
) -> None:
    """169.254.169.254 in a local-use NAT64 layout is refused by default, stray bits or not."""
    address = rfc6052(LOCAL_USE, length, "169.254.169.254", u_octet=u_octet, suffix=suffix)

    assert (f"refused: address {address} (169.254.169.254) is link-local", 1) == await _refusal(
        f"http://[{address}]/latest/meta-data/"
    )


@pytest.mark.parametrize(
    ("address", "carried", "kind"),
    [
        # An operator's /96 may sit anywhere in the /48: the bits between are its own.
        ("64:ff9b:1:ffff:ffff:ffff:a9fe:a9fe", "169.254.169.254", "link-local"),
        ("64:ff9b:1:6464:ff64:c800:0:1", "100.100.100.200", "a metadata service"),
        ("64:ff9b:1:0:80a9:fe00:100:0", "169.254.0.1", "link-local"),
    ],
)
def test_other_local_use_nat64_metadata_layouts_are_refused(
    address: str, carried: str, kind: str
) -> None:
    """A /96 under any /48 bits, Alibaba's metadata address, the rest of link-local: refused."""
    assert f"address {address} ({carried}) is {kind}" == address_refusal(
        address, refuse_private=False
    )


PRIVATE = [
    ("10.0.0.1", "private"),
    ("192.168.1.1", "private"),
    ("127.0.0.1", "loopback"),
    ("100.64.0.1", "shared (CGNAT)"),
]


@pytest.mark.parametrize(("ipv4", "kind"), PRIVATE)
@pytest.mark.parametrize(("length", "u_octet", "suffix"), LAYOUTS)
def test_local_use_nat64_private_ranges_follow_refuse_private(
    length: int, u_octet: int, suffix: int, ipv4: str, kind: str
) -> None:
    """A private IPv4 in any layout, stray bits or not, is refused with refuse_private only."""
    address = rfc6052(LOCAL_USE, length, ipv4, u_octet=u_octet, suffix=suffix)

    assert (f"address {address} ({ipv4}) is {kind}", None) == (
        address_refusal(address, refuse_private=True),
        address_refusal(address, refuse_private=False),
    )


@pytest.mark.parametrize(("length", "u_octet", "suffix"), LAYOUTS)
async def test_a_name_resolving_to_a_local_use_nat64_private_address_is_refused(
    receiver: Receiver, length: int, u_octet: int, suffix: int
) -> None:
    """After DNS, a name answering 10.0.0.1 in a local-use layout is refused: nothing is dialled."""
    address = rfc6052(LOCAL_USE, length, "10.0.0.1", u_octet=u_octet, suffix=suffix)
    resolver = MappedResolver({"nat64.tenant.test": [address]})

    assert (f"refused: address {address} (10.0.0.1) is private", 0, 1, 0) == await _send_to(
        receiver.url("hook", SECRET).replace("127.0.0.1", "nat64.tenant.test"),
        resolver,
        refuse_private=True,
    )
    assert [] == receiver.messages


@pytest.mark.parametrize(("length", "u_octet", "suffix"), LAYOUTS)
def test_local_use_nat64_public_addresses_pass_whatever_their_u_octet_and_suffix(
    length: int, u_octet: int, suffix: int
) -> None:
    """8.8.8.8 in any layout passes refuse_private: its other readings are public or 0.0.0.0/8."""
    address = rfc6052(LOCAL_USE, length, "8.8.8.8", u_octet=u_octet, suffix=suffix)

    assert None is address_refusal(address, refuse_private=True)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("64:ff9b::a9fe:a9fe", "address 64:ff9b::a9fe:a9fe (169.254.169.254) is link-local"),
        ("64:ff9b::a00:1", "address 64:ff9b::a00:1 (10.0.0.1) is private"),
        ("64:ff9b::808:808", None),
        ("64:ff9b::", "address 64:ff9b:: (0.0.0.0) is unspecified"),
    ],
)
def test_the_well_known_nat64_prefix_is_read_at_96_only(address: str, reason: str | None) -> None:
    """64:ff9b::/96 carries its IPv4 address in the last 32 bits, judged as before."""
    assert reason == address_refusal(address, refuse_private=True)
