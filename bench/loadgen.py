"""A small open-loop / closed-loop HTTP/1.1 load generator on raw asyncio streams.

httpx costs more CPU per request than the gateway it would measure; on a 2-core machine the
load generator must be cheap, so this speaks just enough HTTP/1.1 (keep-alive,
Content-Length bodies) to drive ``POST /v1/hooks``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def post(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host.encode()
            + b"\r\nContent-Type: application/json\r\n" + headers
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


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


async def steady_rate(make_call: Callable[[], Awaitable[Call]], rate_per_s: float, duration_s: float,
                      connections: int = 32) -> list[float]:
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
