"""A dispatcher's part of an event's trace: the read, then the settle.

Called only while :data:`bus.runtime.tracing.on`. ``hookbus.dispatch`` continues the trace
whose ``traceparent`` the gateway put in the stream entry (a new trace for an entry without
one); its ``hookbus.stream.dwell_ms`` is how long the event waited between the gateway and
this read. The evaluation and each handler are its children (:mod:`workers.engine.evaluation`).
``hookbus.settle`` runs from queuing the settlement to the outbox writing it, and the
dispatch span ends with it; the span carries the decision and the outcome, and
:data:`bus.runtime.tracing.KEEP` when ``HOOKBUS_TRACE_ALWAYS`` asks to keep it.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from bus.hooks.decisions import Decision, RecordOutcome
from bus.runtime import tracing
from bus.stream.protocol import LogRecord, Request, now_ms

if TYPE_CHECKING:
    from opentelemetry.trace import Span

#: Settlements traced at once; past it the oldest spans are ended as they are (a settle that never came).
MAX_OPEN: int = 16384


class DispatchTraces:
    """The open dispatch and settle spans of one dispatcher, by stream entry."""

    def __init__(self, always: frozenset[str]) -> None:
        self.always = always
        self.open: collections.OrderedDict[tuple[str, bytes], tuple[Span, Span]] = collections.OrderedDict()

    def read(self, stream: str, entry_id: bytes, request: Request) -> Span | None:
        """Start the entry's dispatch span, current for the rest of its task (its evaluation);
        None for an event whose trace is not sampled (unless its outcome may keep it)."""
        if request.trace and not self.always and not tracing.sampled(request.trace):
            return None
        span = tracing.start(
            "hookbus.dispatch",
            parent=tracing.parent_context(request.trace),
            kind="consumer",
            attributes={
                "hookbus.event": request.event,
                "hookbus.event_id": request.event_id,
                "hookbus.tenant": request.tenant,
                "hookbus.agent": request.agent,
                "hookbus.stream": stream,
                "hookbus.entry_id": entry_id.decode("latin-1"),
                "hookbus.stream.dwell_ms": max(0, now_ms() - request.received_ms),
            },
        )
        tracing.enter(span)  # the task ends with the entry: nothing to leave
        request.traced = span.is_recording()
        return span

    def settling(self, stream: str, entry_id: bytes, span: Span, record: LogRecord) -> None:
        """Name the trace in ``record`` and start the settle span (ended by :meth:`settled`)."""
        if span.is_recording():
            span.set_attribute("hookbus.decision", record.decision)
            span.set_attribute("hookbus.outcome", record.outcome)
            if record.fail_open:
                span.set_attribute("hookbus.fail_open", record.fail_open)
            if ("deny" in self.always and record.decision == Decision.DENY) or (
                "fail-open" in self.always and record.outcome == RecordOutcome.FAIL_OPEN
            ):
                span.set_attribute(tracing.KEEP, True)
            if span.get_span_context().trace_flags.sampled or span.attributes.get(tracing.KEEP):  # type: ignore[attr-defined]
                record.trace_id = tracing.trace_id(span)
        settle = tracing.start("hookbus.settle", parent=span)
        self.open[stream, entry_id] = (span, settle)
        if len(self.open) > MAX_OPEN:
            _, (oldest, oldest_settle) = self.open.popitem(last=False)
            oldest_settle.end()
            oldest.end()

    def settled(self, stream: str, entry_id: bytes) -> None:
        """The outbox wrote (or gave up on) the entry's settlement: end its spans."""
        spans = self.open.pop((stream, entry_id), None)
        if spans is not None:
            spans[1].end()
            spans[0].end()


__all__ = ["DispatchTraces"]
