"""Tests of :mod:`workers.outbound.h1` (one HTTP/1.1 client connection).

They go through :class:`workers.outbound.transport.GuardedTransport`.

Every server is a real one on 127.0.0.1 that writes hand-made bytes, so each test controls the
wire: framing (chunked, close-delimited, bodiless statuses), interim answers, servers that
talk out of turn or stall, TLS. Connection reuse is read on the server's side: how many
connections it accepted, and which of them the client closed. Where a test needs a response
to arrive in parts, the server waits on an event the test sets once it holds the first part.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trustme

from bus.errors import ResponseTooLarge
from bus.runtime.ssrf import parse_networks
from tests.conftest import async_wait_for
from workers.outbound.h1 import request_head
from workers.outbound.transport import GuardedTransport

MakeClient = Callable[..., tuple[httpx.AsyncClient, GuardedTransport]]
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def answer(body: bytes, status: bytes = b"200 OK", *headers: bytes) -> bytes:
    """A whole response with a ``Content-Length``."""
    fields = b"".join(header + b"\r\n" for header in headers)
    return b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + fields + b"\r\n" + body


def chunked(*parts: bytes) -> bytes:
    """``parts`` in chunked transfer coding, last chunk included."""
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


class Peer:
    """One accepted connection, on the server's side: read requests, write raw bytes."""

    def __init__(self, server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        self.hung_up = False  # the client closed (or reset) the connection

    async def request(self) -> bytes | None:
        """The next request (head and body), or None once the client has closed the connection."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            request = head + await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.hung_up = True
            return None
        self.server.requests.append(request)
        return request

    async def send(self, *parts: bytes) -> None:
        """Write ``parts`` in turn, draining after each."""
        for part in parts:
            self.writer.write(part)
            await self.writer.drain()

    async def until_hang_up(self) -> None:
        """Read until the client closes the connection (what it sends meanwhile goes to ``server.stray``)."""
        try:
            while data := await self.reader.read(65536):
                self.server.stray += data
        except ConnectionError:
            pass
        self.hung_up = True

    def reset(self) -> None:
        """Drop the connection with a TCP reset instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


Serve = Callable[[Peer], Awaitable[None]]


class RawServer:
    """``async with RawServer(serve) as s:`` — a server on 127.0.0.1 running ``serve(peer)`` on each connection.

    Once ``serve`` returns with the connection still open, the server waits for the client to
    close it, so ``hung_up`` counts the connections the client has closed.
    """

    def __init__(self, serve: Serve, *, tls: ssl.SSLContext | None = None) -> None:
        self.serve, self.tls = serve, tls
        self.peers: list[Peer] = []
        self.requests: list[bytes] = []
        self.stray = b""
        self.port = 0
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    @property
    def connections(self) -> int:
        return len(self.peers)

    @property
    def hung_up(self) -> int:
        return sum(peer.hung_up for peer in self.peers)

    def url(self, path: str = "/hook") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self.stopping.set()
        self._server.close()
        for peer in self.peers:
            peer.writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(self, reader, writer)
        self.peers.append(peer)
        try:
            await self.serve(peer)
            if not peer.hung_up and not writer.is_closing():
                await peer.until_hang_up()
        except ConnectionError:
            peer.hung_up = True
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def keep_alive(response: bytes) -> Serve:
    """Answer every request on the connection with ``response``."""

    async def serve(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(response)

    return serve


async def never_answer(peer: Peer) -> None:
    """Read the request, then nothing until the client hangs up."""
    await peer.request()
    await peer.until_hang_up()


@pytest.fixture
async def guarded() -> AsyncIterator[MakeClient]:
    """``guarded(**kwargs)`` -> (client, transport) allowed to reach 127.0.0.0/8; clients closed at teardown."""
    clients: list[httpx.AsyncClient] = []

    def make(**kwargs: Any) -> tuple[httpx.AsyncClient, GuardedTransport]:
        transport = GuardedTransport(parse_networks(["127.0.0.0/8"]), **kwargs)
        clients.append(httpx.AsyncClient(transport=transport, trust_env=False))
        return clients[-1], transport

    yield make
    for client in clients:
        await client.aclose()


# ---- framing ---------------------------------------------------------------------------------


@pytest.mark.system
async def test_a_chunked_body_is_reassembled_and_the_connection_reused(guarded: MakeClient) -> None:
    rest = asyncio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(CHUNKED_HEAD + chunked(b"hello", b", ", b"world"))  # in one write
        await peer.request()
        await peer.send(CHUNKED_HEAD + b"5\r\nhel")  # the rest once the client holds the head
        await rest.wait()
        await peer.send(b"lo\r\n7\r\n, world\r\n", b"0\r\n\r\n")
        await peer.request()
        await peer.send(answer(b"after"))

    client, transport = guarded()
    async with RawServer(serve) as server:
        first = await asyncio.wait_for(client.get(server.url()), 5.0)
        assert first.status_code == 200 and first.content == b"hello, world"
        async with client.stream("GET", server.url()) as streamed:
            rest.set()
            assert await asyncio.wait_for(streamed.aread(), 5.0) == b"hello, world"
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"after"
        assert server.connections == 1 and len(server.requests) == 3
    assert transport.in_flight == 0


@pytest.mark.parametrize("split", [False, True], ids=["one-write", "a-write-each"])
@pytest.mark.system
async def test_interim_responses_are_skipped(guarded: MakeClient, split: bool) -> None:
    interim = [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"]
    final = answer(b"real", b"200 OK", b"X-Final: yes")
    parts = [*interim, final] if split else [b"".join([*interim, final])]

    async def serve(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(*parts)

    client, _ = guarded()
    async with RawServer(serve) as server:
        for _ in range(2):
            response = await asyncio.wait_for(client.post(server.url(), content=b"{}"), 5.0)
            assert response.status_code == 200 and response.reason_phrase == "OK"
            assert response.content == b"real"
            assert response.headers["x-final"] == "yes" and "link" not in response.headers  # only the final head
        assert server.connections == 1  # the final answer's keep-alive counts


@pytest.mark.system
async def test_a_body_delimited_by_the_end_of_the_connection(guarded: MakeClient) -> None:
    rest = asyncio.Event()

    async def serve(peer: Peer) -> None:  # neither Content-Length nor chunked: the body ends with the connection
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst part, ")
        await rest.wait()
        await peer.send(b"second part")
        peer.writer.close()

    client, transport = guarded()
    async with RawServer(serve) as server:
        async with client.stream("GET", server.url()) as streamed:
            rest.set()
            assert await asyncio.wait_for(streamed.aread(), 5.0) == b"first part, second part"
        assert server.connections == 1
        buffered = await asyncio.wait_for(client.get(server.url()), 5.0)
        assert buffered.content == b"first part, second part"
        assert server.connections == 2  # such a connection is never reused
    assert transport.in_flight == 0


@pytest.mark.system
async def test_a_head_answer_declaring_a_length_ends_with_its_headers(guarded: MakeClient) -> None:
    async def serve(peer: Peer) -> None:  # a keep-alive server: a client waiting for 10 body bytes would hang
        while (request := await peer.request()) is not None:
            if request.startswith(b"HEAD "):
                await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
            else:
                await peer.send(answer(b"0123456789"))

    client, transport = guarded()
    async with RawServer(serve) as server:
        head = await asyncio.wait_for(client.head(server.url()), 5.0)
        assert head.status_code == 200 and head.headers["content-length"] == "10" and head.content == b""
        following = await asyncio.wait_for(client.get(server.url()), 5.0)
        assert following.content == b"0123456789"
        assert [request.split(b" ", 1)[0] for request in server.requests] == [b"HEAD", b"GET"]
    assert transport.in_flight == 0


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
@pytest.mark.system
async def test_bodiless_statuses_without_a_length_keep_the_connection(guarded: MakeClient, status: bytes) -> None:
    client, _ = guarded()
    async with RawServer(keep_alive(b"HTTP/1.1 " + status + b'\r\nETag: "x"\r\n\r\n')) as server:
        for _ in range(3):
            response = await asyncio.wait_for(client.get(server.url()), 5.0)
            assert response.status_code == int(status[:3]) and response.content == b""
        assert server.connections == 1


# ---- requests that must not be sent ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (b"X-A", b"v\r\nInjected: 1"),
        (b"X-A", b"v\nInjected: 1"),
        (b"X-A", b"v\rInjected: 1"),
        (b"X-A", b"v\x00Injected"),
        (b"X-A: v\r\nInjected", b"1"),
        (b"X Injected", b"1"),
    ],
)
async def test_a_header_that_could_split_the_request_is_refused_before_connecting(
    guarded: MakeClient, name: bytes, value: bytes
) -> None:
    _, transport = guarded()
    async with RawServer(keep_alive(answer(b"ok"))) as server:
        request = httpx.Request("GET", server.url(), headers=[(name, value)])
        with pytest.raises(httpx.LocalProtocolError) as raised:
            await asyncio.wait_for(transport.handle_async_request(request), 5.0)
        assert "Injected" not in str(raised.value)  # a header may carry a secret: never quoted
        assert server.connections == 0
    assert transport.in_flight == 0


# ---- servers that talk out of turn -----------------------------------------------------------


@pytest.mark.system
async def test_a_server_talking_after_its_answer_loses_the_connection(guarded: MakeClient) -> None:
    late = asyncio.Event()

    async def serve(peer: Peer) -> None:
        if peer is not server.peers[0]:
            await keep_alive(answer(b"second"))(peer)
            return
        await peer.request()
        await peer.send(answer(b"first"))
        await late.wait()
        await peer.send(answer(b"unasked"))

    client, transport = guarded()
    async with RawServer(serve) as server:
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"first"
        late.set()
        await async_wait_for(lambda: server.hung_up == 1, 5.0)  # the client closed the connection that talked
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"second"
        assert server.connections == 2
    assert transport.in_flight == 0


@pytest.mark.system
async def test_a_second_response_in_the_same_segment_neither_corrupts_the_first_nor_is_reused(
    guarded: MakeClient,
) -> None:
    async def serve(peer: Peer) -> None:
        if peer is not server.peers[0]:
            await keep_alive(answer(b"second"))(peer)
            return
        await peer.request()
        await peer.send(answer(b"first") + answer(b"unasked", b"500 Oops", b"X-Unasked: 1"))  # one write
        await keep_alive(answer(b"same connection"))(peer)

    client, _ = guarded()
    async with RawServer(serve) as server:
        first = await asyncio.wait_for(client.get(server.url()), 5.0)
        assert (first.status_code, first.reason_phrase, first.content) == (200, "OK", b"first")
        assert first.headers.get_list("content-length") == ["5"] and "x-unasked" not in first.headers
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"second"


@pytest.mark.system
async def test_junk_after_a_complete_response_in_the_same_segment_spares_the_response(guarded: MakeClient) -> None:
    async def serve(peer: Peer) -> None:
        if peer is not server.peers[0]:
            await keep_alive(answer(b"second"))(peer)
            return
        await peer.request()
        await peer.send(answer(b"first") + b"GARBAGE\r\n")

    client, _ = guarded()
    async with RawServer(serve) as server:
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"first"
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"second"
        assert server.connections == 2


@pytest.mark.system
async def test_a_close_delimited_body_cut_by_a_reset_fails(guarded: MakeClient) -> None:
    cut = asyncio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\n\r\nthe beginning")
        await cut.wait()
        peer.reset()

    client, transport = guarded()
    async with RawServer(serve) as server:
        async with client.stream("GET", server.url()) as streamed:
            chunks = streamed.aiter_bytes()
            received = b""
            while received != b"the beginning":
                received += await asyncio.wait_for(anext(chunks), 5.0)
            cut.set()
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(anext(chunks, b""), 5.0)
    assert transport.in_flight == 0


# ---- large bodies and the cap ----------------------------------------------------------------


@pytest.mark.system
async def test_a_large_body_is_streamed_in_full_under_the_cap(guarded: MakeClient) -> None:
    body = bytes(range(256)) * 1200  # 300 KiB
    rest = asyncio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:1000])
        await rest.wait()
        await peer.send(*(body[start : start + 30_000] for start in range(1000, len(body), 30_000)))
        await keep_alive(answer(b"next"))(peer)

    client, transport = guarded()
    async with RawServer(serve) as server:
        received = bytearray()
        async with client.stream("GET", server.url()) as streamed:
            async for chunk in streamed.aiter_bytes():
                received += chunk
                rest.set()
        assert received == body
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"next"
        assert server.connections == 1  # read to its end, the connection is reused
    assert transport.in_flight == 0


@pytest.mark.parametrize("framing", ["chunked", "close-delimited"])
@pytest.mark.system
async def test_a_streamed_body_over_the_cap_fails_and_closes_the_connection(guarded: MakeClient, framing: str) -> None:
    piece = b"x" * 30_000
    rest = asyncio.Event()

    async def serve(peer: Peer) -> None:
        await peer.request()
        if framing == "chunked":
            await peer.send(CHUNKED_HEAD + chunked(piece)[:-5])
            await rest.wait()
            await peer.send(*(chunked(piece)[:-5] for _ in range(9)), b"0\r\n\r\n")
        else:
            await peer.send(b"HTTP/1.1 200 OK\r\n\r\n" + piece)
            await rest.wait()
            await peer.send(*(piece for _ in range(9)))  # and no end: only the cap stops the client

    client, transport = guarded(max_response_bytes=100_000)
    async with RawServer(serve) as server:
        async with client.stream("GET", server.url()) as streamed:
            rest.set()
            with pytest.raises(ResponseTooLarge, match="over 100000 bytes"):
                await asyncio.wait_for(streamed.aread(), 5.0)
        assert transport.in_flight == 0
        await async_wait_for(lambda: server.hung_up == 1, 5.0)


# ---- timeouts --------------------------------------------------------------------------------


@pytest.mark.system
async def test_the_read_timeout_bounds_the_wait_for_an_answer(guarded: MakeClient) -> None:
    client, transport = guarded()
    async with RawServer(never_answer) as server:
        with pytest.raises(httpx.ReadTimeout):
            await asyncio.wait_for(client.get(server.url(), timeout=httpx.Timeout(5.0, read=0.2)), 5.0)
        assert transport.in_flight == 0
        await async_wait_for(lambda: server.hung_up == 1, 5.0)


@pytest.mark.system
async def test_the_read_timeout_bounds_each_wait_for_the_body(guarded: MakeClient) -> None:
    async def serve(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome")
        await peer.until_hang_up()

    client, transport = guarded()
    async with RawServer(serve) as server:
        async with client.stream("GET", server.url(), timeout=httpx.Timeout(5.0, read=0.2)) as streamed:
            with pytest.raises(httpx.ReadTimeout):
                await asyncio.wait_for(streamed.aread(), 5.0)
        assert transport.in_flight == 0
        await async_wait_for(lambda: server.hung_up == 1, 5.0)


@pytest.mark.system
async def test_the_pool_timeout_bounds_the_wait_for_a_connection(guarded: MakeClient) -> None:
    async def serve(peer: Peer) -> None:
        if peer is server.peers[0]:
            await never_answer(peer)
        else:
            await keep_alive(answer(b"ok"))(peer)

    client, transport = guarded(limit_per_host=1)
    async with RawServer(serve) as server:
        held = asyncio.create_task(client.get(server.url(), timeout=httpx.Timeout(None)))
        await async_wait_for(lambda: len(server.requests) == 1, 5.0)
        with pytest.raises(httpx.PoolTimeout):
            await asyncio.wait_for(client.get(server.url(), timeout=httpx.Timeout(5.0, pool=0.2)), 5.0)
        assert transport.in_flight == 1 and server.connections == 1
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert transport.in_flight == 0
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"ok"  # the slot was freed
        assert server.connections == 2
    assert transport.in_flight == 0


# ---- the pool --------------------------------------------------------------------------------


@pytest.mark.system
async def test_an_idle_connection_is_closed_after_keepalive(guarded: MakeClient) -> None:
    client, _ = guarded(keepalive_s=0.2)
    async with RawServer(keep_alive(answer(b"ok"))) as server:
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"ok"
        await async_wait_for(lambda: server.hung_up == 1, 5.0)  # closed by the client's sweep
        assert (await asyncio.wait_for(client.get(server.url()), 5.0)).content == b"ok"
        assert server.connections == 2


@pytest.mark.system
async def test_the_global_limit_evicts_an_idle_connection_of_another_host(guarded: MakeClient) -> None:
    client, transport = guarded(limit=1)
    async with RawServer(keep_alive(answer(b"a"))) as a, RawServer(keep_alive(answer(b"b"))) as b:
        assert (await asyncio.wait_for(client.get(a.url()), 5.0)).content == b"a"
        assert (await asyncio.wait_for(client.get(b.url()), 5.0)).content == b"b"
        await async_wait_for(lambda: a.hung_up == 1, 5.0)
        assert b.hung_up == 0 and (await asyncio.wait_for(client.get(b.url()), 5.0)).content == b"b"
        assert b.connections == 1
    assert transport.in_flight == 0


@pytest.mark.system
async def test_a_request_queued_on_the_global_limit_gets_the_slot_of_a_connection_gone_idle(
    guarded: MakeClient,
) -> None:
    release = asyncio.Event()

    async def slow(peer: Peer) -> None:
        while await peer.request() is not None:
            await release.wait()
            await peer.send(answer(b"a"))

    client, transport = guarded(limit=1)
    async with RawServer(slow) as a, RawServer(keep_alive(answer(b"b"))) as b:
        first = asyncio.create_task(client.get(a.url()))
        await async_wait_for(lambda: len(a.requests) == 1, 5.0)
        queued = asyncio.create_task(client.get(b.url(), timeout=httpx.Timeout(5.0, pool=2.0)))
        await async_wait_for(lambda: transport.in_flight == 2, 5.0)  # the second waits for room
        release.set()
        assert (await asyncio.wait_for(first, 5.0)).content == b"a"
        assert (await asyncio.wait_for(queued, 5.0)).content == b"b"


# ---- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_tls(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.mark.system
async def test_https_requests_are_verified_and_kept_alive(guarded: MakeClient, ca: trustme.CA) -> None:
    client, transport = guarded(verify=trusting(ca))
    async with RawServer(keep_alive(answer(b"secure")), tls=server_tls(ca, "127.0.0.1")) as server:
        for _ in range(2):
            response = await asyncio.wait_for(client.post(server.url(), content=b"{}"), 5.0)
            assert response.status_code == 200 and response.content == b"secure"
        assert server.connections == 1 and len(server.requests) == 2
    assert transport.in_flight == 0


@pytest.mark.system
async def test_https_fails_to_connect_without_a_trusted_certificate(guarded: MakeClient, ca: trustme.CA) -> None:
    untrusting, _ = guarded()  # the system's CAs
    wrong_name, _ = guarded(verify=trusting(ca))
    async with RawServer(keep_alive(answer(b"secure")), tls=server_tls(ca, "127.0.0.1")) as server:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.wait_for(untrusting.get(server.url()), 5.0)
    async with RawServer(keep_alive(answer(b"secure")), tls=server_tls(ca, "localhost")) as other:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.wait_for(wrong_name.get(other.url()), 5.0)  # trusted CA, but not for 127.0.0.1
    assert server.requests == [] and other.requests == []


# ---- request_head ----------------------------------------------------------------------------


def test_request_head_serialises_the_request_line_and_headers() -> None:
    head = request_head(b"GET", b"/hook?a=1", [(b"Host", b"example.test"), (b"X-Tab", b"a\tb")], 0)
    assert head == b"GET /hook?a=1 HTTP/1.1\r\nHost: example.test\r\nX-Tab: a\tb\r\n\r\n"


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (b"POST", b"Content-Length: 0\r\n"),
        (b"PUT", b"Content-Length: 0\r\n"),
        (b"PATCH", b"Content-Length: 0\r\n"),
        (b"GET", b""),
        (b"HEAD", b""),
        (b"DELETE", b""),
        (b"OPTIONS", b""),
    ],
)
def test_request_head_sends_a_zero_length_only_for_methods_that_expect_a_body(method: bytes, expected: bytes) -> None:
    head = request_head(method, b"/", [(b"Host", b"h")], 0)
    assert head == method + b" / HTTP/1.1\r\nHost: h\r\n" + expected + b"\r\n"


def test_request_head_states_the_real_length_and_drops_the_callers_framing() -> None:
    headers = [(b"Host", b"h"), (b"content-length", b"99"), (b"Transfer-Encoding", b"chunked"), (b"X-A", b"1")]
    head = request_head(b"POST", b"/", headers, 5)
    assert head == b"POST / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nContent-Length: 5\r\n\r\n"
    assert request_head(b"GET", b"/", headers[:2], 3) == b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (b"Secret Name", b"v"),
        (b"Secret:", b"v"),
        (b"", b"Secret"),
        (b"Secret-\xe9", b"v"),
        (b"Secret\r\n", b"v"),
        (b"X-A", b"Secret\r\nInjected: 1"),
        (b"X-A", b"Secret\x00"),
        (b"X-A", b"Secret\x7f"),
        (b"X-A", b"Secret\x1b"),
    ],
)
def test_request_head_refuses_names_and_values_that_could_split_the_head(name: bytes, value: bytes) -> None:
    with pytest.raises(httpx.LocalProtocolError) as raised:
        request_head(b"GET", b"/", [(b"Host", b"h"), (name, value)], 0)
    assert "Secret" not in str(raised.value)  # a header may carry a secret: never quoted
