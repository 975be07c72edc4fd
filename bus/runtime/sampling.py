"""The sampling side of :mod:`bus.runtime.tracing`: which sampler the SDK gets, and
:class:`KeepOutcomes`, the span processor of ``HOOKBUS_TRACE_ALWAYS`` (keep the traces of events
that failed open or were denied whatever the sampler chose).

Whether an event fails open is only known at its end, so in keep mode the sampler records every
span instead of dropping the unsampled ones, and :class:`KeepOutcomes` holds each unsampled
trace's spans in memory until its local root span (the gateway's request, a dispatcher's read)
ends: when that root carries :data:`KEEP`, its spans are exported (marked sampled), else they
are dropped. Nothing here imports the SDK until tracing is configured.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Final

from bus.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

#: The attribute a local root span carries when its unsampled trace must be exported all the same.
KEEP: Final = "hookbus.keep"
#: Unsampled traces held at once in keep mode (the oldest is dropped past it).
MAX_HELD_TRACES: Final = 4096


def sdk_sampler(record_unsampled: bool) -> tuple[Any, float | None]:
    """The SDK's sampler, and the ratio :func:`bus.runtime.tracing.start` applies to new traces itself (or None).

    By default new traces are kept at ``OTEL_TRACES_SAMPLER_ARG`` and the rest follow their
    parent, as ``parentbased_traceidratio``; a new trace left out is then never handed to the
    SDK (its ids are drawn here, with the sampled flag off, for the parent-based choice
    downstream): that is most of what a 1 % sample costs. In keep mode the SDK's ratio sampler
    decides, since unsampled spans are recorded all the same.
    """
    import os

    from opentelemetry.sdk.trace import sampling

    if os.environ.get("OTEL_TRACES_SAMPLER"):
        chosen: sampling.Sampler = sampling._get_from_env_or_default()
        return (_record_unsampled_class()(chosen) if record_unsampled else chosen), None
    try:
        ratio = min(1.0, max(0.0, float(os.environ.get("OTEL_TRACES_SAMPLER_ARG") or 1.0)))
    except ValueError:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG={os.environ['OTEL_TRACES_SAMPLER_ARG']!r} is not a ratio") from None
    if record_unsampled:
        return _record_unsampled_class()(sampling.ParentBased(sampling.TraceIdRatioBased(ratio))), None
    return sampling.ParentBased(sampling.ALWAYS_ON), ratio


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


__all__ = ["KEEP", "MAX_HELD_TRACES", "KeepOutcomes", "sdk_sampler"]
