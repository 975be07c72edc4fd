"""Tracing's switch, its sampler and keep-on-outcome processor, and what the logs carry
(:mod:`bus.runtime.tracing`), in one process with an in-memory exporter."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bus.errors import ConfigError
from bus.runtime import tracing
from bus.runtime.logs import JsonFormatter
from bus.runtime.settings import Settings
from bus.runtime.tracing import TraceSettings


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "hookbus"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_off_unless_an_otlp_exporter_is_named(env: dict[str, str], enabled: bool) -> None:
    assert Settings.from_env(env).tracing.enabled is enabled


def test_trace_always_takes_fail_open_and_deny_only() -> None:
    settings = Settings.from_env({"HOOKBUS_TRACE_ALWAYS": "fail-open, deny"})
    assert settings.tracing.always == frozenset({"fail-open", "deny"})
    with pytest.raises(ConfigError, match="HOOKBUS_TRACE_ALWAYS: allow is not one of"):
        Settings.from_env({"HOOKBUS_TRACE_ALWAYS": "deny,allow"})
    with pytest.raises(ConfigError, match="OTLP only"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_forced_traces_per_tenant_are_a_rate_of_zero_or_more() -> None:
    assert Settings.from_env({}).tracing.forced_per_s == 10.0
    assert Settings.from_env({"HOOKBUS_TRACE_FORCED_PER_S": "0.5"}).tracing.forced_per_s == 0.5
    assert Settings.from_env({"HOOKBUS_TRACE_FORCED_PER_S": "0"}).tracing.forced_per_s == 0.0
    for wrong in ("-1", "many", "inf", "nan"):
        with pytest.raises(ConfigError, match="HOOKBUS_TRACE_FORCED_PER_S="):
            Settings.from_env({"HOOKBUS_TRACE_FORCED_PER_S": wrong})


@pytest.mark.system  # a Python process of its own, with no OTEL_* set
def test_with_tracing_off_the_sdk_is_never_imported() -> None:
    """A gateway, a dispatcher and a worker's modules, and a hook request through the app, load no SDK."""
    code = (
        "import sys\n"
        "import gateway.app, workers.dispatcher.answering, workers.jobs.worker, bus.runtime.logs\n"
        "from bus.runtime import tracing\n"
        "from bus.runtime.settings import Settings\n"
        "settings = Settings.from_env({})\n"
        "tracing.configure(settings.tracing, 'gateway')\n"
        "assert not tracing.on\n"
        "tracing.annotate('x', 1); tracing.inject({}); assert tracing.log_ids() is None\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process for the test (always keep ``deny``), at a 0 ratio; off after."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    exporter = InMemorySpanExporter()
    tracing.configure(TraceSettings(enabled=True, always=frozenset({"deny"})), "test", exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()
    assert not tracing.on


def finished(exporter: InMemorySpanExporter) -> list[str]:
    tracing._tracer.span_processor.force_flush()  # type: ignore[union-attr]
    return sorted(span.name for span in exporter.get_finished_spans())


def test_an_unsampled_trace_is_dropped_unless_its_root_asks_to_keep_it(exported: InMemorySpanExporter) -> None:
    for keep in (False, True):
        root = tracing.start(f"root-{keep}")
        assert not root.get_span_context().trace_flags.sampled and root.is_recording()
        tracing.start(f"child-{keep}", parent=root).end()
        if keep:
            root.set_attribute(tracing.KEEP, True)
        root.end()
    assert finished(exported) == ["child-True", "root-True"]
    assert all(span.context is not None and span.context.trace_flags.sampled for span in exported.get_finished_spans())


def test_a_sampled_parent_is_followed_whatever_the_ratio(exported: InMemorySpanExporter) -> None:
    parent = tracing.parent_context("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
    span = tracing.start("continued", parent=parent)
    assert tracing.traceparent(span).startswith("00-" + "ab" * 16 + "-")
    span.end()
    assert finished(exported) == ["continued"]
    (received,) = exported.get_finished_spans()
    assert received.parent is not None and received.parent.span_id == int("cd" * 8, 16)
    assert tracing.parent_context("00-not-a-traceparent") is None and tracing.parent_context(None) is None


def test_json_log_lines_inside_a_span_carry_its_ids(exported: InMemorySpanExporter) -> None:
    span = tracing.start("logged")
    token = tracing.enter(span)
    try:
        record = logging.getLogger("hookbus.test").makeRecord("hookbus.test", logging.INFO, __file__, 1, "hi", (), None)
        line = json.loads(JsonFormatter().format(record))
    finally:
        tracing.leave(token)
        span.end()
    context = span.get_span_context()
    assert (line["trace_id"], line["span_id"]) == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    outside = logging.getLogger("hookbus.test").makeRecord("hookbus.test", logging.INFO, __file__, 1, "hi", (), None)
    assert "trace_id" not in json.loads(JsonFormatter().format(outside))


def test_outbound_headers_get_the_current_traceparent(exported: InMemorySpanExporter) -> None:
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}  # no current span
    span = tracing.start("handler")
    token = tracing.enter(span)
    try:
        tracing.inject(headers)
        tracing.annotate("http.response.status_code", 204)
    finally:
        tracing.leave(token)
        span.end()
    assert headers == {"traceparent": tracing.traceparent(span)}
    assert span.attributes is not None and span.attributes["http.response.status_code"] == 204  # type: ignore[attr-defined]


def test_without_keep_mode_a_left_out_trace_builds_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default sampler at a 0 ratio: new traces get ids (flag off) for those downstream, and
    no span; a sampled parent is still followed."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    exporter = InMemorySpanExporter()
    tracing.configure(TraceSettings(enabled=True), "test", exporter=exporter)
    try:
        left_out = tracing.left_out()
        assert left_out is not None and len(left_out) == 55 and left_out.endswith("-00")
        assert not tracing.sampled(left_out) and tracing.sampled(left_out[:-2] + "01")
        root = tracing.start("root")
        assert not root.is_recording() and root.get_span_context().is_valid
        assert tracing.traceparent(root).endswith("-00")
        root.end()
        tracing.start("child", parent=tracing.parent_context(left_out[:-2] + "01")).end()
        assert finished(exporter) == ["child"]
    finally:
        tracing.shutdown()
