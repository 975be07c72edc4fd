"""Outbound HTTP transports side by side: ``python bench/http_transports.py``.

The request an ``http`` hook makes (a ~300-byte JSON POST, an empty 200 back) to a loopback
hook server in a process of its own, through each candidate:

* ``httpcore`` (httpx's default engine): pools of 16 and 64 connections; the same with
  httpcore's per-request pool scan taken out (a bench-only backend whose sockets never report
  readable, which is unsafe to ship: a connection the server closed would be reused); HTTP/2
  to an h2c server (``h2``);
* aiohttp through ``httpx-aiohttp`` (the engine hookbus used before its own pool), and
  aiohttp's ``ClientSession`` alone;
* :class:`workers.outbound.transport.GuardedTransport` (pooled HTTP/1.1 connections, ``httptools``
  parser, SSRF guard with ``127.0.0.0/8`` allowed): through ``AsyncClient.send``, and through
  :func:`workers.outbound.client.guarded_request` as shipped, with per-host pools of 4, 16, 32 and 64.

The httpcore and aiohttp rows have no SSRF guard, so they are each engine's floor.

For each: throughput and the client's CPU per request with 16 requests in flight (closed
loop), and p50/p99 at a fixed rate (open loop, latency from the write). The client's CPU per
request is the figure that decides a dispatcher's throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import httpcore
import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import percentile
from httpx_aiohttp import AiohttpTransport

from bus.policy.loading import policy_from_text
from bus.runtime.ssrf import parse_networks
from hookbus.platform.redis_server import free_port
from workers.outbound.client import USER_AGENT, GuardedClient, guarded_request
from workers.outbound.transport import GuardedTransport
from workers.services import Services

ROOT = Path(__file__).resolve().parent.parent
BODY = (
    b'{"session_id":"bench-1","transcript_path":"/home/dev/.claude/projects/bench/session.jsonl",'
    b'"cwd":"/home/dev/project","permission_mode":"default","hook_event_name":"PreToolUse",'
    b'"tool_name":"Bash","tool_input":{"command":"ls -la src/mod1","description":"bench"},'
    b'"tool_use_id":"toolu_00000001"}'
)
HEADERS = {"Content-Type": "application/json"}
ALLOWED = parse_networks(["127.0.0.0/8"])
One = Callable[[], Awaitable[None]]


class _NoPollStream(httpcore.AsyncNetworkStream):
    """A socket stream that never reports readable: httpcore's per-request pool scan becomes free."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self.inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self.inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def get_extra_info(self, info: str) -> Any:
        return False if info == "is_readable" else self.inner.get_extra_info(info)


class _NoPollBackend(httpcore.AnyIOBackend):
    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _NoPollStream(await super().connect_tcp(*args, **kwargs))


def httpcore_transport(pool: int, *, no_poll: bool = False, http2: bool = False) -> httpx.AsyncHTTPTransport:
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool, keepalive_expiry=30.0)
    transport = httpx.AsyncHTTPTransport(limits=limits, http1=not http2, http2=http2)  # http2 alone: h2c
    if no_poll:
        transport._pool = httpcore.AsyncConnectionPool(
            max_connections=pool,
            max_keepalive_connections=pool,
            keepalive_expiry=30.0,
            retries=0,
            network_backend=_NoPollBackend(),
        )
    return transport


def via_client(transport: httpx.AsyncBaseTransport, url: str) -> tuple[One, Callable[[], Awaitable[None]]]:
    """What hookbus's outbound path did before: build_request + AsyncClient.send, body streamed."""
    client = httpx.AsyncClient(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
    )
    slots = asyncio.Semaphore(16)

    async def one() -> None:
        async with slots:
            request = client.build_request("POST", url, content=BODY, headers=HEADERS, timeout=httpx.Timeout(5.0))
            response = await client.send(request, stream=True)
            try:
                async for _ in response.aiter_bytes():
                    pass
            finally:
                await response.aclose()
            if response.status_code != 200:
                raise RuntimeError(f"hook server answered {response.status_code}")

    return one, client.aclose


def via_guarded_request(url: str, per_host: int) -> tuple[One, Callable[[], Awaitable[None]]]:
    """The shipped path: workers.outbound.client.guarded_request on workers.outbound.transport.GuardedTransport."""
    policy = policy_from_text("hookbus: {http: {allowedNetworks: ['127.0.0.0/8']}}\n")
    services = Services(settings=None)  # type: ignore[arg-type]  # the outbound path reads no setting
    client = GuardedClient((("127.0.0.0/8",), policy.settings.http.max_response_bytes))
    client.guard.limit_per_host = per_host
    services.http_client = client

    async def one() -> None:
        response = await guarded_request(services, policy, "POST", url, content=BODY, headers=HEADERS, timeout_s=5.0)
        if response.status_code != 200:
            raise RuntimeError(f"hook server answered {response.status_code}")

    return one, client.aclose


def via_aiohttp(url: str) -> tuple[One, Callable[[], Awaitable[None]]]:
    session: aiohttp.ClientSession | None = None

    async def one() -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit_per_host=32),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
        async with session.post(url, data=BODY, headers=HEADERS) as response:
            await response.read()

    async def close() -> None:
        if session is not None:
            await session.close()

    return one, close


async def closed_loop(
    one: One, seconds: float, concurrency: int = 16, max_requests: int = 200_000
) -> tuple[float, float]:
    """(requests/s, client CPU µs per request) with ``concurrency`` requests in flight."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at and done < max_requests:
            await one()
            done += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return done / wall, cpu / max(done, 1) * 1e6


async def open_loop(one: One, rate_per_s: float, seconds: float) -> tuple[float, float]:
    """(p50 ms, p99 ms) at ``rate_per_s``, latency from the moment each request starts."""
    latencies: list[float] = []
    tasks = []
    start = time.perf_counter()

    async def timed() -> None:
        t0 = time.perf_counter()
        await one()
        latencies.append(time.perf_counter() - t0)

    for i in range(int(rate_per_s * seconds)):
        delay = start + i / rate_per_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed()))
    await asyncio.gather(*tasks)
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def candidates(h1: str, h2: str) -> Iterable[tuple[str, Callable[[], tuple[One, Callable[[], Awaitable[None]]]]]]:
    yield "httpcore, pool 16 (no guard)", lambda: via_client(httpcore_transport(16), h1)
    yield "httpcore, pool 64 (no guard)", lambda: via_client(httpcore_transport(64), h1)
    yield (
        "httpcore, pool 16, no pool scan (unsafe, no guard)",
        lambda: via_client(httpcore_transport(16, no_poll=True), h1),
    )
    yield "httpcore, HTTP/2 (h2c, no guard)", lambda: via_client(httpcore_transport(16, http2=True), h2)
    yield "httpx-aiohttp via AsyncClient.send (before, no guard)", lambda: via_client(AiohttpTransport(), h1)
    yield "aiohttp ClientSession alone (no httpx, no guard)", lambda: via_aiohttp(h1)
    yield "GuardedTransport via AsyncClient.send", lambda: via_client(GuardedTransport(ALLOWED), h1)
    for per_host in (4, 16, 32, 64):
        label = " (shipped)" if per_host == 32 else ""
        yield (
            f"GuardedTransport via guarded_request, {per_host} per host{label}",
            lambda n=per_host: via_guarded_request(h1, n),
        )


async def main(args: argparse.Namespace) -> None:
    port, h2_port = free_port(), free_port()
    servers = [
        subprocess.Popen([sys.executable, str(ROOT / "bench" / "hook_server.py"), str(port)]),  # noqa: ASYNC220
        subprocess.Popen([sys.executable, str(ROOT / "bench" / "h2_hook_server.py"), str(h2_port)]),  # noqa: ASYNC220
    ]
    rows = [
        "| transport | requests/s (16 in flight) | client CPU µs / request | p50 ms at "
        f"{args.rate:g}/s | p99 ms at {args.rate:g}/s |",
        "|---|---|---|---|---|",
    ]
    try:
        for attempt in range(50):  # both servers listening (bounded)
            try:
                for p in (port, h2_port):
                    _, writer = await asyncio.open_connection("127.0.0.1", p)
                    writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1 * (attempt + 1) / 10)
        base_cpu = 0.0
        for name, make in candidates(f"http://127.0.0.1:{port}/hook", f"http://127.0.0.1:{h2_port}/hook"):
            if args.only and not any(word in name for word in args.only):
                continue
            one, close = make()
            try:
                for _ in range(200):  # warm-up: connections open, code paths hot
                    await one()
                throughput, cpu_us = await closed_loop(one, args.seconds)
                p50, p99 = await open_loop(one, args.rate, args.open_s)
            finally:
                await close()
            base_cpu = base_cpu or cpu_us
            rows.append(
                f"| {name} | {throughput:,.0f} | {cpu_us:,.0f} ({base_cpu / cpu_us:.1f}x less) | "
                f"{p50:.2f} | {p99:.2f} |"
            )
            print(rows[-1], file=sys.stderr)
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    print(f"Closed loop {args.seconds:g} s per transport, open loop {args.rate:g}/s for {args.open_s:g} s.\n")
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="closed-loop seconds per transport (default 3)")
    parser.add_argument("--rate", type=float, default=500, help="open-loop requests/s (default 500)")
    parser.add_argument("--open-s", type=float, default=2.0, help="open-loop seconds per transport (default 2)")
    parser.add_argument("--only", nargs="*", help="run only the transports whose name holds one of these words")
    uvloop.run(main(parser.parse_args()))
