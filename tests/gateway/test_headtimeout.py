"""Slow request heads are cut off; complete ones and keep-alive requests are not."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from bus.runtime.metrics import Metrics
from gateway.headtimeout import HeadTimeoutProtocol
from hookbus.platform.redis_server import free_port

pytestmark = pytest.mark.system  # starts processes (or servers) itself


@pytest.fixture
def m() -> Metrics:
    """Where the test's server counts the connections it closed, on a registry of this test alone."""
    return Metrics()


def quick_timeout(m: Metrics) -> type[HeadTimeoutProtocol]:
    """The protocol with a short head timeout, counting in ``m``."""

    class QuickTimeout(HeadTimeoutProtocol):
        head_timeout_s = 0.3
        metrics = m

    return QuickTimeout


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def server(m: Metrics) -> AsyncIterator[int]:
    port = free_port()
    config = uvicorn.Config(
        hello,
        host="127.0.0.1",
        port=port,
        http=quick_timeout(m),
        lifespan="off",
        log_level="warning",
        timeout_keep_alive=30,
    )
    instance = uvicorn.Server(config)
    task = asyncio.create_task(instance.serve())
    try:
        while not instance.started:
            await asyncio.sleep(0.01)
        yield port
    finally:
        instance.should_exit = True
        await task


async def closed_within(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            return await reader.read(1024) == b""
    except TimeoutError:
        return False


@pytest.mark.timeout(20)
async def test_a_head_that_trickles_in_is_closed_and_counted(m: Metrics) -> None:
    async with server(m) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/hooks HTTP/1.1\r\nHost: x\r\n")  # never finished
        await writer.drain()
        assert await closed_within(reader, 5.0)
        writer.close()
    assert m.value("hookbus_request_head_timeouts_total") == 1


@pytest.mark.timeout(20)
async def test_a_later_request_whose_head_trickles_in_is_closed_too(m: Metrics) -> None:
    # The timer of a request begun after the first starts once its bytes are read, its head incomplete.
    async with server(m) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/hooks HTTP/1.1\r\n")  # one whole, one begun
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await reader.readexactly(2) == b"ok"
        writer.write(b"Host: x\r\n")  # and never finished
        await writer.drain()
        assert await closed_within(reader, 5.0)
        writer.close()
    assert m.value("hookbus_request_head_timeouts_total") == 1


@pytest.mark.timeout(20)
async def test_complete_requests_on_a_kept_alive_connection_are_served(m: Metrics) -> None:
    async with server(m) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert await reader.readexactly(2) == b"ok"
        # Idle past the head timeout between requests: keep-alive governs that, not the head timer.
        assert not await closed_within(reader, 0.6)
        writer.close()
    assert m.value("hookbus_request_head_timeouts_total") == 0


async def echo_length(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the body (so that uvicorn answers ``Expect: 100-continue``), then answers its length."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.timeout(20)
async def test_a_hook_answer_held_for_its_body_still_lets_100_continue_through(m: Metrics) -> None:
    port = free_port()
    config = uvicorn.Config(echo_length, host="127.0.0.1", port=port, http=quick_timeout(m), lifespan="off")
    instance = uvicorn.Server(config)
    task = asyncio.create_task(instance.serve())
    try:
        while not instance.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/hooks HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hello")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 1\r\n" in head
        assert await reader.readexactly(1) == b"5"
        writer.close()
    finally:
        instance.should_exit = True
        await task


@pytest.mark.timeout(20)
async def test_a_hook_answer_leaves_no_reference_cycle_for_the_collector(m: Metrics) -> None:
    # The view that holds the head keeps its request's cycle only until the head is out: after
    # that, each request's objects are freed by reference counting, not by the garbage collector.
    async with server(m) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        gc.collect()
        gc.disable()
        try:
            for _ in range(20):
                writer.write(b"POST /v1/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
                assert await reader.readexactly(2) == b"ok"
            cycles = sum(isinstance(o, RequestResponseCycle) for o in gc.get_objects())
        finally:
            gc.enable()
        writer.close()
    assert cycles <= 1  # the connection's last request, still referenced by its protocol
