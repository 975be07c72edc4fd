"""A dispatcher's spans of one entry (:mod:`workers.dispatcher.tracing`), in this process: the
dispatch span continues the gateway's trace from the entry, the settle is its child, the record
names the trace, and an unsampled entry builds nothing."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from bus.runtime import tracing
from bus.stream.protocol import LogRecord, Request, now_ms
from tests.otlp import finished, traced_in_process
from workers.dispatcher.tracing import DispatchTraces

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def entry(flags: str) -> Request:
    return Request("e1", "PreToolUse", "acme", b"{}", now_ms() - 40, reply_to="r", trace=f"00-{TRACE}-{SPAN}-{flags}")


def in_a_task(run: Callable[[], Any]) -> Any:
    """``run`` in a context of its own, as each entry's task runs (its current span stays there)."""
    return contextvars.copy_context().run(run)


def record(decision: str = "deny") -> LogRecord:
    return LogRecord("e1", "PreToolUse", "acme", "s", "decided", decision, {}, b"{}", 1, 2)


def test_the_dispatch_span_continues_the_entrys_trace_until_the_settle_is_written() -> None:
    with traced_in_process(ratio=0.0) as exporter:
        traces = DispatchTraces(frozenset())
        request = entry("01")
        span = in_a_task(lambda: (traces.read("hookbus:{p0}:blocking", b"1-0", request), tracing.recording()))
        # Current for the rest of the task: the evaluation's spans nest under it.
        assert span[1] and request.traced
        span = span[0]
        written = record()
        traces.settling("hookbus:{p0}:blocking", b"1-0", span, written)
        assert written.trace_id == TRACE
        assert finished(exporter) == []  # both wait for the outbox
        traces.settled("hookbus:{p0}:blocking", b"1-0")
        traces.settled("hookbus:{p0}:blocking", b"1-0")  # a second call (refused, then written) is harmless
        spans = {s.name: s for s in finished(exporter)}
    dispatch, settle = spans["hookbus.dispatch"], spans["hookbus.settle"]
    assert dispatch.parent is not None and dispatch.parent.span_id == int(SPAN, 16) and dispatch.parent.is_remote
    assert settle.parent is not None and dispatch.context is not None
    assert settle.parent.span_id == dispatch.context.span_id
    attributes = dict(dispatch.attributes or {})
    dwell = attributes["hookbus.stream.dwell_ms"]
    assert isinstance(dwell, int) and dwell >= 40
    assert (attributes["hookbus.decision"], attributes["hookbus.outcome"]) == ("deny", "decided")
    assert attributes["hookbus.entry_id"] == "1-0" and "hookbus.keep" not in attributes


def test_an_unsampled_entry_builds_no_span_unless_its_outcome_may_keep_it() -> None:
    with traced_in_process(ratio=1.0) as exporter:
        request = entry("00")
        assert in_a_task(lambda: DispatchTraces(frozenset()).read("s", b"1-0", request)) is None
        assert not request.traced
        assert finished(exporter) == []
    with traced_in_process(ratio=1.0, always=frozenset({"deny"})) as exporter:
        traces = DispatchTraces(frozenset({"deny"}))
        for entry_id, decision in ((b"1-0", "allow"), (b"2-0", "deny")):
            request = entry("00")
            span = in_a_task(lambda: traces.read("s", entry_id, request))  # noqa: B023
            assert span is not None and request.traced
            written = record(decision)
            traces.settling("s", entry_id, span, written)
            traces.settled("s", entry_id)
            assert bool(written.trace_id) is (decision == "deny")
        kept = [s for s in finished(exporter) if s.name == "hookbus.dispatch"]
    assert [dict(s.attributes or {})["hookbus.decision"] for s in kept] == ["deny"]
