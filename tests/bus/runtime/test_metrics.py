"""hookbus's Prometheus metrics (:mod:`bus.runtime.metrics`): cached children, event labels, rendering.

In-process tests read this process's registry. Multiprocess mode, which ``prometheus_client``
picks at import time, runs in real ``python`` children sharing a ``PROMETHEUS_MULTIPROC_DIR``.
The metrics server, its token and the series created at start-up are ``test_metrics_server``'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from bus.hooks.events import EVENTS
from bus.runtime import metrics
from bus.runtime.metrics import Metrics
from tests.conftest import exposition_samples, python

# -- child() and the label helpers ----------------------------------------------------------------


@pytest.fixture
def m() -> Metrics:
    """Metrics of this test alone (a registry of its own)."""
    return Metrics()


def test_child_is_looked_up_once_per_label_set(m: Metrics) -> None:
    first = m.child(m.decisions, "Stop", "block")
    assert m.child(m.decisions, "Stop", "block") is first
    assert first is m.decisions.labels("Stop", "block")  # the registry's own child
    assert m.child(m.decisions, "Stop", "none") is not first
    assert m.child(m.fail_open, "Stop", "block") is not first  # same labels, another family


def test_child_counts_into_the_family(m: Metrics) -> None:
    before = m.value("hookbus_decisions_total", event="SubagentStop", decision="block")
    m.child(m.decisions, "SubagentStop", "block").inc()
    m.child(m.decisions, "SubagentStop", "block").inc(2)
    assert m.value("hookbus_decisions_total", event="SubagentStop", decision="block") - before == 3


def test_child_with_the_wrong_labels_raises(m: Metrics) -> None:
    with pytest.raises(ValueError, match="label"):
        m.child(m.decisions, "Stop")


def test_hook_duration_is_the_histogram_child_of_a_handler_type(m: Metrics) -> None:
    assert m.child(m.hook_duration, "command") is m.child(m.hook_duration, "command")
    count = m.value("hookbus_hook_duration_seconds_count", type="command")
    fast = m.value("hookbus_hook_duration_seconds_bucket", type="command", le="0.005")
    m.child(m.hook_duration, "command").observe(0.003)
    m.child(m.hook_duration, "command").observe(3.0)
    assert m.value("hookbus_hook_duration_seconds_count", type="command") - count == 2
    assert m.value("hookbus_hook_duration_seconds_bucket", type="command", le="0.005") - fast == 1


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_known_events_are_their_own_label(event: str) -> None:
    assert metrics.event_label(event) == event


@pytest.mark.parametrize("event", ["", "pretooluse", "PreToolUse ", "MyPluginEvent", "x" * 10_000, "Stop\u00e9"])
def test_unknown_events_collapse_to_other(event: str) -> None:
    assert metrics.event_label(event) == "other"


# -- render() --------------------------------------------------------------------------------------


def test_render_in_one_process_is_its_own_registry(monkeypatch: pytest.MonkeyPatch, m: Metrics) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    m.child(m.rejected, "429").inc()
    body, content_type = m.render()
    assert content_type == CONTENT_TYPE_LATEST
    found = exposition_samples(body)
    assert found[("hookbus_rejected_requests_total", frozenset({("code", "429")}))] == 1
    assert m.value("hookbus_rejected_requests_total", code="429") == 1
    # A test's registry holds its families only; the process's also has the default collectors.
    assert not any(name == "python_info" for name, _ in found)


@pytest.mark.system
def test_render_in_multiprocess_mode_adds_up_every_process(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (2, 3):  # two roles, each its own process, each gone by the time of the scrape
        python(
            f"""
            from bus.runtime.metrics import process_metrics
            metrics = process_metrics()
            metrics.child(metrics.decisions, "PreToolUse", "deny").inc({n})
            metrics.child(metrics.hook_duration, "rule").observe(0.001)
        """,
            env,
        )
    assert len(list(tmp_path.glob("*.db"))) >= 2  # (each process wrote files of its own)
    out = python(
        """
        import sys
        from bus.runtime.metrics import process_metrics
        metrics = process_metrics()
        body, content_type = metrics.render()
        print(content_type)
        sys.stdout.write(body.decode())
    """,
        env,
    )
    content_type, _, body = out.partition("\n")
    assert content_type == CONTENT_TYPE_LATEST
    found = exposition_samples(body)
    assert found[("hookbus_decisions_total", frozenset({("event", "PreToolUse"), ("decision", "deny")}))] == 5
    assert found[("hookbus_hook_duration_seconds_count", frozenset({("type", "rule")}))] == 2
    assert not any(name == "python_info" for name, _ in found)  # only what the processes wrote
