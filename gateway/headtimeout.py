"""The gateway's HTTP protocol on uvicorn: a deadline on request heads, one write per hook answer.

Slow-loris: uvicorn bounds idle keep-alive connections but not a request head that trickles in a byte
at a time, so a few hundred such connections hold the gateway's sockets for as long as
their clients like. This protocol starts a timer when a connection opens and when each
request begins (once the bytes it began in are parsed, and only if its head is not complete
by then), stops it when the head is complete, and closes the connection (counted in
``hookbus_request_head_timeouts_total``) when it fires first.

One write per hook answer: uvicorn writes a response's head when the app sends it and the
body when that comes, two ``write`` calls on the socket. ``POST /v1/hooks`` sends its body right
after its head, so for those requests the head is held and goes out with the body, in one
system call (the bytes on the wire are the same). Other endpoints (the console's event
stream sends its head long before its first event) write as uvicorn does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bus.runtime.metrics import Metrics, process_metrics

#: Seconds a client has to send a whole request head (line and headers).
HEAD_TIMEOUT_S = 5.0


class _HeadWithBody:
    """A request's view of its connection's transport: the response head, once written, is held
    until the next write (the body) or ``close`` and sent with it."""

    __slots__ = ("_cycle", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self._transport = transport
        self._cycle = cycle
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            # The head is out with this write: nothing more to hold, and no reference back to the
            # cycle (which holds this view), so the request's objects go by reference counting
            # instead of waiting, a cycle of ten objects each, for the garbage collector.
            data, self._held, self._cycle = self._held + data, None, None
        elif self._cycle is not None and self._cycle.response_started and not self._cycle.response_complete:
            # uvicorn writes the head once it has marked the response started (a 100 Continue
            # is written before that, and goes out at once).
            self._held = data
            return
        self._transport.write(data)

    def close(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            self._transport.write(data)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeadTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request head."""

    head_timeout_s = HEAD_TIMEOUT_S
    #: Where closed connections are counted: the gateway's metrics (set by :func:`gateway.server.serve`).
    metrics: Metrics | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        #: A request has begun whose head is not complete yet.
        self._head_open = False

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        (self.metrics or process_metrics()).head_timeouts.inc()
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # The timer of a request begun in these bytes starts only if its head did not come whole
        # with them (most heads do: no timer armed and cancelled for each of them).
        if self._head_open and self._head_timer is None and not self.transport.is_closing():
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._disarm()
        super().on_headers_complete()
        cycle = self.cycle
        scope = self.scope
        if cycle is not None and scope["path"] == "/v1/hooks" and scope["method"] == "POST":
            cycle.transport = _HeadWithBody(self.transport, cycle)  # type: ignore[assignment]


__all__ = ["HEAD_TIMEOUT_S", "HeadTimeoutProtocol"]
