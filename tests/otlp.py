"""A real OTLP/HTTP trace receiver on 127.0.0.1: decodes what OpenTelemetry exporters send.

``with OtlpReceiver() as receiver:`` serves ``POST /v1/traces`` (protobuf, gzip or not) in a
thread; ``receiver.spans`` holds every span received, flattened (:class:`ReceivedSpan`), and
:meth:`OtlpReceiver.wait_for_spans` polls for a condition on them. :func:`traced_in_process`
turns tracing on in the test's own process, into an in-memory exporter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import wait_for


@dataclasses.dataclass
class ReceivedSpan:
    """One span as the receiver decoded it (ids in hex, "" for no parent)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]]
    start_ns: int
    end_ns: int
    flags: int

    @property
    def role(self) -> str:
        return str(self.resource.get("hookbus.role", ""))


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    """An OTLP/HTTP collector of traces, for the block."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            flags=span.flags,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def wait_for_spans(self, condition: Callable[[OtlpReceiver], Any], timeout_s: float = 20.0) -> Any:
        return wait_for(lambda: condition(self), timeout_s=timeout_s, interval_s=0.05)

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def otel_env(receiver: OtlpReceiver, **more: str) -> dict[str, str]:
    """The ``OTEL_*`` variables that send a process's traces to ``receiver`` quickly (100 ms batches)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "hookbus-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        **more,
    }


@contextlib.contextmanager
def traced_in_process(ratio: float = 1.0, always: frozenset[str] = frozenset()) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process for the block, into an in-memory exporter (flushed when read
    through :func:`finished`); off again after it."""
    from bus.runtime import tracing

    previous = os.environ.get("OTEL_TRACES_SAMPLER_ARG")
    os.environ["OTEL_TRACES_SAMPLER_ARG"] = str(ratio)
    exporter = InMemorySpanExporter()
    try:
        tracing.configure(tracing.TraceSettings(enabled=True, always=always), "test", exporter=exporter)
        yield exporter
    finally:
        tracing.shutdown()
        if previous is None:
            os.environ.pop("OTEL_TRACES_SAMPLER_ARG", None)
        else:
            os.environ["OTEL_TRACES_SAMPLER_ARG"] = previous


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The spans ``exporter`` got, once the batch processor has handed over what it holds."""
    from bus.runtime import tracing

    tracer = tracing._tracer
    if tracer is not None:
        tracer.span_processor.force_flush()  # type: ignore[attr-defined]
    return list(exporter.get_finished_spans())


__all__ = ["OtlpReceiver", "ReceivedSpan", "finished", "otel_env", "traced_in_process"]
