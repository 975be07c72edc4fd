"""A small open-loop / closed-loop HTTP/1.1 load generator on a raw asyncio protocol.

httpx costs more CPU per request than the gateway it would measure; on a 2-core machine the
load generator must be cheap, so this speaks just enough HTTP/1.1 (keep-alive,
Content-Length bodies) to drive ``POST /v1/hooks``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable


class _Http1(asyncio.Protocol):
    """The client side of one keep-alive connection: one request at a time, the answer parsed
    as it arrives (no stream reader, no task: a future per request)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.head = b""
        self.length = 0
        self.waiter: asyncio.Future[tuple[bytes, bytes]] | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.head:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head = bytes(self.buffer[: end + 4])
            del self.buffer[: end + 4]
            at = self.head.lower().find(b"\r\ncontent-length:")
            self.length = int(self.head[at + 17 : self.head.index(b"\r\n", at + 2)]) if at >= 0 else 0
        if len(self.buffer) < self.length:
            return
        body = bytes(self.buffer[: self.length])
        del self.buffer[: self.length]
        head, self.head = self.head, b""
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((head, body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("the server closed the connection")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(asyncio.IncompleteReadError(bytes(self.buffer), None))


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._protocol: _Http1 | None = None

    async def open(self) -> Connection:
        _, self._protocol = await asyncio.get_running_loop().create_connection(_Http1, self.host, self.port)
        return self

    async def post(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes]:
        status, _, payload = await self.post_head(path, body, headers)
        return status, payload

    async def post_head(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes, bytes]:
        """``(status, response head, body)``."""
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        if protocol.lost is not None:
            raise protocol.lost
        protocol.waiter = waiter = asyncio.get_running_loop().create_future()
        protocol.transport.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\nHost: "
            + self.host.encode()
            + b"\r\nContent-Type: application/json\r\n"
            + headers
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        head, payload = await waiter
        return int(head[9:12]), head, payload

    async def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(latencies_s: list[float]) -> dict[str, float]:
    return {
        "n": len(latencies_s),
        "p50_ms": percentile(latencies_s, 0.50) * 1000,
        "p99_ms": percentile(latencies_s, 0.99) * 1000,
        "max_ms": max(latencies_s) * 1000,
        "mean_ms": statistics.fmean(latencies_s) * 1000,
    }


Call = Callable[[int], Awaitable[object]]


async def steady_rate(
    make_call: Callable[[], Awaitable[Call]], rate_per_s: float, duration_s: float, connections: int = 32
) -> list[float]:
    """Open loop: start one request every 1/rate seconds.

    Latency runs from the moment the request is written. The event loop's timers have a
    resolution of about a millisecond, so counting from the *scheduled* time would charge the
    load generator's own wake-up lateness to the server; :data:`LAG` records that lateness so
    a report can show the generator kept to its schedule.
    """
    calls = [await make_call() for _ in range(connections)]
    free: asyncio.Queue[Call] = asyncio.Queue()
    for call in calls:
        free.put_nowait(call)
    latencies: list[float] = []
    LAG.clear()
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    total = int(rate_per_s * duration_s)

    async def one(i: int, scheduled: float) -> None:
        call = await free.get()
        try:
            sent = time.perf_counter()
            LAG.append(sent - scheduled)
            await call(i)
        finally:
            free.put_nowait(call)
        latencies.append(time.perf_counter() - sent)

    for i in range(total):
        scheduled = start + i / rate_per_s
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    return latencies


#: How late each request of the last :func:`steady_rate` run left, in seconds.
LAG: list[float] = []


async def saturate(
    make_call: Callable[[], Awaitable[Call]], concurrency: int, duration_s: float
) -> tuple[int, float, list[float]]:
    """Closed loop: ``concurrency`` workers back to back; returns (completed, seconds, latencies)."""
    calls = [await make_call() for _ in range(concurrency)]
    done = 0
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration_s

    async def worker(call: Call, offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - t0)
            done += 1
            i += concurrency

    started = time.perf_counter()
    await asyncio.gather(*(worker(call, n) for n, call in enumerate(calls)))
    return done, time.perf_counter() - started, latencies
