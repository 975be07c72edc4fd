"""The gateway's spans of one request (:mod:`gateway.tracing`), in this process: the request span
continues a ``traceparent`` or starts a trace, its append and wait are its children, the stream
entry carries its context, a kept outcome is marked, and the latency exemplar names the trace.
A tenant forces only its share of traces with a sampled ``traceparent``, so it cannot push
another tenant's kept spans out of the export queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from bus.runtime import tracing
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request
from gateway.tracing import ForcedTraces, GatewayTrace
from tests.otlp import finished, traced_in_process

PARENT_TRACE, PARENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def blocking_request(tenant: str = "acme") -> Request:
    return Request("e1", "PreToolUse", tenant, b"{}", 1, deadline_ms=2, reply_to="hookbus:reply:g1", policy="org|a")


def forced(metrics: Metrics | None = None, per_s: float = 10.0, clock: list[float] | None = None) -> ForcedTraces:
    """A share of forced traces; with ``clock``, time is ``clock[0]`` seconds, moved by the test."""
    ignored = (metrics or Metrics(CollectorRegistry())).traces_forced_ignored
    return ForcedTraces(per_s, ignored) if clock is None else ForcedTraces(per_s, ignored, lambda: clock[0])


def test_a_request_continues_the_agents_trace_and_times_its_append_and_wait() -> None:
    metrics = Metrics(CollectorRegistry())
    with traced_in_process(ratio=0.0) as exporter:  # a sampled parent is followed whatever the ratio
        request = blocking_request()
        headers = {b"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01".encode()}
        trace = GatewayTrace.begin(headers, request, "gemini", time.perf_counter(), forced())
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
        assert GatewayTrace.begin({}, request, "claude", time.perf_counter(), forced()) is None
        assert len(request.trace) == 55 and not tracing.sampled(request.trace)
        assert finished(exporter) == []


def test_a_timed_out_wait_is_marked_and_a_fail_open_kept_when_asked() -> None:
    metrics = Metrics(CollectorRegistry())
    with traced_in_process(ratio=0.0, always=frozenset({"fail-open"})) as exporter:
        request = blocking_request()
        trace = GatewayTrace.begin({}, request, "claude", time.perf_counter(), forced())
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
        trace = GatewayTrace.begin({}, blocking_request(), "claude", time.perf_counter(), forced())
        assert trace is not None
        trace.finish(metrics, "PreToolUse", 0.001, "allow", "decided", None, frozenset({"deny"}))
        assert finished(exporter) == []
    assert not metrics.exemplars.latest


def sampled_parent(number: int) -> dict[bytes, bytes]:
    return {b"traceparent": f"00-{number + 1:032x}-{PARENT_SPAN}-01".encode()}


def test_each_tenant_forces_its_share_of_traces_and_the_rest_is_counted() -> None:
    metrics, clock = Metrics(CollectorRegistry()), [100.0]
    share = forced(metrics, per_s=2.0, clock=clock)

    def follows(tenant: str, number: int, share: ForcedTraces = share) -> bool:
        request = blocking_request(tenant)
        trace = GatewayTrace.begin(sampled_parent(number), request, "claude", time.perf_counter(), share)
        if trace is not None:  # ended, so that its span is no longer the current one
            trace.finish(metrics, "PreToolUse", 0.001, "allow", "decided", None, frozenset())
        # Followed or not, the request continues the caller's trace.
        assert request.trace.split("-")[1] == f"{number + 1:032x}"
        return tracing.sampled(request.trace)

    with traced_in_process(ratio=0.0):
        assert [follows("noisy", number) for number in range(5)] == [True, True, False, False, False]
        assert metrics.value("hookbus_traces_forced_ignored_total") == 3
        assert follows("quiet", 5)  # another tenant's bucket is its own
        clock[0] += 0.5  # one more token for each
        assert [follows("noisy", number) for number in range(6, 9)] == [True, False, False]
        clock[0] += 60  # a burst of a second's worth, no more
        assert [follows("noisy", number) for number in range(9, 12)] == [True, True, False]
        assert not follows("quiet", 12, forced(per_s=0.0))  # 0 follows no caller
        assert not follows("quiet", 13, forced(per_s=0.0, clock=clock))
    assert metrics.value("hookbus_traces_forced_ignored_total") == 6


class HeldExporter(InMemorySpanExporter):
    """An in-memory exporter whose first export waits until the test releases it: the batch
    processor's queue then fills as it does behind a slow collector."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.holding.is_set():
            self.holding.set()
            self.release.wait(30)
        return super().export(spans)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldExporter]:
    """Tracing on in this process at a 0 ratio, denials kept, into a span queue of 32 exported 8 at a time."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "32")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    exporter = HeldExporter()
    tracing.configure(tracing.TraceSettings(enabled=True, always=frozenset({"deny"})), "test", exporter=exporter)
    try:
        yield exporter
    finally:
        exporter.release.set()
        tracing.shutdown()


def test_a_tenant_forcing_traces_cannot_push_another_tenants_kept_spans_out(held: HeldExporter) -> None:
    metrics = Metrics(CollectorRegistry())
    share = forced(metrics, per_s=1.0, clock=[0.0])  # one forced trace each, the clock stands still
    always = frozenset({"deny"})

    def answer(tenant: str, event_id: str, headers: dict[bytes, bytes], decision: str) -> None:
        request = blocking_request(tenant)
        request.event_id = event_id
        trace = GatewayTrace.begin(headers, request, "claude", time.perf_counter(), share)
        assert trace is not None
        trace.finish(metrics, "PreToolUse", 0.001, decision, "decided", None, always)

    for number in range(8):  # a full batch goes to the exporter, which holds it: the queue fills from here
        answer("quiet", f"before-{number}", {}, "deny")
    assert held.holding.wait(10)
    answer("quiet", "kept", {}, "deny")
    for number in range(100):
        answer("noisy", f"forced-{number}", sampled_parent(number), "allow")
    held.release.set()
    tracing.flush()
    exported = [(span.attributes or {}).get("hookbus.event_id") for span in held.get_finished_spans()]
    assert "kept" in exported
    assert sum(str(event_id).startswith("forced-") for event_id in exported) == 1
    assert metrics.value("hookbus_traces_forced_ignored_total") == 99
