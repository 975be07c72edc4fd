"""One HTTP/1.1 client connection: an asyncio protocol that writes a request and parses its
response with ``httptools`` (llhttp, the parser uvicorn serves with).

:mod:`workers.outbound.transport` owns the pool, the SSRF guard and the httpx interface; this module
knows only the wire. A connection carries one request at a time:

* :meth:`H1Connection.send` writes the request (head and body in one write);
* :meth:`H1Connection.read_head` waits for the status line and headers (``1xx`` interim
  responses are skipped);
* :meth:`H1Connection.body` yields the body as it arrives, framed by ``Content-Length``,
  chunked encoding or, for a response with neither, the end of the connection;
* :attr:`H1Connection.reusable` says whether it may carry another request (the response was
  read to its end, the server did not ask to close, and the socket is still open).

A response that arrives in one segment, the common case for hook answers, is complete when
:meth:`read_head` returns: :attr:`H1Connection.complete` is set and :meth:`body_bytes` has it
all, without another wake-up. Errors are httpx's, and never quote the request.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncGenerator

import httptools
import httpx

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")
#: Request headers the connection sets itself from the body it is given.
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})
_NO_BODY_STATUSES = frozenset({204, 304})


def request_head(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body_length: int) -> bytes:
    """The request line and headers; ``LocalProtocolError`` for a name or value that could split them."""
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if not _valid_field(name, value):
            raise httpx.LocalProtocolError("invalid header name or value")  # never quote it: it may be a secret
        if name.lower() not in _FRAMING:
            lines += (name, b": ", value, b"\r\n")
    if body_length or method not in (b"GET", b"HEAD", b"DELETE", b"OPTIONS"):
        lines += (b"Content-Length: ", str(body_length).encode(), b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


@functools.lru_cache(maxsize=1024)
def _valid_field(name: bytes, value: bytes) -> bool:
    # A hook's headers are the same on every call: each pair is checked once.
    return bool(_TOKEN.fullmatch(name) and _FIELD_VALUE.fullmatch(value))


class H1Connection(asyncio.Protocol):
    """An HTTP/1.1 connection to one host (see the module docstring)."""

    # What one request's answer fills in (:meth:`_expect` resets it for the next).
    status_code: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    complete: bool
    received: bool
    _chunks: list[bytes]
    _head_only: bool
    _has_head: bool
    _interim: bool
    _framed: bool
    _keep_alive: bool

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._error: httpx.TransportError | None = None
        self._active = False
        self._out_of_turn = False
        self.closed = False
        self.idle_since = 0.0
        self._expect(head_only=False)

    # ---- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's is not a subclass)

    def data_received(self, data: bytes) -> None:
        if not self._active or self.complete:  # a server that talks out of turn is not reused
            self.close()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            if not self.complete:
                self._fail(httpx.RemoteProtocolError(f"invalid HTTP response: {exc}"))
            self._out_of_turn = True
        if self._out_of_turn:  # bytes after the answer, in the same segment: keep the answer, drop the connection
            self.close()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._active and not self.complete:
            if self._has_head and not self._framed and exc is None:
                self._finish()  # the body ran to the end of the connection (a reset cuts it short instead)
            elif self._has_head:
                self._fail(httpx.RemoteProtocolError("Server disconnected before the response was complete"))
            else:
                self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response"))

    # ---- httptools' callbacks

    def on_status(self, status: bytes) -> None:
        if self.complete:
            self._out_of_turn = True
            return
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._interim = True
            return
        self.status_code = status
        self._has_head = True
        self._framed = status in _NO_BODY_STATUSES or any(name.lower() in _FRAMING for name, _ in self.headers)
        if self._head_only:
            self._finish()
        else:
            self._wake()

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self._chunks.append(body)
            self._wake()

    def on_message_complete(self) -> None:
        if self.complete:
            self._out_of_turn = True
            return
        if self._interim:  # a 1xx answer: the real one follows on the same connection
            self._interim = False
            self.headers, self.reason = [], b""
            return
        self._keep_alive = self._parser.should_keep_alive()  # llhttp forgets it once this callback returns
        self._finish()

    # ---- the transport's side

    @property
    def reusable(self) -> bool:
        """Whether another request may follow on this connection."""
        return self.complete and not self.closed and self._error is None and not self._head_only and self._keep_alive

    def send(self, data: bytes, *, head_only: bool = False) -> None:
        """Write one request (``head_only`` for ``HEAD``: its answer has headers only)."""
        assert self._transport is not None and not self._active
        self._active = True
        self._expect(head_only=head_only)
        self._transport.write(data)

    async def read_head(self) -> None:
        """Wait for the response's status line and headers."""
        while not self._has_head:
            await self._wait()

    def body_bytes(self) -> bytes:
        """The body of a :attr:`complete` response."""
        body = b"".join(self._chunks)
        self._chunks = []
        return body

    async def body(self) -> AsyncGenerator[bytes, None]:
        """The body's chunks as they arrive."""
        while True:
            if self._chunks:
                chunks, self._chunks = self._chunks, []
                for chunk in chunks:
                    yield chunk
            elif self.complete:
                return
            else:
                await self._wait()

    def release(self) -> None:
        """The response has been handled: the connection may carry the next request."""
        self._active = False

    def close(self) -> None:
        """Close the socket (safe to call twice)."""
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # ---- internals

    def _expect(self, *, head_only: bool) -> None:
        """Forget the previous answer: the state one request's answer fills in."""
        self._head_only = head_only
        self._has_head = self._interim = self._framed = self._keep_alive = False
        self.complete = self.received = False
        self.status_code, self.reason = 0, b""
        self.headers = []
        self._chunks = []

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _finish(self) -> None:
        self.complete = True
        self._wake()

    def _fail(self, error: httpx.TransportError) -> None:
        if self._error is None:
            self._error = error
        self.close()
        self._wake()


__all__ = ["H1Connection", "request_head"]
