"""The span of an async hook's try on the worker (:mod:`workers.jobs.tracing`): a trace of its
own, linked to its event's, with the handler's span beneath it."""

from __future__ import annotations

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import HttpHandler
from bus.runtime import tracing
from bus.stream.protocol import Request
from tests.otlp import finished, traced_in_process
from workers.jobs.tracing import traced_job

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


async def test_a_job_starts_a_trace_linked_to_its_event_and_holds_the_handler_span() -> None:
    request = Request("e1", "Notification", "acme", b"{}", 1, trace=f"00-{TRACE}-{SPAN}-01")
    seen: list[str] = []

    async def run() -> HandlerResult:
        headers: dict[str, str] = {}
        tracing.inject(headers)  # what an http delivery sends
        seen.append(headers["traceparent"])
        return HandlerResult(Outcome.ERROR, reason="HTTP 503", duration_s=0.25)

    with traced_in_process() as exporter:
        hook = HttpHandler(type="http", url="https://policy.example:8443/v1/check?key=secret")
        result = await traced_job(request, "h1", hook, 2, run())
        spans = {span.name: span for span in finished(exporter)}
    assert result.outcome is Outcome.ERROR
    job, handler = spans["hookbus.job"], spans["hookbus.handler"]
    assert job.parent is None and job.context is not None and handler.context is not None
    assert f"{job.context.trace_id:032x}" != TRACE
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in job.links] == [(TRACE, SPAN)]
    assert dict(job.attributes or {})["hookbus.job.try"] == 2
    assert dict(job.attributes or {})["hookbus.handler.outcome"] == "error"
    assert handler.parent is not None and handler.parent.span_id == job.context.span_id
    attributes = dict(handler.attributes or {})
    assert attributes["hookbus.handler.type"] == "http" and attributes["hookbus.handler.duration_ms"] == 250.0
    assert attributes["hookbus.handler.name"] == "https://policy.example:8443/v1/check"  # no query: keys live there
    assert handler.status.status_code.name == "ERROR"
    assert seen == [
        f"00-{handler.context.trace_id:032x}-{handler.context.span_id:016x}-{int(handler.context.trace_flags):02x}"
    ]
