"""The gateway's part of an event's trace: the request span, its append and its wait for the reply.

Created only while :data:`bus.runtime.tracing.on` (the hooks endpoint checks it first). The
request span continues the agent's trace when the request carries a W3C ``traceparent``, else
it starts one; its ``traceparent`` goes into the stream entry (:attr:`Request.trace`), so every
dispatcher that reads the event continues the same trace. The append and the wait are timed
with two clock readings each and written as child spans when the request ends (no context
switch on the hot path); an unsampled request writes none.

A sampled ``traceparent`` forces the trace to be kept, and its spans share this process's export
queue with every tenant's kept traces (the queue drops its oldest spans when full). So each
tenant may force :attr:`TraceSettings.forced_per_s <bus.runtime.tracing.TraceSettings.forced_per_s>`
traces a second (:class:`ForcedTraces`); past that its sampled flag is not followed, and the
request is counted in ``hookbus_traces_forced_ignored_total``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from bus.hooks.decisions import Decision, RecordOutcome
from bus.runtime import tracing
from bus.stream.protocol import Request

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.context import Context
    from prometheus_client import Counter

    from bus.runtime.metrics import Metrics


class ForcedTraces:
    """A token bucket per tenant for the traces its callers force with a sampled ``traceparent``.

    Local to this process, as its span queue is. ``per_s`` traces a second, a burst of a
    second's worth (at least one); 0 follows no caller's sampled flag. ``ignored`` counts the
    requests whose flag was not followed. The tenants are the authenticated ones, so the
    buckets are as many as the tenants configured.
    """

    __slots__ = ("buckets", "burst", "clock", "ignored", "per_s")

    def __init__(self, per_s: float, ignored: Counter, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self.clock = clock
        self.burst = max(1.0, per_s) if per_s > 0 else 0.0
        self.ignored = ignored
        #: tenant -> (tokens left, the clock's reading at the last take).
        self.buckets: dict[str, tuple[float, float]] = {}

    def admit(self, tenant: str) -> bool:
        """Take a token from ``tenant``'s bucket: False (and counted) when there is none."""
        now = self.clock()
        tokens, last = self.buckets.get(tenant, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.per_s)
        admitted = tokens >= 1
        self.buckets[tenant] = (tokens - 1 if admitted else tokens, now)
        if not admitted:
            self.ignored.inc()
        return admitted


class GatewayTrace:
    """One hook request's spans."""

    __slots__ = ("append_ns", "appended_ns", "replied_ns", "request", "span", "token")

    @classmethod
    def begin(
        cls, headers: dict[bytes, bytes], request: Request, agent: str, started: float, forced: ForcedTraces
    ) -> GatewayTrace | None:
        """The request's trace; None when the sampler leaves a new trace out (its ids still go on
        in the stream entry, with the sampled flag off, and no span is built). A sampled
        ``traceparent`` past its tenant's share in ``forced`` continues the caller's trace unsampled."""
        header = headers.get(b"traceparent")
        if header is None and (left_out := tracing.left_out()) is not None:
            request.trace = left_out
            return None
        parent = tracing.parent_context(header)
        if parent is not None and tracing.caller_sampled(parent) and not forced.admit(request.tenant):
            parent = tracing.unsampled(parent)
        return cls(parent, request, agent, started)

    def __init__(self, parent: Context | None, request: Request, agent: str, started: float) -> None:
        self.request = request
        self.append_ns = self.appended_ns = self.replied_ns = 0
        self.token: object | None = None
        # The request began before it was read and parsed: its span starts then.
        started_ns = time.time_ns() - int((time.perf_counter() - started) * 1e9)
        span = self.span = tracing.start(
            "hookbus.request",
            parent=parent,
            kind="server",
            start_ns=started_ns,
            attributes={
                "hookbus.event": request.event,
                "hookbus.event_id": request.event_id,
                "hookbus.tenant": request.tenant,
                "hookbus.agent": agent,
                "hookbus.policy": request.policy,
            },
        )
        request.trace = tracing.traceparent(span)
        # Current while the request runs when it is recorded (the log lines of its task name it).
        if span.is_recording():
            self.token = tracing.enter(span)

    def appending(self) -> None:
        self.append_ns = time.time_ns()

    def appended(self) -> None:
        self.appended_ns = time.time_ns()

    async def append(self, appending: Awaitable[None]) -> None:
        """Await ``appending`` (an append), timed as the append."""
        self.appending()
        await appending
        self.appended()

    def replied(self) -> None:
        self.replied_ns = time.time_ns()

    def finish(
        self,
        metrics: Metrics,
        label: str,
        latency_s: float,
        decision: str,
        outcome: str,
        fail_open: str | None,
        always: frozenset[str],
    ) -> None:
        """End the request span with what the agent was told (and the exemplar of its latency)."""
        span = self.span
        if self.token is None:
            return
        tracing.leave(self.token)
        end_ns = time.time_ns()
        if self.append_ns:
            appended_ns = self.appended_ns or end_ns
            tracing.start("hookbus.append", parent=span, kind="producer", start_ns=self.append_ns).end(appended_ns)
            if self.appended_ns and self.request.blocking:
                waited = tracing.start("hookbus.wait_reply", parent=span, start_ns=appended_ns)
                waited.set_attribute("hookbus.replied", bool(self.replied_ns))
                waited.end(self.replied_ns or end_ns)
        span.set_attribute("hookbus.decision", decision)
        span.set_attribute("hookbus.outcome", outcome)
        if fail_open:
            span.set_attribute("hookbus.fail_open", fail_open)
        if ("deny" in always and decision == Decision.DENY) or (
            "fail-open" in always and (fail_open is not None or outcome == RecordOutcome.FAIL_OPEN)
        ):
            span.set_attribute(tracing.KEEP, True)
        trace_id = tracing.trace_id(span)
        if trace_id and (span.get_span_context().trace_flags.sampled or span.attributes.get(tracing.KEEP)):  # type: ignore[attr-defined]
            metrics.exemplars.note(metrics.decision_latency, (label,), latency_s, trace_id)
        span.end(end_ns)


__all__ = ["ForcedTraces", "GatewayTrace"]
