"""Tests of :mod:`workers.outbound.transport` (pooled HTTP/1.1 connections, SSRF guard), and the http hook on it.

No packet goes anywhere but 127.0.0.1: blocked addresses are refused before a socket exists;
names other than ``localhost`` are "resolved" by a fake ``getaddrinfo``; and the transports
tested directly are :class:`LoopbackOnly`, whose sockets (made only after the guard said yes)
refuse, without a packet, any address but 127.0.0.1. Servers are real, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
import pytest

from bus.errors import OutboundError, ResponseTooLarge, SSRFBlocked
from bus.hooks.results import Outcome
from bus.policy.loading import Policy, policy_from_text
from bus.policy.schema import HttpHandler
from bus.runtime.ssrf import parse_networks
from hookbus.platform.redis_server import free_port
from tests.bus.runtime.test_ssrf import fake_dns
from tests.conftest import async_wait_for
from tests.loopback import LoopbackServer, Received, flood, redirect_to, reply, respond_ok
from workers.handlers.http import run_http
from workers.outbound.client import guarded_request, outbound_client
from workers.outbound.transport import GuardedTransport
from workers.services import Services

PRE = "PreToolUse"
DENY = {"hookSpecificOutput": {"hookEventName": PRE, "permissionDecision": "deny", "permissionDecisionReason": "no"}}


class LoopbackOnly(GuardedTransport):
    """The transport under test; every socket it gets past the guard is recorded, and only 127.0.0.1 connects."""

    def __init__(self, allowed: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(parse_networks(allowed), **kwargs)
        self.attempts: list[str] = []

    def open_socket(self, addr_info: Any) -> socket.socket:
        sock = super().open_socket(addr_info)  # the guard's check comes first
        address = str(addr_info[4][0])
        self.attempts.append(address)
        if address != "127.0.0.1":
            sock.close()
            raise OSError(errno.ECONNREFUSED, f"test transport refuses {address}")
        return sock


@pytest.fixture
async def guarded() -> AsyncIterator[Any]:
    """``guarded(allowed, **kwargs)`` -> (client, transport); every client is closed at teardown."""
    clients: list[httpx.AsyncClient] = []

    def make(allowed: Iterable[str] = (), **kwargs: Any) -> tuple[httpx.AsyncClient, LoopbackOnly]:
        transport = LoopbackOnly(allowed, **kwargs)
        clients.append(httpx.AsyncClient(transport=transport, trust_env=False))
        return clients[-1], transport

    yield make
    for client in clients:
        await client.aclose()


class KeepAliveServer:
    """A keep-alive HTTP/1.1 hook server on 127.0.0.1 that answers ``{}``; ``close_after`` closes each
    connection after that many answers (without saying so, as an idle timeout on the server would)."""

    def __init__(self, close_after: int = 0) -> None:
        self.close_after = close_after
        self.connections = 0
        self.answered = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> KeepAliveServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        served = 0
        try:
            while not self.close_after or served < self.close_after:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


def http_policy(url: str, networks: list[str] | None = None, **http: Any) -> Policy:
    doc: dict[str, Any] = {"hooks": {PRE: [{"matcher": "Bash", "hooks": [{"type": "http", "url": url}]}]}}
    if networks is not None or http:
        doc["hookbus"] = {"http": {**({"allowedNetworks": networks} if networks is not None else {}), **http}}
    return policy_from_text(json.dumps(doc))


async def run_hook(policy: Policy, services: Services) -> Any:
    handler = policy.entries(PRE)[0].handler
    assert isinstance(handler, HttpHandler)
    return await run_http(handler, PRE, b'{"session_id": "s"}', policy=policy, services=services, timeout_s=5.0)


# ---- the guard on the new transport ---------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:10.0.0.1]/",
        "http://[fd00::1]:8080/",
        "https://192.168.0.1/",
        "http://0.0.0.0:8080/",
        "http://2130706433/",
        "http://127.1/",
        "http://100.64.0.1/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[::1]/",
        "http://localhost/",
    ],
)
async def test_blocked_urls_never_reach_the_network(guarded: Any, url: str) -> None:
    client, transport = guarded()
    with pytest.raises((SSRFBlocked, httpx.InvalidURL)) as raised:
        await client.get(url)
    if isinstance(raised.value, httpx.InvalidURL):  # a numeric form httpx will not parse as a host
        assert "canonical" in str(raised.value)
    else:
        assert "SSRF guard refused" in str(raised.value)
    assert transport.attempts == []
    assert transport.in_flight == 0


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "file:///etc/passwd", "ws://127.0.0.1/"])
async def test_other_schemes_are_refused(guarded: Any, url: str) -> None:
    _, transport = guarded(["127.0.0.0/8"])
    with pytest.raises(SSRFBlocked, match="only http and https"):
        await transport.handle_async_request(httpx.Request("GET", url))


@pytest.mark.system
async def test_a_name_resolving_to_a_private_address_is_refused_at_connect_time(
    guarded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = fake_dns(
        monkeypatch, {"rebind.test": [["127.0.0.1"], ["10.0.0.1"]], "mixed.test": [["127.0.0.1", "10.0.0.1"]]}
    )
    client, transport = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as server:  # it closes every connection: each request connects anew
        first = await client.get(f"http://rebind.test:{server.port}/x")
        assert first.status_code == 200
        assert server.requests[0].headers["host"] == f"rebind.test:{server.port}"
        with pytest.raises(SSRFBlocked, match=r"rebind\.test resolves to 10\.0\.0\.1"):
            await client.get(f"http://rebind.test:{server.port}/x")  # a new connection, so a new check
        with pytest.raises(SSRFBlocked, match=r"mixed\.test resolves to 10\.0\.0\.1"):
            await client.get(f"http://mixed.test:{server.port}/x")  # one bad address refuses the name
    assert transport.attempts == ["127.0.0.1"] and len(server.requests) == 1
    assert asked == ["rebind.test", "rebind.test", "mixed.test"]


@pytest.mark.system
async def test_each_checked_address_is_tried_in_turn(guarded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"multi.test": [["127.0.0.3", "127.0.0.1"]]})
    client, transport = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as server:
        assert (await client.get(f"http://multi.test:{server.port}/")).status_code == 200
    assert transport.attempts == ["127.0.0.3", "127.0.0.1"]


@pytest.mark.system
async def test_an_international_name_is_resolved_and_sent_in_its_ascii_form(
    guarded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = fake_dns(monkeypatch, {"xn--bcher-kva.test": [["127.0.0.1"]]})
    client, _ = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as server:
        assert (await client.get(f"http://bücher.test:{server.port}/")).status_code == 200
        assert server.requests[0].headers["host"] == f"xn--bcher-kva.test:{server.port}"
    assert asked == ["xn--bcher-kva.test"]


@pytest.mark.system
async def test_redirects_are_returned_and_every_hop_is_checked(guarded: Any) -> None:
    client, transport = guarded(["127.0.0.0/8"])
    async with LoopbackServer(respond_ok) as target:
        async with LoopbackServer(redirect_to(target.url("/moved"))) as origin:
            response = await client.get(origin.url())
            assert response.status_code == 302 and target.connections == 0
        async with LoopbackServer(redirect_to("http://169.254.169.254/latest/meta-data/")) as origin:
            with pytest.raises(SSRFBlocked, match=r"169\.254\.169\.254"):
                await client.get(origin.url(), follow_redirects=True)  # even a caller who asks to follow
    assert set(transport.attempts) == {"127.0.0.1"}


@pytest.mark.system
async def test_the_body_is_capped_while_streaming(guarded: Any) -> None:
    client, transport = guarded(["127.0.0.0/8"], max_response_bytes=10_000)
    async with LoopbackServer(flood) as server:
        with pytest.raises(ResponseTooLarge, match="over 10000 bytes"):
            await client.get(server.url())
        assert transport.in_flight == 0
        await async_wait_for(lambda: server.client_hung_up, 5.0)


@pytest.mark.system
async def test_a_declared_length_over_the_cap_fails_before_the_body(guarded: Any) -> None:
    async def promise_a_lot(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")  # and then nothing, ever
        await writer.drain()
        await server.stopping.wait()

    client, transport = guarded(["127.0.0.0/8"], max_response_bytes=10_000)
    async with LoopbackServer(promise_a_lot) as server:
        with pytest.raises(ResponseTooLarge, match="10000000 bytes is over 10000"):
            await asyncio.wait_for(client.get(server.url()), 5.0)
    assert transport.in_flight == 0


# ---- connections ----------------------------------------------------------------------------


@pytest.mark.system
async def test_connections_are_kept_alive_and_reused(guarded: Any) -> None:
    client, transport = guarded(["127.0.0.0/8"])
    async with KeepAliveServer() as server:
        for _ in range(20):
            assert (await client.post(server.url(), content=b"{}")).json() == {}
        assert server.connections == 1 and server.answered == 20
    assert transport.attempts == ["127.0.0.1"]


@pytest.mark.system
async def test_a_kept_alive_connection_the_server_closed_does_not_fail_the_next_request(guarded: Any) -> None:
    # The server closes each connection right after its answer, without saying so: the next
    # request finds the connection in the pool before the FIN has been read, and must still pass.
    client, _ = guarded(["127.0.0.0/8"])
    async with KeepAliveServer(close_after=1) as server:
        for _ in range(20):
            assert (await client.post(server.url(), content=b"{}")).status_code == 200
        assert server.answered == 20 and server.connections == 20


@pytest.mark.system
async def test_per_host_limit_queues_requests_of_that_host_only(guarded: Any) -> None:
    client, transport = guarded(["127.0.0.0/8"], limit_per_host=2)
    release = asyncio.Event()

    async def slow(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        await reply(200, "{}")(server, request, writer)

    async with LoopbackServer(slow) as busy, LoopbackServer(respond_ok) as other:
        waiting = [asyncio.create_task(client.get(busy.url())) for _ in range(4)]
        await async_wait_for(lambda: len(busy.requests) == 2, 5.0)
        assert (await client.get(other.url())).status_code == 200  # another host is not held up
        assert len(busy.requests) == 2
        release.set()
        assert [r.status_code for r in await asyncio.gather(*waiting)] == [200] * 4
    assert transport.in_flight == 0


@pytest.mark.system
async def test_failures_map_to_httpx_errors_without_the_url(guarded: Any) -> None:
    async def hang_up(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def garbage(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.write(b"NOT HTTP\r\n\r\n")
        await writer.drain()

    client, transport = guarded(["127.0.0.0/8"])
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{free_port()}/")
    for responder in (hang_up, garbage):
        async with LoopbackServer(responder) as server:
            with pytest.raises(httpx.RemoteProtocolError) as raised:
                await client.get(server.url("/hook?token=sekrit"))
            assert "sekrit" not in str(raised.value)
    assert transport.in_flight == 0


@pytest.mark.system
async def test_a_replaced_transport_closes_once_idle(guarded: Any) -> None:
    client, transport = guarded(["127.0.0.0/8"])
    async with KeepAliveServer() as server:
        assert (await client.post(server.url(), content=b"{}")).status_code == 200
        transport.close_when_idle()
        await async_wait_for(
            lambda: transport.closing and transport._closer is not None and transport._closer.done(), 5.0
        )
        with pytest.raises(httpx.TransportError, match="closed"):
            await client.post(server.url(), content=b"{}")


# ---- the http hook on the new transport ------------------------------------------------------


@pytest.mark.system
async def test_http_hook_refuses_loopback_unless_allowed(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as server:
        refused = await run_hook(http_policy(server.url()), services)
        assert refused.outcome is Outcome.ERROR and "SSRF guard refused 127.0.0.1: loopback" in (refused.reason or "")
        assert server.connections == 0
        allowed = await run_hook(http_policy(server.url(), ["127.0.0.0/8"]), services)
    assert allowed.outcome is Outcome.OK and allowed.output == DENY
    assert isinstance(
        outbound_client(services, http_policy(server.url(), ["127.0.0.0/8"])).guard,  # type: ignore[attr-defined]
        GuardedTransport,
    )


async def test_http_hook_refuses_a_name_resolving_to_a_private_address(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_dns(monkeypatch, {"hooks.test": [["10.1.2.3"]], "split.test": [["127.0.0.1", "192.168.1.1"]]})
    async with LoopbackServer(reply(200, DENY)) as server:
        for name, address in (("hooks.test", "10.1.2.3"), ("split.test", "192.168.1.1")):
            result = await run_hook(http_policy(f"http://{name}:{server.port}/hook", ["127.0.0.0/8"]), services)
            assert result.outcome is Outcome.ERROR
            assert f"SSRF guard refused {name} resolves to {address}" in (result.reason or "")
        assert server.connections == 0


@pytest.mark.system
async def test_http_hook_does_not_follow_redirects(services: Services) -> None:
    async with LoopbackServer(reply(200, DENY)) as target:
        async with LoopbackServer(redirect_to(target.url("/moved"))) as origin:
            result = await run_hook(http_policy(origin.url(), ["127.0.0.0/8"]), services)
        assert result.outcome is Outcome.ERROR and "HTTP 302" in (result.reason or "")
        assert target.connections == 0


@pytest.mark.system
async def test_http_hook_response_cap(services: Services) -> None:
    async with LoopbackServer(flood) as server:
        result = await run_hook(http_policy(server.url(), ["127.0.0.0/8"], maxResponseBytes=50_000), services)
        assert result.outcome is Outcome.ERROR and "over 50000 bytes" in (result.reason or "")
        await async_wait_for(lambda: server.client_hung_up, 5.0)


@pytest.mark.system
async def test_guarded_request_reports_a_dropped_connection_as_an_error_not_a_timeout(services: Services) -> None:
    async def hang_up(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async with LoopbackServer(hang_up) as server:
        policy = http_policy(server.url(), ["127.0.0.0/8"])
        with pytest.raises(OutboundError, match="invalid HTTP response: Server disconnected"):
            await guarded_request(services, policy, "POST", server.url(), content=b"{}", timeout_s=5.0)
