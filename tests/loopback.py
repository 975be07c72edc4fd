"""A tiny HTTP/1.1 server on 127.0.0.1 for tests of outbound requests (http hooks, the SSRF guard)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any


@dataclasses.dataclass
class Received:
    """One request as the server read it (header names lowercased)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Responder = Callable[["LoopbackServer", Received, asyncio.StreamWriter], Awaitable[None]]


def reply(status: int, body: bytes | str | dict[str, Any] = b"", *, headers: dict[str, str] | None = None) -> Responder:
    """A responder answering every request with ``status`` and ``body`` (then closing)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body

    async def respond(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(
            f"HTTP/1.1 {status} Whatever\r\nContent-Length: {len(data)}\r\nConnection: close\r\n{extra}\r\n".encode()
            + data
        )
        await writer.drain()

    return respond


async def hang(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
    """Never answer (until the server stops)."""
    await server.stopping.wait()


async def flood(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
    """A 200 with no length, then an endless body until the client hangs up."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{")
    chunk = b" " * 65536
    try:
        while not server.stopping.is_set():
            writer.write(chunk)
            await writer.drain()
            server.sent += len(chunk)
    except ConnectionError:
        server.client_hung_up = True


class LoopbackServer:
    """``async with LoopbackServer(responder) as s:`` — a real HTTP server on 127.0.0.1, stopped on exit."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[Received] = []
        self.connections = 0
        self.sent = 0
        self.client_hung_up = False
        self.port = 0
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self.stopping.set()
        self._server.close()
        for writer in list(self._writers):  # ends pending reads and floods
            writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            line, *fields = head.split("\r\n")[:-2]
            method, target, _ = line.split(" ", 2)
            headers = {}
            for field in fields:
                name, _, value = field.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            received = Received(method, target, headers, body)
            self.requests.append(received)
            await self.respond(self, received, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def redirect_to(url: str) -> Responder:
    return reply(302, headers={"Location": url})


respond_ok = reply(200, "ok")
