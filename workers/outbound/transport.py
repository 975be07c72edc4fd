"""The outbound HTTP transport: httpx's transport API on a pool of HTTP/1.1 connections, behind the SSRF guard.

hookbus code talks to httpx (:mod:`workers.outbound.client`, the MCP client); underneath, each request
goes over a kept-alive :class:`workers.outbound.h1.H1Connection` (asyncio protocol, ``httptools``
parser). Measured side by side (``bench/http_transports.py``; BENCHMARKS.md §8, "Outbound
HTTP on hookbus's own HTTP/1.1 pool"), httpcore cost 1.1-1.7 ms of client CPU per hook
request (its pool polls every pooled socket for every request), ``httpx-aiohttp`` about
480 µs, and this pool through :func:`workers.outbound.client.guarded_request` about 150 µs: the
request is written in one call and a one-segment answer is parsed in the same callback that
receives it.

**The guard** is :mod:`bus.runtime.ssrf`'s, applied where connections are opened:

* every new connection resolves its host with :func:`bus.runtime.ssrf.resolve_checked` (a name with
  *any* blocked address is refused; no DNS cache) and connects to one of the *checked*
  addresses, never resolving again;
* every socket comes from :meth:`GuardedTransport.open_socket`, which checks the exact address
  it is about to connect to, so nothing connects to an address the guard has not seen;
* the pool is keyed by (scheme, host name, port), so a TLS connection verified for one name is
  never reused for another that shares its IP;
* no proxies, no redirects (a 3xx is returned as it is), no cookies, only ``http`` and ``https``;
* response bodies are capped at ``max_response_bytes``: a larger ``Content-Length`` fails
  before any body is read, a longer body fails once it passes the cap, and the connection is
  closed. Nothing is decompressed here; httpx decodes and :func:`workers.outbound.client.guarded_request`
  counts the decoded bytes too.

**Pools.** Connections are opened on demand up to ``limit_per_host`` per host and ``limit`` in
all (an idle connection of another host is closed to make room), and kept alive
``keepalive_s``: a busy hook server gets as many connections as it has requests in flight, an
idle one none. Requests beyond the limit wait for a connection of their host only. A request
whose kept-alive connection broke before any byte of an answer (typically one the server had
closed a moment before, its FIN not read yet) is sent once more on a new connection: a hook
request is a question, safe to repeat. httpx's ``timeout`` extension (connect, read, pool) is
honoured; :func:`workers.outbound.client.guarded_request` sends none and bounds the whole exchange
with one deadline instead.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx

from bus.errors import ResponseTooLarge, SSRFBlocked
from bus.runtime.ssrf import IPNetwork, blocked_reason, resolve_checked
from workers.outbound.h1 import H1Connection, request_head

#: Connections in all, and per host (scheme, host, port).
POOL_LIMIT = 100
POOL_LIMIT_PER_HOST = 32
KEEPALIVE_S = 30.0
_ALLOW_HINT = "(allow it with hookbus.http.allowedNetworks)"
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Replaced transports being closed (the loop keeps only weak references to tasks).
_CLOSING: set[asyncio.Task[None]] = set()

Origin = tuple[str, str, int]


class _Host:
    """The connections of one origin: idle ones (most recent last), how many are open, who waits."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[H1Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()


class _Deadline:
    """``asyncio.timeout(seconds)`` whose expiry raises httpx's ``error`` (nothing at all for None)."""

    __slots__ = ("_error", "_seconds", "_timeout")

    def __init__(self, seconds: float | None, error: type[httpx.TimeoutException]) -> None:
        self._seconds, self._error = seconds, error
        self._timeout: asyncio.Timeout | None = None

    async def __aenter__(self) -> None:
        if self._seconds is not None:
            self._timeout = asyncio.timeout(self._seconds)
            await self._timeout.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._timeout is None:
            return
        try:
            await self._timeout.__aexit__(*exc_info)
        except TimeoutError as exc:
            raise self._error(f"no answer within {self._seconds:.3g}s") from exc


class Buffered(httpx.AsyncByteStream):
    """A body read in full before the response was returned (its connection is back in the pool).

    ``body`` is the raw body, under the size cap; ``Content-Encoding`` is not undone here.
    """

    def __init__(self, body: bytes, on_close: Callable[[], None]) -> None:
        self.body, self._on_close, self._closed = body, on_close, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.body:
            yield self.body

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close()


class _Streamed(httpx.AsyncByteStream):
    """A body read from its connection as it arrives, failing with ResponseTooLarge past ``cap`` bytes."""

    def __init__(
        self, conn: H1Connection, cap: int, read_s: float | None, on_close: Callable[[H1Connection], None]
    ) -> None:
        self._conn, self._cap, self._read_s, self._on_close = conn, cap, read_s, on_close
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        chunks = self._conn.body()
        try:
            while True:
                async with _Deadline(self._read_s, httpx.ReadTimeout):
                    chunk = await anext(chunks, None)
                if chunk is None:
                    return
                seen += len(chunk)
                if seen > self._cap:
                    raise ResponseTooLarge(f"response body over {self._cap} bytes; stopped reading")
                yield chunk
        except BaseException:
            self._conn.close()
            raise
        finally:
            await chunks.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self._conn)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport on pooled HTTP/1.1 connections, with the SSRF guard and a response size cap."""

    def __init__(
        self,
        allowed: Sequence[IPNetwork] = (),
        *,
        max_response_bytes: int = 1 << 20,
        limit: int = POOL_LIMIT,
        limit_per_host: int = POOL_LIMIT_PER_HOST,
        keepalive_s: float = KEEPALIVE_S,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.allowed = tuple(allowed)
        self.max_response_bytes = max_response_bytes
        self.limit, self.limit_per_host, self.keepalive_s = limit, limit_per_host, keepalive_s
        self.ssl_context = (
            verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify, trust_env=False)
        )
        self._hosts: dict[Origin, _Host] = {}
        self._open = 0
        self._in_flight = 0
        self._closed = False
        self._retired = False
        self._closer: asyncio.Task[None] | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    def open_socket(self, addr_info: Any) -> socket.socket:
        """A socket for ``addr_info`` (a ``getaddrinfo`` row) if the guard allows its address."""
        family, type_, proto, _, address = addr_info
        ip = ipaddress.ip_address(address[0])
        reason = blocked_reason(ip, self.allowed)
        if reason is not None:
            raise SSRFBlocked(f"SSRF guard refused {ip}: {reason} {_ALLOW_HINT}")
        return socket.socket(family=family, type=type_, proto=proto)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the guarded pool; its body is capped at ``max_response_bytes``."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise SSRFBlocked(f"SSRF guard refused scheme {url.scheme!r}: only http and https")
        if self._closed or self._closer is not None:
            raise httpx.TransportError("this transport has been closed")
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        head_only = request.method == "HEAD"
        data = request_head(request.method.encode("ascii"), url.raw_path, request.headers.raw, len(body)) + body
        # The ASCII (IDNA) form of the name: what is resolved, checked and verified by TLS.
        origin = (url.scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[url.scheme])
        timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
        self._in_flight += 1
        try:
            conn = await self._exchange(origin, data, head_only, timeouts)
            declared = next((value for name, value in conn.headers if name.lower() == b"content-length"), b"")
            if declared.isdigit() and int(declared) > self.max_response_bytes:
                conn.close()
                self._finish(origin, conn)
                raise ResponseTooLarge(
                    f"response body of {declared.decode()} bytes is over {self.max_response_bytes} bytes"
                )
            stream: httpx.AsyncByteStream
            if conn.complete:  # the usual hook answer: it came in one piece, the connection is free again
                content = conn.body_bytes()
                self._finish(origin, conn)
                if len(content) > self.max_response_bytes:
                    raise ResponseTooLarge(f"response body over {self.max_response_bytes} bytes; stopped reading")
                stream = Buffered(content, self._done)
            else:
                stream = _Streamed(
                    conn, self.max_response_bytes, timeouts.get("read"), lambda c: self._finish(origin, c, done=True)
                )
        except BaseException:
            self._done()
            raise
        return httpx.Response(
            conn.status_code,
            headers=conn.headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason},
        )

    @property
    def in_flight(self) -> int:
        """Requests sent whose response has not been closed yet."""
        return self._in_flight

    @property
    def closing(self) -> bool:
        """Whether this transport has started closing (a replaced client whose last request finished)."""
        return self._closer is not None

    def close_when_idle(self) -> None:
        """Close the pool as soon as no request is in flight (a replaced client)."""
        self._retired = True
        self._maybe_close()

    async def aclose(self) -> None:
        """Close every idle connection now, and every busy one when its response is closed."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for origin, host in list(self._hosts.items()):
            idle, host.idle = host.idle, []
            for conn in idle:
                self._discard(origin, conn)
            while host.waiters:
                self._wake(host)

    # ---- one exchange

    async def _exchange(
        self, origin: Origin, data: bytes, head_only: bool, timeouts: dict[str, float | None]
    ) -> H1Connection:
        """A connection that has sent ``data`` and read the response's head."""
        for attempt in (1, 2):
            conn, reused = await self._acquire(origin, timeouts)
            try:
                conn.send(data, head_only=head_only)
                async with _Deadline(timeouts.get("read"), httpx.ReadTimeout):
                    await conn.read_head()
            except httpx.RemoteProtocolError:
                conn.close()
                self._finish(origin, conn)
                if reused and not conn.received and attempt == 1:
                    continue  # a kept-alive connection the server had closed: once more, on a new one
                raise
            except BaseException:
                conn.close()
                self._finish(origin, conn)
                raise
            return conn
        raise AssertionError("unreachable")

    async def _acquire(self, origin: Origin, timeouts: dict[str, float | None]) -> tuple[H1Connection, bool]:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise httpx.TransportError("this transport has been closed")
            host = self._hosts.get(origin)  # looked up each turn: an origin without connections is dropped
            if host is None:
                host = self._hosts[origin] = _Host()
            while host.idle:
                conn = host.idle.pop()
                if self._stale(conn, loop.time()):
                    self._discard(origin, conn)
                    continue
                return conn, True
            if host.open < self.limit_per_host and (self._open < self.limit or self._evict_idle()):
                host.open += 1
                self._open += 1
                try:
                    async with _Deadline(timeouts.get("connect"), httpx.ConnectTimeout):
                        return await self._connect(origin), False
                except BaseException:
                    self._closed_one(origin, host)
                    raise
            await self._queue(host, timeouts.get("pool"))

    async def _queue(self, host: _Host, pool_s: float | None) -> None:
        waiter = asyncio.get_running_loop().create_future()
        host.waiters.append(waiter)
        try:
            async with _Deadline(pool_s, httpx.PoolTimeout):
                await waiter
        except BaseException:
            if waiter in host.waiters:
                host.waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._wake(host)  # woken and gone: the turn passes to the next
            raise

    async def _connect(self, origin: Origin) -> H1Connection:
        scheme, name, port = origin
        loop = asyncio.get_running_loop()
        addresses = await resolve_checked(name, port, self.allowed)  # each new connection checks again
        failure: OSError | None = None
        for ip in addresses:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            address = (str(ip), port)
            try:
                sock = self.open_socket((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address))
            except OSError as exc:
                failure = exc
                continue
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, address)
                tls = self.ssl_context if scheme == "https" else None
                _, conn = await loop.create_connection(
                    H1Connection, sock=sock, ssl=tls, server_hostname=name if tls else None
                )
                return conn
            except OSError as exc:
                sock.close()
                failure = exc
            except BaseException:
                sock.close()
                raise
        reason = (failure.strerror or str(failure)) if failure else "no address"
        raise httpx.ConnectError(f"cannot connect to {name}:{port}: {reason}") from failure

    # ---- the pool's bookkeeping

    def _finish(self, origin: Origin, conn: H1Connection, *, done: bool = False) -> None:
        """A response is handled: its connection goes back to the pool, or is closed."""
        conn.release()
        host = self._hosts.get(origin)
        if host is not None and conn.reusable and not self._closed:
            conn.idle_since = asyncio.get_running_loop().time()
            host.idle.append(conn)
            if self._sweeper is None:
                self._sweeper = asyncio.get_running_loop().call_later(self.keepalive_s, self._sweep)
            if host.waiters:
                self._wake(host)
            elif self._open >= self.limit:
                self._wake_another()  # at the limit in all: a request of another host may evict this one
        else:
            self._discard(origin, conn)
        if done:
            self._done()

    def _discard(self, origin: Origin, conn: H1Connection) -> None:
        conn.close()
        host = self._hosts.get(origin)
        if host is not None:
            self._closed_one(origin, host)

    def _closed_one(self, origin: Origin, host: _Host) -> None:
        host.open -= 1
        self._open -= 1
        if host.waiters:
            self._wake(host)
        else:
            self._wake_another()  # room in all: whoever waits on another host
            if not host.open and not host.idle:
                del self._hosts[origin]

    def _wake_another(self) -> None:
        for other in self._hosts.values():
            if other.waiters:
                self._wake(other)
                return

    def _evict_idle(self) -> bool:
        """Close one idle connection of any host to make room; False if none is idle."""
        for origin, host in self._hosts.items():
            if host.idle:
                self._discard(origin, host.idle.pop(0))
                return True
        return False

    @staticmethod
    def _wake(host: _Host) -> None:
        while host.waiters:
            waiter = host.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for origin, host in list(self._hosts.items()):
            stale = [c for c in host.idle if self._stale(c, now)]
            if stale:
                host.idle = [c for c in host.idle if not self._stale(c, now)]
                for conn in stale:
                    self._discard(origin, conn)
        oldest = min((c.idle_since for h in self._hosts.values() for c in h.idle), default=None)
        if oldest is not None:
            self._sweeper = asyncio.get_running_loop().call_later(
                max(oldest + self.keepalive_s - now, 0.01), self._sweep
            )

    def _stale(self, conn: H1Connection, now: float) -> bool:
        """Whether an idle connection is closed or past its keep-alive."""
        return conn.closed or now - conn.idle_since >= self.keepalive_s

    def _done(self) -> None:
        self._in_flight -= 1
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._retired and self._in_flight == 0 and self._closer is None:
            try:
                self._closer = asyncio.get_running_loop().create_task(self.aclose())
            except RuntimeError:  # no loop: nothing can be in flight either
                return
            _CLOSING.add(self._closer)
            self._closer.add_done_callback(_CLOSING.discard)


__all__ = ["KEEPALIVE_S", "POOL_LIMIT", "POOL_LIMIT_PER_HOST", "Buffered", "GuardedTransport"]
