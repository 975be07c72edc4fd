"""The span of one try of an async hook on the worker, linked to its event's trace.

Called only while :data:`bus.runtime.tracing.on`. An async hook runs after its event was
answered (seconds or hours later, maybe more than once), so its span starts a trace of its own
with a link to the event's (the ``traceparent`` its job carries), as OpenTelemetry's messaging
conventions do for work taken from a queue.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from bus.hooks.results import HandlerResult
from bus.policy.schema import Handler
from bus.runtime import tracing
from bus.stream.protocol import Request
from workers.handlers.tracing import HandlerSpan


async def traced_job(
    request: Request, handler_id: str, handler: Handler, job_try: int, run: Awaitable[HandlerResult]
) -> HandlerResult:
    """``run``'s result, inside a ``hookbus.job`` span that links to the event's trace."""
    job = tracing.start(
        "hookbus.job",
        new_trace=True,
        kind="consumer",
        links=(request.trace,) if request.trace else (),
        attributes={
            "hookbus.event": request.event,
            "hookbus.event_id": request.event_id,
            "hookbus.tenant": request.tenant,
            "hookbus.job.try": job_try,
        },
    )
    with tracing.current(job):
        span = HandlerSpan(handler, handler_id)
        started = time.perf_counter()
        result = await run
        result.duration_s = result.duration_s or time.perf_counter() - started
        span.end(result)
        job.set_attribute("hookbus.handler.outcome", result.outcome.value)
    return result


__all__ = ["traced_job"]
