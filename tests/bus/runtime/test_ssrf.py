"""Tests of :mod:`bus.runtime.ssrf`: the guard's decisions, resolution, and the guarded transport.

The network here is watched, so no test ever sends a packet anywhere but 127.0.0.1: address
decisions are pure function calls; names other than ``localhost`` and numeric forms are
"resolved" by a fake ``getaddrinfo``; and every transport under test connects through
:class:`LoopbackOnlyBackend`, which refuses (without a packet) any address but 127.0.0.1, so
even a broken guard could not reach a private or public host.

:class:`LoopbackServer` (a real HTTP/1.1 server on 127.0.0.1) is shared with
``tests/workers/test_http.py``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import pytest

from bus.errors import ConfigError, HookError, ResolveError, SSRFBlocked
from bus.runtime.ssrf import blocked_reason, parse_networks, resolve_checked

# ---- address decisions ----------------------------------------------------------------------


def reason(address: str, allowed: Iterable[str] = ()) -> str | None:
    return blocked_reason(ipaddress.ip_address(address), parse_networks(allowed))


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "private"),
        ("10.255.255.255", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("169.254.0.1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.0.8", "reserved"),
        ("192.0.2.1", "documentation"),
        ("203.0.113.9", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("febf::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("::ffff:127.0.0.1", "IPv4-mapped address of 127.0.0.1, loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped address of 10.0.0.1, a private network"),
        ("::ffff:169.254.169.254", "IPv4-mapped address of 169.254.169.254, link-local"),
        ("::ffff:0.0.0.0", "IPv4-mapped address of 0.0.0.0, unspecified"),
        ("64:ff9b::a00:1", "NAT64 address of 10.0.0.1, a private network"),
        ("64:ff9b::7f00:1", "NAT64 address of 127.0.0.1, loopback"),
        ("2002:a00:1::1", "6to4 address of 10.0.0.1, a private network"),
        ("2002:a9fe:a9fe::1", "6to4 address of 169.254.169.254, link-local"),
        ("64:ff9b:1::1", "local-use NAT64"),
        ("2001:0:4136:e378::1", "Teredo"),
        ("2001:db8::1", "documentation"),
        ("::10.0.0.1", "not IPv6 global unicast"),
        ("::ffff:0:a00:1", "not IPv6 global unicast"),
        ("100::1", "discard"),
        ("4000::1", "not IPv6 global unicast"),
    ],
)
def test_blocked_addresses(address: str, why: str) -> None:
    found = reason(address)
    assert found is not None and why in found


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "1.1.1.1",
        "8.8.8.8",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.169.0.1",
        "169.253.255.255",
        "11.0.0.1",
        "223.255.255.254",
        "2606:4700:4700::1111",
        "2a00:1450:4001::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert reason(address) is None


@pytest.mark.parametrize(
    ("address", "allowed", "passes"),
    [
        ("127.0.0.1", ["127.0.0.0/8"], True),
        ("10.1.2.3", ["10.0.0.0/8"], True),
        ("10.1.2.3", ["10.2.0.0/16"], False),
        ("10.1.2.3", ["10.1.2.3/32", "192.168.0.0/16"], True),
        ("169.254.169.254", ["169.254.169.254/32"], True),
        ("169.254.169.253", ["169.254.169.254/32"], False),
        ("::ffff:10.0.0.1", ["10.0.0.0/8"], True),
        ("64:ff9b::a00:1", ["10.0.0.0/8"], True),
        ("::ffff:127.0.0.1", ["::ffff:127.0.0.0/104"], True),
        ("::1", ["127.0.0.0/8"], False),
        ("127.0.0.1", ["::1/128"], False),
        ("0.0.0.0", ["127.0.0.0/8"], False),
        ("fd00::5", ["fd00::/8"], True),
        ("fe80::1", ["fd00::/8"], False),
    ],
)
def test_allowed_networks_are_exceptions(address: str, allowed: list[str], passes: bool) -> None:
    assert (reason(address, allowed) is None) is passes


def test_parse_networks() -> None:
    assert parse_networks(["10.0.0.1/8", "fd00::1/8"]) == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    with pytest.raises(ConfigError, match="allowedNetworks"):
        parse_networks(["not-a-network"])


# ---- resolution -----------------------------------------------------------------------------


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """Answer the names in ``answers`` (one list per lookup, the last repeated); others go to the real resolver."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> list[Any]:
        if host not in answers:
            return await real(host, port, **kwargs)
        asked.append(host)
        queue = answers[host]
        ips = queue.pop(0) if len(queue) > 1 else queue[0]
        if not ips:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ips]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


async def test_literals_are_checked_without_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_dns(monkeypatch, {})
    with pytest.raises(SSRFBlocked, match=r"10\.0\.0\.1: a private network .*allowedNetworks"):
        await resolve_checked("10.0.0.1", 80)
    with pytest.raises(SSRFBlocked, match="loopback"):
        await resolve_checked("[::1]", 80)
    assert await resolve_checked("127.0.0.1", 80, parse_networks(["127.0.0.0/8"])) == [
        ipaddress.ip_address("127.0.0.1")
    ]
    assert asked == []


async def test_localhost_is_refused_by_default() -> None:
    with pytest.raises(SSRFBlocked, match=r"localhost resolves to .*loopback"):
        await resolve_checked("localhost", 80)
    found = await resolve_checked("localhost", 80, parse_networks(["127.0.0.0/8", "::1/128"]))
    assert found and all(ip.is_loopback for ip in found)


@pytest.mark.parametrize("host", ["2130706433", "127.1", "0x7f.1", "017700000001"])
async def test_numeric_host_forms_are_caught(host: str) -> None:
    with pytest.raises(SSRFBlocked, match=r"resolves to 127\.0\.0\.1: loopback"):
        await resolve_checked(host, 80)


async def test_one_blocked_address_refuses_the_whole_name(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"mixed.test": [["93.184.216.34", "10.0.0.1"]], "twice.test": [["1.1.1.1", "1.1.1.1"]]})
    with pytest.raises(SSRFBlocked, match=r"mixed\.test resolves to 10\.0\.0\.1"):
        await resolve_checked("mixed.test", 443)
    assert [str(ip) for ip in await resolve_checked("mixed.test", 443, parse_networks(["10.0.0.0/8"]))] == [
        "93.184.216.34",
        "10.0.0.1",
    ]
    assert [str(ip) for ip in await resolve_checked("twice.test", 443)] == ["1.1.1.1"]


async def test_unresolvable_names_are_resolve_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"nowhere.test": [[]]})
    with pytest.raises(ResolveError, match=r"nowhere\.test"):
        await resolve_checked("nowhere.test", 80)
    with pytest.raises(ResolveError):
        await resolve_checked("", 80)
    assert issubclass(SSRFBlocked, HookError) and issubclass(ResolveError, HookError)


# ---- the transport --------------------------------------------------------------------------
