"""The outbound HTTP transport: httpx's transport API on aiohttp's connection pool, behind the SSRF guard.

hookbus code talks to httpx (:mod:`workers.outbound`, the MCP client); underneath, requests
go through aiohttp's connector (``httpx-aiohttp``). On this path httpcore cost about 1 ms of
CPU per request (its pool polls every pooled socket for every request it assigns, and HTTP/2
through ``h2`` still cost about 0.5 ms); aiohttp's C-accelerated parser and O(1) per-host
pools cost a fraction of that (BENCHMARKS.md, "Outbound HTTP transports").

**The guard** is :mod:`bus.ssrf`'s, applied where connections are opened:

* host names are resolved by :class:`GuardedResolver` with :func:`bus.ssrf.resolve_checked`
  (a name with *any* blocked address is refused), with no DNS cache: each new connection
  resolves and checks again;
* every socket aiohttp opens comes from :meth:`GuardedAiohttpTransport.open_socket`, which
  checks the exact address it is about to connect to (IP literals never reach a resolver),
  so nothing connects to an address the guard has not seen;
* the pool is keyed by host name (aiohttp's connection key), so a TLS connection verified for
  one name is never reused for another that shares its IP;
* no proxies (no proxy is ever passed, ``trust_env=False``), no redirects, no cookie jar, no
  Unix sockets, only ``http`` and ``https``;
* response bodies are capped at ``max_response_bytes`` (a larger ``Content-Length`` fails
  before any body is read, the stream is counted); aiohttp does not decompress, so httpx
  decodes and :func:`workers.outbound.guarded_request` counts the decoded bytes too.

**Pools.** Connections are opened on demand up to ``limit_per_host`` per host (and ``limit``
in all) and kept alive ``keepalive_s``: a busy hook server gets as many connections as it has
requests in flight, an idle one none; requests beyond the limit wait for a connection of
their host only. A request whose connection breaks before any answer (typically a kept-alive
connection the server closed a moment before) is sent once more on a new connection: aiohttp
does that only for idempotent methods, and a hook request is a question, safe to repeat.
aiohttp's errors are mapped to httpx's (:func:`httpx_error`), without the request's URL.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp import AiohttpTransport

from bus.errors import HookError
from bus.ssrf import IPNetwork, ResponseTooLarge, SSRFBlocked, blocked_reason, resolve_checked

#: Connections in all, and per host (scheme, host, port).
POOL_LIMIT = 100
POOL_LIMIT_PER_HOST = 32
KEEPALIVE_S = 30.0
_ALLOW_HINT = "(allow it with hookbus.http.allowedNetworks)"
#: Replaced transports being closed (the loop keeps only weak references to tasks).
_CLOSING: set[asyncio.Task[None]] = set()


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver interface over :func:`bus.ssrf.resolve_checked`: only checked addresses come back."""

    def __init__(self, allowed: Sequence[IPNetwork] = ()) -> None:
        self.allowed = tuple(allowed)

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        """The checked addresses of ``host``; SSRFBlocked or ResolveError otherwise."""
        addresses = await resolve_checked(host, port, self.allowed)
        return [ResolveResult(hostname=host, host=str(ip), port=port,
                              family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for ip in addresses]

    async def close(self) -> None:
        """Nothing to release."""


def httpx_error(exc: BaseException) -> BaseException:
    """The httpx exception for an aiohttp one (hookbus's own errors and others pass through)."""
    if isinstance(exc, HookError | httpx.HTTPError) or not isinstance(exc, aiohttp.ClientError | TimeoutError):
        return exc
    text = _text(exc)
    mapped: Exception
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        mapped = httpx.ConnectTimeout(text)
    elif isinstance(exc, TimeoutError):
        mapped = httpx.ReadTimeout(text)
    elif isinstance(exc, aiohttp.ClientConnectorError):
        mapped = httpx.ConnectError(text)
    elif isinstance(exc, aiohttp.InvalidURL):
        mapped = httpx.InvalidURL(text)
    elif isinstance(exc, aiohttp.NonHttpUrlClientError):
        mapped = httpx.UnsupportedProtocol(text)
    elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError | aiohttp.ClientPayloadError):
        mapped = httpx.RemoteProtocolError(text)
    else:
        mapped = httpx.ReadError(text)
    mapped.__cause__ = exc
    return mapped


def _text(exc: BaseException) -> str:
    """What went wrong, without the request's URL (its path or query may hold a secret)."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return exc.message or type(exc).__name__
    if isinstance(exc, aiohttp.InvalidURL):
        return exc.description or "invalid URL"
    return str(exc) or type(exc).__name__


def _unwrap(exc: BaseException) -> BaseException:
    """httpx-aiohttp's mapping of aiohttp's errors undone (it files a dropped connection as a timeout)."""
    cause = exc.__cause__
    if isinstance(exc, httpx.HTTPError) and isinstance(cause, aiohttp.ClientError | TimeoutError):
        return httpx_error(cause)
    return httpx_error(exc)


def _stale(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection broke before any answer: most often a kept-alive one the
    server had closed a moment before (its FIN not read yet), so one retry on a new connection is due."""
    cause = exc.__cause__ if isinstance(exc, httpx.HTTPError) else exc
    return isinstance(cause, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) and not isinstance(
        cause, aiohttp.ClientConnectorError)


class _CappedStream(httpx.AsyncByteStream):
    """A response body that fails with ResponseTooLarge once it passes ``cap`` bytes."""

    def __init__(self, inner: httpx.AsyncByteStream, cap: int, on_close: Callable[[], None]) -> None:
        self._inner, self._cap, self._on_close = inner, cap, on_close
        self._seen = 0
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._seen += len(chunk)
                if self._seen > self._cap:
                    raise ResponseTooLarge(f"response body over {self._cap} bytes; stopped reading")
                yield chunk
        except (aiohttp.ClientError, TimeoutError, httpx.HTTPError) as exc:
            mapped = _unwrap(exc)
            if mapped is exc:
                raise
            raise mapped from mapped.__cause__

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._inner.aclose()
        finally:
            self._on_close()


class GuardedAiohttpTransport(AiohttpTransport):
    """An httpx transport on aiohttp's connector with the SSRF guard and a response size cap."""

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
        context = httpx.create_ssl_context(verify=verify, trust_env=False)
        super().__init__(verify=context, trust_env=False, client=self._new_session,
                         limits=httpx.Limits(max_connections=limit, keepalive_expiry=keepalive_s))
        self.allowed = tuple(allowed)
        self.max_response_bytes = max_response_bytes
        self.limit, self.limit_per_host, self.keepalive_s = limit, limit_per_host, keepalive_s
        self._in_flight = 0
        self._retired = False
        self._closer: asyncio.Task[None] | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        # Created on the first request, inside the running loop (aiohttp binds a session to it).
        connector = aiohttp.TCPConnector(
            limit=self.limit, limit_per_host=self.limit_per_host, keepalive_timeout=self.keepalive_s,
            use_dns_cache=False, resolver=GuardedResolver(self.allowed), socket_factory=self.open_socket,
            happy_eyeballs_delay=None, ssl=self.ssl_context,
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                                     trust_env=False)

    def open_socket(self, addr_info: Any) -> socket.socket:
        """aiohttp's socket factory: a socket for ``addr_info`` if the guard allows its address."""
        family, type_, proto, _, address = addr_info
        ip = ipaddress.ip_address(address[0])
        reason = blocked_reason(ip, self.allowed)
        if reason is not None:
            raise SSRFBlocked(f"SSRF guard refused {ip}: {reason} {_ALLOW_HINT}")
        return socket.socket(family=family, type=type_, proto=proto)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the guarded pool; its body is capped at ``max_response_bytes``."""
        if request.url.scheme not in ("http", "https"):
            raise SSRFBlocked(f"SSRF guard refused scheme {request.url.scheme!r}: only http and https")
        if self._retired and self._closer is not None:
            raise httpx.TransportError("this transport has been closed")
        self._in_flight += 1
        try:
            try:
                try:
                    response = await super().handle_async_request(request)
                except (aiohttp.ClientError, httpx.HTTPError) as exc:
                    if not _stale(exc):
                        raise
                    response = await super().handle_async_request(request)  # once more, on a new connection
            except (aiohttp.ClientError, TimeoutError, httpx.HTTPError) as exc:
                mapped = _unwrap(exc)
                if mapped is exc:
                    raise
                raise mapped from mapped.__cause__
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_response_bytes:
                await response.aclose()
                raise ResponseTooLarge(f"response body of {declared} bytes is over {self.max_response_bytes} bytes")
        except BaseException:
            self._done()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self.max_response_bytes, self._done)
        return response

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


__all__ = ["POOL_LIMIT", "POOL_LIMIT_PER_HOST", "GuardedAiohttpTransport", "GuardedResolver", "httpx_error"]
