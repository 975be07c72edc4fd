"""An ``mcp_tool`` hook sends its handler span's ``traceparent`` on every request of its MCP
session (:mod:`workers.handlers.mcp`), to a real streamable-HTTP MCP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn

from bus.hooks.results import Outcome
from bus.runtime import tracing
from hookbus.platform.redis_server import free_port
from tests.conftest import async_wait_for
from tests.otlp import finished, traced_in_process
from tests.workers.handlers.test_mcp import build_server, run

pytestmark = pytest.mark.system


async def test_every_request_of_the_session_carries_the_handler_span() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    release = asyncio.Event()
    inner = build_server(calls, release).streamable_http_app()
    traceparents: list[str | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            found = dict(scope["headers"]).get(b"traceparent")
            traceparents.append(found.decode() if found else None)
        await inner(scope, receive, send)

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", loop="asyncio")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        await async_wait_for(lambda: server.started or serving.done())
        url = f"http://127.0.0.1:{port}/mcp"
        with traced_in_process() as exporter:
            span = tracing.start("hookbus.handler")
            token = tracing.enter(span)
            try:
                result = await run({"tool": "advise", "input": {"note": "n"}, "url": url})
            finally:
                tracing.leave(token)
                span.end()
            finished(exporter)
    finally:
        release.set()
        server.should_exit = True
        await serving
    assert result.outcome is Outcome.OK, result.reason
    assert calls == [("advise", {"note": "n"})]
    assert traceparents and set(traceparents) == {tracing.traceparent(span)}
