"""The gateway's spans of one request (:mod:`gateway.tracing`), in this process: the request span
continues a ``traceparent`` or starts a trace, its append and wait are its children, the stream
entry carries its context, a kept outcome is marked, and the latency exemplar names the trace."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from bus.runtime import tracing
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request
from gateway.tracing import GatewayTrace
from tests.otlp import finished, traced_in_process

PARENT_TRACE, PARENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def blocking_request() -> Request:
    return Request("e1", "PreToolUse", "acme", b"{}", 1, deadline_ms=2, reply_to="hookbus:reply:g1", policy="org|a")


def test_a_request_continues_the_agents_trace_and_times_its_append_and_wait() -> None:
    metrics = Metrics(CollectorRegistry())
    with traced_in_process(ratio=0.0) as exporter:  # a sampled parent is followed whatever the ratio
        request = blocking_request()
        headers = {b"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01".encode()}
        trace = GatewayTrace.begin(headers, request, "gemini", time.perf_counter())
        assert trace is not None
        assert request.trace.startswith(f"00-{PARENT_TRACE}-") and tracing.sampled(request.trace)
        trace.appending()
        trace.appended()
        trace.replied()
        trace.finish(metrics, "PreToolUse", 0.003, "deny", "decided", None, frozenset({"deny"}))
        spans = {span.name: span for span in finished(exporter)}
    root = spans["hookbus.request"]
    assert root.parent is not None and root.parent.span_id == int(PARENT_SPAN, 16)
    assert root.context is not None and f"{root.context.span_id:016x}" == request.trace.split("-")[2]
    assert {spans[name].parent.span_id for name in ("hookbus.append", "hookbus.wait_reply")} == {root.context.span_id}  # type: ignore[union-attr]
    assert dict(root.attributes or {}) == {
        "hookbus.event": "PreToolUse",
        "hookbus.event_id": "e1",
        "hookbus.tenant": "acme",
        "hookbus.agent": "gemini",
        "hookbus.policy": "org|a",
        "hookbus.decision": "deny",
        "hookbus.outcome": "decided",
        "hookbus.keep": True,
    }
    assert spans["hookbus.wait_reply"].attributes == {"hookbus.replied": True}
    assert root.start_time is not None and root.end_time is not None
    exemplar = metrics.exemplars.latest["hookbus_decision_latency_seconds", ("PreToolUse",), "0.005"]
    assert exemplar.labels == {"trace_id": PARENT_TRACE}


def test_a_trace_left_out_builds_no_span_but_passes_its_ids_on() -> None:
    with traced_in_process(ratio=0.0) as exporter:
        request = blocking_request()
        assert GatewayTrace.begin({}, request, "claude", time.perf_counter()) is None
        assert len(request.trace) == 55 and not tracing.sampled(request.trace)
        assert finished(exporter) == []


def test_a_timed_out_wait_is_marked_and_a_fail_open_kept_when_asked() -> None:
    metrics = Metrics(CollectorRegistry())
    with traced_in_process(ratio=0.0, always=frozenset({"fail-open"})) as exporter:
        request = blocking_request()
        trace = GatewayTrace.begin({}, request, "claude", time.perf_counter())
        assert trace is not None and not tracing.sampled(request.trace)  # unsampled, but recorded
        trace.appending()
        trace.appended()
        trace.finish(metrics, "PreToolUse", 2.0, "none", "fail-open", "timeout", frozenset({"fail-open"}))
        spans = {span.name: span for span in finished(exporter)}
    assert spans["hookbus.request"].attributes["hookbus.fail_open"] == "timeout"  # type: ignore[index]
    assert spans["hookbus.wait_reply"].attributes == {"hookbus.replied": False}
    assert metrics.exemplars.latest  # a kept trace is an exemplar too


def test_an_unsampled_request_not_kept_exports_nothing() -> None:
    metrics = Metrics(CollectorRegistry())
    with traced_in_process(ratio=0.0, always=frozenset({"deny"})) as exporter:
        trace = GatewayTrace.begin({}, blocking_request(), "claude", time.perf_counter())
        assert trace is not None
        trace.finish(metrics, "PreToolUse", 0.001, "allow", "decided", None, frozenset({"deny"}))
        assert finished(exporter) == []
    assert not metrics.exemplars.latest
