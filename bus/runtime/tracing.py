"""OpenTelemetry traces of hookbus's events, exported over OTLP/HTTP (docs/operations.md, "Tracing").

Off by default. It is on when an OTLP endpoint is named (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or ``OTEL_TRACES_EXPORTER=otlp``, and not
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. While it is off the SDK is never
imported, and every call site guards its work behind one module attribute, :data:`on`.

A process turns it on with :func:`configure` (once, at start-up). The sampler is the one
``OTEL_TRACES_SAMPLER`` names, else a parent-based ratio sampler (``OTEL_TRACES_SAMPLER_ARG``,
1.0 by default), so the gateway's choice travels with the event to the dispatchers and the worker.

``HOOKBUS_TRACE_ALWAYS=fail-open,deny`` keeps the traces of events that failed open or were
denied whatever the sampler chose. Whether an event fails open is only known at its end, so the
sampler then records every span instead of dropping the unsampled ones, and :class:`KeepOutcomes`
holds each unsampled trace's spans in memory until its local root span (the gateway's request,
a dispatcher's read) ends: when that root carries ``hookbus.keep``, its spans are exported
(marked sampled), else they are dropped. This costs the spans' recording on every event, which
is why it is an option.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from bus.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
    from opentelemetry.trace import Span, Tracer

#: True once :func:`configure` has turned tracing on in this process; every call site checks it first.
on: bool = False
_tracer: Tracer | None = None

#: What ``HOOKBUS_TRACE_ALWAYS`` may list.
ALWAYS_OUTCOMES: Final = ("fail-open", "deny")
#: The attribute a local root span carries when its unsampled trace must be exported all the same.
KEEP: Final = "hookbus.keep"
#: Unsampled traces held at once in keep mode (the oldest is dropped past it).
MAX_HELD_TRACES: Final = 4096
_TRUE: Final = frozenset({"1", "true", "yes"})


@dataclasses.dataclass(frozen=True)
class TraceSettings:
    """Whether this process traces, and which outcomes are always kept."""

    enabled: bool = False
    #: Outcomes whose traces are kept whatever the sampler chose (:data:`ALWAYS_OUTCOMES`).
    always: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TraceSettings:
        exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        named = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE or exporter == "none"
        if exporter not in ("", "otlp", "none"):
            raise ConfigError(f"OTEL_TRACES_EXPORTER={exporter!r}: hookbus exports traces over OTLP only (otlp, none)")
        always = frozenset(v.strip().lower() for v in env.get("HOOKBUS_TRACE_ALWAYS", "").split(",") if v.strip())
        if unknown := sorted(always - set(ALWAYS_OUTCOMES)):
            raise ConfigError(f"HOOKBUS_TRACE_ALWAYS: {', '.join(unknown)} is not one of: {', '.join(ALWAYS_OUTCOMES)}")
        return cls(enabled=(named or exporter == "otlp") and not disabled, always=always)


def configure(settings: TraceSettings, role: str, *, exporter: Any = None) -> None:
    """Turn tracing on in this process (a no-op when ``settings`` keep it off).

    ``role`` (gateway, dispatcher, worker) is the ``hookbus.role`` resource attribute; the
    service name is ``OTEL_SERVICE_NAME``, ``hookbus`` by default. ``exporter`` replaces the
    OTLP/HTTP exporter (benchmarks).
    """
    global on, _tracer
    if not settings.enabled:
        return
    import os

    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_* decide where and how
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "hookbus", "hookbus.role": role})
    resource = resource.merge(OTELResourceDetector().detect())
    sampler = _sampler(bool(settings.always))
    provider = TracerProvider(sampler=sampler, resource=resource)
    batch = BatchSpanProcessor(exporter)
    provider.add_span_processor(cast("SpanProcessor", KeepOutcomes(batch)) if settings.always else batch)
    _tracer = provider.get_tracer("hookbus")
    on = True


def shutdown() -> None:
    """Export what is left and turn tracing off (a process that leaves calls it; atexit does too)."""
    global on, _tracer
    if _tracer is None:
        return
    from opentelemetry.sdk.trace import Tracer as SdkTracer

    tracer, _tracer, on = _tracer, None, False
    if isinstance(tracer, SdkTracer):
        tracer.span_processor.shutdown()


def _sampler(record_unsampled: bool) -> Any:
    import os

    from opentelemetry.sdk.trace import sampling

    if os.environ.get("OTEL_TRACES_SAMPLER"):
        chosen: sampling.Sampler = sampling._get_from_env_or_default()
    else:
        ratio = float(os.environ.get("OTEL_TRACES_SAMPLER_ARG") or 1.0)
        chosen = sampling.ParentBased(sampling.TraceIdRatioBased(ratio))
    return _record_unsampled_class()(chosen) if record_unsampled else chosen


def _record_unsampled_class() -> type:
    from opentelemetry.sdk.trace import sampling

    class RecordUnsampled(sampling.Sampler):
        """The wrapped sampler's choice, with a drop turned into record-only (for :class:`KeepOutcomes`)."""

        def __init__(self, wrapped: sampling.Sampler) -> None:
            self.wrapped = wrapped

        def should_sample(
            self,
            parent_context: Context | None,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> sampling.SamplingResult:
            result = self.wrapped.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
            if result.decision is sampling.Decision.DROP:  # a drop carries no attributes: the span's own
                return sampling.SamplingResult(sampling.Decision.RECORD_ONLY, attributes, result.trace_state)
            return result

        def get_description(self) -> str:
            return f"RecordUnsampled{{{self.wrapped.get_description()}}}"

    return RecordUnsampled


class KeepOutcomes:
    """A span processor: sampled spans go on to ``exporting``; an unsampled trace's spans wait
    for its local root and go on, marked sampled, only when that root carries :data:`KEEP`."""

    def __init__(self, exporting: SpanProcessor) -> None:
        self.exporting = exporting
        self.held: collections.OrderedDict[int, list[ReadableSpan]] = collections.OrderedDict()

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        self.exporting.on_start(span, parent_context)

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or context.trace_flags.sampled:
            self.exporting.on_end(span)
            return
        held = self.held.setdefault(context.trace_id, [])
        held.append(span)
        if len(self.held) > MAX_HELD_TRACES:
            self.held.popitem(last=False)
        if span.parent is not None and not span.parent.is_remote:
            return  # not the local root: wait for it
        del self.held[context.trace_id]
        if (span.attributes or {}).get(KEEP):
            for kept in held:
                self.exporting.on_end(_as_sampled(kept))

    def shutdown(self) -> None:
        self.exporting.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporting.force_flush(timeout_millis)


def _as_sampled(span: ReadableSpan) -> ReadableSpan:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    old = span.context
    assert old is not None
    context = SpanContext(old.trace_id, old.span_id, old.is_remote, TraceFlags(TraceFlags.SAMPLED), old.trace_state)
    return ReadableSpan(
        span.name,
        context=context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


# Everything below is called only once :data:`on` is true.


def parent_context(traceparent: str | bytes | None) -> Context | None:
    """The context a W3C ``traceparent`` names (None when it is absent or malformed)."""
    if not traceparent:
        return None
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    text = traceparent.decode("latin-1") if isinstance(traceparent, bytes) else traceparent
    extracted = TraceContextTextMapPropagator().extract({"traceparent": text})
    from opentelemetry.trace import get_current_span

    span = get_current_span(extracted)
    if not span.get_span_context().is_valid:
        return None
    return set_span_in_context(NonRecordingSpan(span.get_span_context()))


def start(
    name: str,
    *,
    parent: Span | Context | None = None,
    kind: str = "internal",
    start_ns: int | None = None,
    attributes: Mapping[str, Any] | None = None,
    links: tuple[str, ...] = (),
    new_trace: bool = False,
) -> Span:
    """A started span: a child of ``parent`` (a span or a context), else of the current span, or
    the root of a new trace (``new_trace``).

    ``kind`` is an OpenTelemetry span kind's name; ``links`` are traceparents it links to.
    """
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, get_current_span, set_span_in_context

    assert _tracer is not None
    context = set_span_in_context(parent) if parent is not None and not isinstance(parent, dict) else parent
    if new_trace:
        context = Context()
    linked = []
    for traceparent in links:
        if (linked_context := parent_context(traceparent)) is not None:
            linked.append(Link(get_current_span(linked_context).get_span_context()))
    return _tracer.start_span(
        name,
        context=context,
        kind=SpanKind[kind.upper()],
        attributes=dict(attributes) if attributes else None,
        links=linked,
        start_time=start_ns,
    )


@contextlib.contextmanager
def current(span: Span) -> Iterator[Span]:
    """``span`` as the current span for the block (ended after it)."""
    from opentelemetry.trace import use_span

    with use_span(span, end_on_exit=True):
        yield span


def enter(span: Span) -> object:
    """Make ``span`` the current span of this task until :func:`leave` with the token returned."""
    from opentelemetry import context
    from opentelemetry.trace import set_span_in_context

    return context.attach(set_span_in_context(span))


def leave(token: object) -> None:
    from opentelemetry import context

    context.detach(token)  # type: ignore[arg-type]


def traceparent(span: Span) -> str:
    """``span``'s W3C ``traceparent`` (its sampled flag included)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def trace_id(span: Span) -> str:
    """``span``'s trace id in hex when it will be exported (sampled, or recorded for keep), else ""."""
    context = span.get_span_context()
    return f"{context.trace_id:032x}" if context.trace_flags.sampled or span.is_recording() else ""


def annotate(name: str, value: Any) -> None:
    """Set an attribute on the current span (a no-op while tracing is off)."""
    if on:
        from opentelemetry.trace import get_current_span

        get_current_span().set_attribute(name, value)


def inject(headers: dict[str, str]) -> None:
    """Add the current span's ``traceparent`` to outbound ``headers`` (a no-op while tracing is off)."""
    if on:
        from opentelemetry.trace import get_current_span

        span = get_current_span()
        if span.get_span_context().is_valid:
            headers["traceparent"] = traceparent(span)


def log_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex, for a log line (None when off or outside a span)."""
    if not on:
        return None
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def now_ns() -> int:
    """The wall clock in nanoseconds (span times)."""
    return time.time_ns()


__all__ = [
    "ALWAYS_OUTCOMES",
    "KEEP",
    "KeepOutcomes",
    "TraceSettings",
    "annotate",
    "configure",
    "current",
    "enter",
    "inject",
    "leave",
    "log_ids",
    "now_ns",
    "on",
    "parent_context",
    "start",
    "trace_id",
    "traceparent",
]
