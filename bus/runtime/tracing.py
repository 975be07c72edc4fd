"""OpenTelemetry traces of hookbus's events, exported over OTLP/HTTP (docs/operations.md, "Tracing").

Off by default. It is on when an OTLP endpoint is named (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or ``OTEL_TRACES_EXPORTER=otlp``, and not
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. While it is off the SDK is never
imported, and every call site guards its work behind one module attribute, :data:`on`.

A process turns it on with :func:`configure` (once, at start-up). The sampler is the one
``OTEL_TRACES_SAMPLER`` names, else a parent-based ratio sampler (``OTEL_TRACES_SAMPLER_ARG``,
1.0 by default), so the gateway's choice travels with the event to the dispatchers and the worker.

``HOOKBUS_TRACE_ALWAYS=fail-open,deny`` keeps the traces of events that failed open or were
denied whatever the sampler chose (:mod:`bus.runtime.sampling` says how); it costs the spans'
recording on every event, which is why it is an option.

A caller's sampled ``traceparent`` forces its event's trace to be kept, and that trace's spans
share each process's export queue with every other tenant's. ``HOOKBUS_TRACE_FORCED_PER_S``
bounds how many traces one tenant may force a second (:class:`gateway.tracing.ForcedTraces`);
past it the caller's sampled flag is not followed (:func:`unsampled`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from bus.errors import ConfigError
from bus.runtime.sampling import KEEP, KeepOutcomes, sdk_sampler

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import Span, Tracer

#: True once :func:`configure` has turned tracing on in this process; every call site checks it first.
on: bool = False
_tracer: Tracer | None = None
#: The share of new traces kept, when hookbus samples roots itself (the default sampler, no keep
#: mode); None when the SDK's sampler decides everything.
_root_ratio: float | None = None

#: What ``HOOKBUS_TRACE_ALWAYS`` may list.
ALWAYS_OUTCOMES: Final = ("fail-open", "deny")
_TRUE: Final = frozenset({"1", "true", "yes"})
_random, _getrandbits, _randbytes = random.random, random.getrandbits, random.randbytes
_SAMPLED_FLAGS: Final = frozenset(f"{flags:02x}" for flags in range(256) if flags & 1)


@dataclasses.dataclass(frozen=True)
class TraceSettings:
    """Whether this process traces, and which outcomes are always kept."""

    enabled: bool = False
    #: Outcomes whose traces are kept whatever the sampler chose (:data:`ALWAYS_OUTCOMES`).
    always: frozenset[str] = frozenset()
    #: Traces one tenant may force a second with a sampled ``traceparent`` (burst: a second's worth,
    #: at least one); 0 never follows a caller's sampled flag.
    forced_per_s: float = 10.0

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
        forced = env.get("HOOKBUS_TRACE_FORCED_PER_S", "").strip() or "10"
        try:
            forced_per_s = float(forced)
        except ValueError:
            raise ConfigError(f"HOOKBUS_TRACE_FORCED_PER_S={forced!r} is not a number of traces a second") from None
        if not 0 <= forced_per_s < float("inf"):
            raise ConfigError(f"HOOKBUS_TRACE_FORCED_PER_S={forced!r}: traces a second must be 0 or more")
        return cls(enabled=(named or exporter == "otlp") and not disabled, always=always, forced_per_s=forced_per_s)


def configure(settings: TraceSettings, role: str, *, exporter: Any = None) -> None:
    """Turn tracing on in this process (a no-op when ``settings`` keep it off).

    ``role`` (gateway, dispatcher, worker) is the ``hookbus.role`` resource attribute; the
    service name is ``OTEL_SERVICE_NAME``, ``hookbus`` by default. ``exporter`` replaces the
    OTLP/HTTP exporter (benchmarks).
    """
    global on, _tracer, _root_ratio
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
    sampler, _root_ratio = sdk_sampler(bool(settings.always))
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
    global _root_ratio
    _root_ratio = None
    if isinstance(tracer, SdkTracer):
        tracer.span_processor.shutdown()


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans still waiting in the batch (a process about to be ended by a signal,
    which skips the exit handlers, calls it first: uvicorn re-raises SIGTERM once it has shut down)."""
    if _tracer is not None:
        _tracer.span_processor.force_flush(int(timeout_s * 1000))  # type: ignore[attr-defined]


# Everything below is called only once :data:`on` is true; what it needs of the API is bound
# once, by :func:`configure` (an import statement per call costs more than the span).


class _Api:
    """The OpenTelemetry API's names the calls below use."""

    def __init__(self) -> None:
        from opentelemetry import context
        from opentelemetry.trace import (
            Link,
            NonRecordingSpan,
            SpanContext,
            SpanKind,
            TraceFlags,
            get_current_span,
            set_span_in_context,
            use_span,
        )

        self.Context = context.Context
        self.attach, self.detach = context.attach, context.detach
        self.Link, self.NonRecordingSpan, self.SpanContext, self.TraceFlags = (
            Link,
            NonRecordingSpan,
            SpanContext,
            TraceFlags,
        )
        self.kinds = {kind.name.lower(): kind for kind in SpanKind}
        self.get_current_span, self.set_span_in_context, self.use_span = get_current_span, set_span_in_context, use_span


_api: _Api | None = None


def _bound() -> _Api:
    global _api
    if _api is None:
        _api = _Api()
    return _api


def parent_context(traceparent: str | bytes | None) -> Context | None:
    """The context a W3C ``traceparent`` names (None when it is absent or malformed)."""
    if not traceparent:
        return None
    text = traceparent.decode("latin-1") if isinstance(traceparent, bytes) else traceparent
    parts = text.strip().split("-")
    if len(parts) < 4 or parts[0] == "ff" or len(parts[0]) != 2 or (parts[0] == "00" and len(parts) != 4):
        return None
    version, trace_hex, span_hex, flags_hex = parts[:4]
    if len(trace_hex) != 32 or len(span_hex) != 16 or len(flags_hex) != 2:
        return None
    try:
        trace_id, span_id, flags = int(trace_hex, 16), int(span_hex, 16), int(flags_hex, 16)
        int(version, 16)
    except ValueError:
        return None
    if not trace_id or not span_id or trace_hex != trace_hex.lower() or span_hex != span_hex.lower():
        return None
    api = _bound()
    remote = api.SpanContext(trace_id, span_id, is_remote=True, trace_flags=api.TraceFlags(flags))
    return api.set_span_in_context(api.NonRecordingSpan(remote))


def caller_sampled(context: Context) -> bool:
    """Whether the remote parent in ``context`` (from :func:`parent_context`) asks for its trace to be sampled."""
    return bool(_bound().get_current_span(context).get_span_context().trace_flags.sampled)


def unsampled(context: Context) -> Context:
    """``context`` with its remote parent's sampled flag cleared: the same trace, left to the sampler
    as an unsampled parent (not exported unless its outcome keeps it)."""
    api = _bound()
    parent = api.get_current_span(context).get_span_context()
    flags = api.TraceFlags(int(parent.trace_flags) & ~api.TraceFlags.SAMPLED)
    remote = api.SpanContext(parent.trace_id, parent.span_id, is_remote=True, trace_flags=flags)
    return api.set_span_in_context(api.NonRecordingSpan(remote))


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
    api = _bound()
    assert _tracer is not None
    context = api.set_span_in_context(parent) if parent is not None and not isinstance(parent, dict) else parent
    if new_trace:
        context = api.Context()
    if (
        _root_ratio is not None
        and _random() >= _root_ratio
        and not api.get_current_span(context).get_span_context().is_valid
    ):  # a new trace, left out: no span for the SDK to build, only ids to pass on
        ids = api.SpanContext(_getrandbits(128) or 1, _getrandbits(64) or 1, False, api.TraceFlags(0))
        return api.NonRecordingSpan(ids)
    linked = []
    for traceparent in links:
        if (linked_context := parent_context(traceparent)) is not None:
            linked.append(api.Link(api.get_current_span(linked_context).get_span_context()))
    return _tracer.start_span(
        name,
        context=context,
        kind=api.kinds[kind],
        attributes=attributes,
        links=linked,
        start_time=start_ns,
    )


@contextlib.contextmanager
def current(span: Span) -> Iterator[Span]:
    """``span`` as the current span for the block (ended after it)."""
    with _bound().use_span(span, end_on_exit=True):
        yield span


def enter(span: Span) -> object:
    """Make ``span`` the current span of this task until :func:`leave` with the token returned."""
    api = _bound()
    return api.attach(api.set_span_in_context(span))


def leave(token: object) -> None:
    _bound().detach(token)  # type: ignore[arg-type]


def traceparent(span: Span) -> str:
    """``span``'s W3C ``traceparent`` (its sampled flag included)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def trace_id(span: Span) -> str:
    """``span``'s trace id in hex when it will be exported (sampled, or recorded for keep), else ""."""
    context = span.get_span_context()
    return f"{context.trace_id:032x}" if context.trace_flags.sampled or span.is_recording() else ""


def left_out() -> str | None:
    """The ``traceparent`` to pass on for a new trace the sampler leaves out, or None when the
    trace is kept (or the SDK's own sampler decides): a left-out trace needs no span at all."""
    if _root_ratio is None or _random() < _root_ratio:
        return None
    ids = _randbytes(24).hex()
    return "00-" + ids[:32] + "-" + ids[32:] + "-00"


def recording() -> bool:
    """Whether the current span records (its children are worth starting); False while off."""
    return on and _bound().get_current_span().is_recording()


def sampled(traceparent: str) -> bool:
    """Whether a well-formed ``traceparent``'s sampled flag is set (the cheap test before any span)."""
    return len(traceparent) == 55 and traceparent[-2:] in _SAMPLED_FLAGS


def annotate(name: str, value: Any) -> None:
    """Set an attribute on the current span (a no-op while tracing is off)."""
    if on:
        _bound().get_current_span().set_attribute(name, value)


def inject(headers: dict[str, str]) -> None:
    """Add the current span's ``traceparent`` to outbound ``headers`` (a no-op while tracing is off)."""
    if on:
        span = _bound().get_current_span()
        if span.get_span_context().is_valid:
            headers["traceparent"] = traceparent(span)


def log_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex, for a log line (None when off or outside a span)."""
    if not on:
        return None
    context = _bound().get_current_span().get_span_context()
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
    "caller_sampled",
    "configure",
    "current",
    "enter",
    "flush",
    "inject",
    "leave",
    "left_out",
    "log_ids",
    "now_ns",
    "on",
    "parent_context",
    "recording",
    "sampled",
    "start",
    "trace_id",
    "traceparent",
    "unsampled",
]
