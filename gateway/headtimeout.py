"""Closes connections whose request head does not arrive in time (slow-loris).

uvicorn bounds idle keep-alive connections but not a request head that trickles in a byte
at a time, so a few hundred such connections hold the gateway's sockets for as long as
their clients like. This protocol starts a timer when a connection opens and when each
request begins, stops it when the head is complete, and closes the connection (counted in
``hookbus_request_head_timeouts_total``) when it fires first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bus.runtime.metrics import Metrics, process_metrics

#: Seconds a client has to send a whole request head (line and headers).
HEAD_TIMEOUT_S = 5.0


class HeadTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request head."""

    head_timeout_s = HEAD_TIMEOUT_S
    #: Where closed connections are counted: the gateway's metrics (set by :func:`gateway.server.serve`).
    metrics: Metrics | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

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

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()


__all__ = ["HEAD_TIMEOUT_S", "HeadTimeoutProtocol"]
