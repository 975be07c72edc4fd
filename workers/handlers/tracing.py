"""The span of one handler run (a dispatcher's evaluation, or an async job on the worker).

Called only while :data:`bus.runtime.tracing.on`. The span is the current one while the
handler runs, so what the handler does adds to it: an outbound request sends its
``traceparent`` and records its status (:mod:`workers.outbound.client`), a command records its
exit code (:mod:`workers.handlers.command`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus.hooks.results import HandlerResult
from bus.runtime import tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class HandlerSpan:
    """``hookbus.handler``: started and made current at :meth:`start`, ended with the result."""

    __slots__ = ("span", "token")

    def __init__(self, handler_type: str, handler_id: str, name: str = "hookbus.handler") -> None:
        self.span: Span = tracing.start(
            name, attributes={"hookbus.handler.type": handler_type, "hookbus.handler.id": handler_id}
        )
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
