"""The span of one handler run (a dispatcher's evaluation, or an async job on the worker).

Called only while :data:`bus.runtime.tracing.on`. The span is the current one while the
handler runs, so what the handler does adds to it: an outbound request sends its
``traceparent`` and records its status (:mod:`workers.outbound.client`), a command records its
exit code (:mod:`workers.handlers.command`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bus.hooks.results import HandlerResult
from bus.policy.schema import CommandHandler, FunctionHandler, Handler, HttpHandler, McpToolHandler
from bus.runtime import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span


def handler_name(handler: Handler) -> str:
    """What a reader of the trace knows the handler by: its ``statusMessage``, else the program
    a command runs, the address an http hook posts to (no query: it may hold a key), the MCP
    server and tool, the function; "" for the others (rules, prompts, agents: the id names them)."""
    if handler.status_message:
        return handler.status_message[:200]
    if isinstance(handler, CommandHandler):
        return (handler.command.split(maxsplit=1) or [""])[0][:200]
    if isinstance(handler, HttpHandler):
        parts = urlsplit(handler.url)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"[:200]
    if isinstance(handler, McpToolHandler):
        return f"{handler.server}/{handler.tool}"
    if isinstance(handler, FunctionHandler):
        return handler.function
    return ""


class HandlerSpan:
    """``hookbus.handler``: started and made current at :meth:`start`, ended with the result."""

    __slots__ = ("span", "token")

    def __init__(self, handler: Handler, handler_id: str) -> None:
        attributes = {"hookbus.handler.type": handler.type, "hookbus.handler.id": handler_id}
        if name := handler_name(handler):
            attributes["hookbus.handler.name"] = name
        self.span: Span = tracing.start("hookbus.handler", attributes=attributes)
        self.token = tracing.enter(self.span)

    def end(self, result: HandlerResult) -> None:
        """Record how the run went and end the span (it is no longer the current one)."""
        tracing.leave(self.token)
        span = self.span
        if span.is_recording():
            span.set_attribute("hookbus.handler.outcome", result.outcome.value)
            span.set_attribute("hookbus.handler.duration_ms", round(result.duration_s * 1000, 3))
            if result.reason:
                span.set_attribute("hookbus.handler.reason", result.reason[:200])
            if result.failed:
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, result.outcome.value))
        span.end()


__all__ = ["HandlerSpan"]
