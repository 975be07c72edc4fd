"""Tests of :mod:`bus.ssrf`: the guard's decisions, resolution, and the guarded transport.

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

import httpcore
import httpx
import pytest

from bus.errors import ConfigError, HookError
from bus.ssrf import (
    GuardedBackend,
    GuardedTransport,
    ResolveError,
    ResponseTooLarge,
    SSRFBlocked,
    blocked_reason,
    parse_networks,
    resolve_checked,
)
from tests.conftest import async_wait_for
from tests.loopback import LoopbackServer, Received, flood, redirect_to, respond_ok

# ---- address decisions ----------------------------------------------------------------------


def reason(address: str, allowed: Iterable[str] = ()) -> str | None:
    return blocked_reason(ipaddress.ip_address(address), parse_networks(allowed))


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"), ("10.255.255.255", "private"), ("172.16.0.1", "private"),
    ("172.31.255.255", "private"), ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"), ("169.254.0.1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"),
    ("255.255.255.255", "broadcast"), ("240.0.0.1", "reserved"), ("192.0.0.8", "reserved"),
    ("192.0.2.1", "documentation"), ("203.0.113.9", "documentation"), ("198.18.0.1", "benchmarking"),
    ("::1", "loopback"), ("::", "unspecified"), ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("fe80::1", "link-local"), ("fe80::1%eth0", "link-local"), ("febf::1", "link-local"),
    ("fec0::1", "site-local"), ("ff02::1", "multicast"), ("ff0e::1", "multicast"),
    ("::ffff:127.0.0.1", "IPv4-mapped address of 127.0.0.1, loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped address of 10.0.0.1, a private network"),
    ("::ffff:169.254.169.254", "IPv4-mapped address of 169.254.169.254, link-local"),
    ("::ffff:0.0.0.0", "IPv4-mapped address of 0.0.0.0, unspecified"),
    ("64:ff9b::a00:1", "NAT64 address of 10.0.0.1, a private network"),
    ("64:ff9b::7f00:1", "NAT64 address of 127.0.0.1, loopback"),
    ("2002:a00:1::1", "6to4 address of 10.0.0.1, a private network"),
    ("2002:a9fe:a9fe::1", "6to4 address of 169.254.169.254, link-local"),
    ("64:ff9b:1::1", "local-use NAT64"), ("2001:0:4136:e378::1", "Teredo"), ("2001:db8::1", "documentation"),
    ("::10.0.0.1", "not IPv6 global unicast"), ("::ffff:0:a00:1", "not IPv6 global unicast"),
    ("100::1", "discard"), ("4000::1", "not IPv6 global unicast"),
])
def test_blocked_addresses(address: str, why: str) -> None:
    found = reason(address)
    assert found is not None and why in found


@pytest.mark.parametrize("address", [
    "93.184.216.34", "1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
    "192.169.0.1", "169.253.255.255", "11.0.0.1", "223.255.255.254",
    "2606:4700:4700::1111", "2a00:1450:4001::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
])
def test_public_addresses_pass(address: str) -> None:
    assert reason(address) is None


@pytest.mark.parametrize(("address", "allowed", "passes"), [
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
])
def test_allowed_networks_are_exceptions(address: str, allowed: list[str], passes: bool) -> None:
    assert (reason(address, allowed) is None) is passes


def test_parse_networks() -> None:
    assert parse_networks(["10.0.0.1/8", "fd00::1/8"]) == (ipaddress.ip_network("10.0.0.0/8"),
                                                            ipaddress.ip_network("fd00::/8"))
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
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
                for ip in ips]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


async def test_literals_are_checked_without_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_dns(monkeypatch, {})
    with pytest.raises(SSRFBlocked, match=r"10\.0\.0\.1: a private network .*allowedNetworks"):
        await resolve_checked("10.0.0.1", 80)
    with pytest.raises(SSRFBlocked, match="loopback"):
        await resolve_checked("[::1]", 80)
    assert await resolve_checked("127.0.0.1", 80, parse_networks(["127.0.0.0/8"])) == [
        ipaddress.ip_address("127.0.0.1")]
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
        "93.184.216.34", "10.0.0.1"]
    assert [str(ip) for ip in await resolve_checked("twice.test", 443)] == ["1.1.1.1"]


async def test_unresolvable_names_are_resolve_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"nowhere.test": [[]]})
    with pytest.raises(ResolveError, match=r"nowhere\.test"):
        await resolve_checked("nowhere.test", 80)
    with pytest.raises(ResolveError):
        await resolve_checked("", 80)
    assert issubclass(SSRFBlocked, HookError) and issubclass(ResolveError, HookError)


# ---- the transport --------------------------------------------------------------------------


class LoopbackOnlyBackend(httpcore.AsyncNetworkBackend):
    """Connects for real to 127.0.0.1 only; records every attempt and refuses the rest with no packet."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        self.attempts.append(host)
        if host != "127.0.0.1":
            raise httpcore.ConnectError(f"test backend refuses {host}")
        return await self.inner.connect_tcp(host, port, timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded(allowed: Iterable[str] = (), **kwargs: Any) -> tuple[httpx.AsyncClient, LoopbackOnlyBackend]:
    backend = LoopbackOnlyBackend()
    transport = GuardedTransport(parse_networks(allowed), network_backend=backend, **kwargs)
    return httpx.AsyncClient(transport=transport, trust_env=False), backend


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/",
    "http://[fd00::1]:8080/", "https://192.168.0.1/", "http://0.0.0.0:8080/", "http://2130706433/",
    "http://100.64.0.1/", "http://[64:ff9b::a9fe:a9fe]/",
])
async def test_blocked_urls_never_reach_the_network(url: str) -> None:
    client, backend = guarded()
    async with client:
        with pytest.raises(SSRFBlocked, match="SSRF guard refused"):
            await client.get(url)
    assert backend.attempts == []
    assert client._transport.in_flight == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "ws://127.0.0.1/"])
async def test_other_schemes_are_refused(url: str) -> None:
    transport = GuardedTransport(parse_networks(["127.0.0.0/8"]), network_backend=LoopbackOnlyBackend())
    with pytest.raises(SSRFBlocked, match="only http and https"):
        await transport.handle_async_request(httpx.Request("GET", url))
    with pytest.raises(SSRFBlocked, match="Unix socket"):
        await GuardedBackend().connect_unix_socket("/var/run/docker.sock")


async def test_connects_to_the_checked_address_not_a_new_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_dns(monkeypatch, {"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    client, backend = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as server, client:
        first = await client.get(f"http://rebind.test:{server.port}/x")
        assert first.status_code == 200
        assert backend.attempts == ["127.0.0.1"] and asked == ["rebind.test"]
        assert server.requests[0].headers["host"] == f"rebind.test:{server.port}"
        with pytest.raises(SSRFBlocked, match=r"rebind\.test resolves to 10\.0\.0\.1"):
            await client.get(f"http://rebind.test:{server.port}/x")  # a new connection, so a new check
    assert backend.attempts == ["127.0.0.1"] and len(server.requests) == 1


async def test_tries_each_checked_address_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"multi.test": [["127.0.0.3", "127.0.0.1"]]})
    client, backend = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as server, client:
        assert (await client.get(f"http://multi.test:{server.port}/")).status_code == 200
    assert backend.attempts == ["127.0.0.3", "127.0.0.1"]


async def test_redirects_are_returned_and_every_hop_is_checked() -> None:
    client, backend = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as target, client:
        async with LoopbackServer(redirect_to(target.url("/moved"))) as origin:
            response = await client.get(origin.url())
            assert response.status_code == 302 and target.connections == 0
        async with LoopbackServer(redirect_to("http://169.254.169.254/latest/meta-data/")) as origin:
            with pytest.raises(SSRFBlocked, match=r"169\.254\.169\.254"):
                await client.get(origin.url(), follow_redirects=True)  # even a caller who asks to follow
    assert set(backend.attempts) == {"127.0.0.1"}


async def test_the_body_is_capped_while_streaming() -> None:
    client, _ = guarded(["127.0.0.0/8"], max_response_bytes=10_000)
    async with LoopbackServer(flood) as server, client:
        with pytest.raises(ResponseTooLarge, match="over 10000 bytes"):
            await client.get(server.url())
        assert client._transport.in_flight == 0  # type: ignore[attr-defined]
        await async_wait_for(lambda: server.client_hung_up, 5.0)


async def test_a_declared_length_over_the_cap_fails_before_the_body() -> None:
    async def promise_a_lot(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")  # and then nothing, ever
        await writer.drain()
        await server.stopping.wait()

    client, _ = guarded(["127.0.0.0/8"], max_response_bytes=10_000)
    async with LoopbackServer(promise_a_lot) as server, client:
        with pytest.raises(ResponseTooLarge, match="10000000 bytes is over 10000"):
            await asyncio.wait_for(client.get(server.url()), 5.0)
