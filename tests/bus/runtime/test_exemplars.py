"""Exemplars of the decision latency (:mod:`bus.runtime.exemplars`): in the OpenMetrics exposition
only, read back by prometheus-client's strict OpenMetrics parser; the classic text has none."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from bus.runtime.metrics import Metrics
from tests.deploy.promtool import promtool

pytestmark = pytest.mark.system  # promtool runs as a process

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_an_exemplar_names_the_trace_of_its_bucket(tmp_path: Path) -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.init()
    metrics.child(metrics.decision_latency, "PreToolUse").observe(0.0003)
    metrics.exemplars.note(metrics.decision_latency, ("PreToolUse",), 0.0003, TRACE)
    metrics.exemplars.note(metrics.decision_latency, ("Stop",), 42.0, "0" * 31 + "1")  # the +Inf bucket
    body, content_type = metrics.render(openmetrics=True)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}  # type: ignore[no-untyped-call]
    found = {
        (s.labels["event"], s.labels["le"]): s.exemplar
        for s in families["hookbus_decision_latency_seconds"].samples
        if s.exemplar is not None
    }
    assert set(found) == {("PreToolUse", "0.0005"), ("Stop", "+Inf")}
    assert found["PreToolUse", "0.0005"].labels == {"trace_id": TRACE}
    assert found["PreToolUse", "0.0005"].value == 0.0003
    classic, classic_type = metrics.render()
    assert classic_type.startswith("text/plain") and b"trace_id" not in classic and b"# EOF" not in classic
    checked = promtool("check", "metrics", cwd=tmp_path, stdin=classic.decode())
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_latest_observation_wins_its_bucket() -> None:
    metrics = Metrics(CollectorRegistry())
    for trace in ("a" * 32, "b" * 32):
        metrics.child(metrics.decision_latency, "PreToolUse").observe(0.002)
        metrics.exemplars.note(metrics.decision_latency, ("PreToolUse",), 0.002, trace)
    text = metrics.render(openmetrics=True)[0].decode()
    assert 'trace_id="bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"' in text and "aaaa" not in text
