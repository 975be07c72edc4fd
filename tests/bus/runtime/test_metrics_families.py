"""The families that answer the on-call questions (:mod:`bus.runtime.metrics`): buckets, build and
policy info, policy load failures, and which gauges a process exports.

Multiprocess mode (``hookbus up``) runs in real ``python`` children sharing a
``PROMETHEUS_MULTIPROC_DIR``, as the roles do.
"""

from __future__ import annotations

import platform
from importlib.metadata import version
from pathlib import Path

import pytest
from prometheus_client import multiprocess

from bus.policy.reload import PolicyWatcher
from bus.runtime import metrics, metricvalues
from bus.runtime.metrics import Metrics
from bus.runtime.sessionmetrics import session_families
from tests.conftest import REPO, exposition_samples, python

RENDER = """
    import sys
    from bus.runtime.metrics import process_metrics
    metrics = process_metrics()
    sys.stdout.write(metrics.render()[0].decode())
"""


@pytest.fixture
def m() -> Metrics:
    """Metrics of this test alone (a registry of its own)."""
    return Metrics()


def test_latency_buckets_start_at_100_microseconds(m: Metrics) -> None:
    assert metrics.LATENCY_BUCKETS[:4] == (0.0001, 0.00025, 0.0005, 0.001)
    assert list(metrics.LATENCY_BUCKETS) == sorted(metrics.LATENCY_BUCKETS)
    before = m.value("hookbus_decision_latency_seconds_bucket", event="Stop", le="0.0001")
    m.child(m.decision_latency, "Stop").observe(0.00008)
    assert m.value("hookbus_decision_latency_seconds_bucket", event="Stop", le="0.0001") - before == 1
    # A handler's duration and the gateway's wait for a reply have the same first buckets.
    before = m.value("hookbus_hook_duration_seconds_bucket", type="rule", le="0.00025")
    m.child(m.hook_duration, "rule").observe(0.0002)
    assert m.value("hookbus_hook_duration_seconds_bucket", type="rule", le="0.00025") - before == 1
    before = m.value("hookbus_reply_wait_seconds_bucket", le="0.0001")
    m.reply_wait.observe(0.00008)
    assert m.value("hookbus_reply_wait_seconds_bucket", le="0.0001") - before == 1


def test_build_info_names_the_version_and_python(m: Metrics) -> None:
    m.init()
    assert metrics.build_version() == version("hookbus")
    assert m.value("hookbus_build_info", version=version("hookbus"), python=platform.python_version()) == 1


def test_init_metrics_starts_every_timeout_stage_and_redis_operation_at_zero(m: Metrics) -> None:
    m.init()
    text = m.render()[0].decode()
    for stage in ("queue_wait", "handler", "reply"):
        assert f'hookbus_timeouts_total{{stage="{stage}"}}' in text
    for op in metricvalues.REDIS_ERROR_OPS:
        assert f'hookbus_redis_errors_total{{op="{op}"}}' in text


def test_policy_info_follows_the_revision_in_one_process(m: Metrics) -> None:
    m.set_policy_revision("rev-one")
    assert m.value("hookbus_policy_info", tenant="default", version="rev-one") == 1
    m.set_policy_revision("rev-two")
    text = m.render()[0].decode()
    assert 'version="rev-one"' not in text  # removed, not left at 0
    assert m.value("hookbus_policy_info", tenant="default", version="rev-two") == 1


def test_a_refused_reload_counts_as_a_policy_load_failure(tmp_path: Path, m: Metrics) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("hooks: {}\n")
    applied: list[object] = []
    watcher = PolicyWatcher([path], applied.append, metrics=m)
    assert m.value("hookbus_policy_load_failures_total") == 0
    path.write_text("hooks: {PreToolUse: [{hooks: [{type: nonsense}]}]}\n")
    assert not watcher.reload()
    assert m.value("hookbus_policy_load_failures_total") == 1
    path.write_text("hooks: {}\n")
    assert watcher.reload() and len(applied) == 1
    assert m.value("hookbus_policy_load_failures_total") == 1


@pytest.mark.system
def test_only_the_observer_exports_the_redis_state_gauges() -> None:
    # A dispatcher's (or the worker's) /metrics must not say hookbus_redis_up 0 or
    # hookbus_dispatchers_alive 0: alerts take the min and the max over every target.
    text = python("""
        import sys
        from bus.runtime.metrics import process_metrics
        metrics = process_metrics()
        metrics.init()
        sys.stdout.write(metrics.render()[0].decode())
    """)
    names = {name for name, _ in exposition_samples(text)}
    assert "hookbus_build_info" in names
    for gauge in (
        "hookbus_redis_up",
        "hookbus_dispatchers_alive",
        "hookbus_stream_lag",
        "hookbus_dlq_size",
        "hookbus_async_queue_depth",
    ):
        assert gauge not in names


@pytest.mark.system
def test_gauges_of_a_dead_process_go_and_its_counters_stay(tmp_path: Path, m: Metrics) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    pids = [
        python(
            """
        import os
        from bus.runtime.metrics import process_metrics
        metrics = process_metrics()
        metrics.set_policy_revision("old")
        metrics.set_policy_revision("new")
        metrics.observed().redis_up.set(1)
        metrics.child(metrics.timeouts, "reply").inc(2)
        print(os.getpid())
    """,
            env,
        ).strip()
        for _ in range(2)
    ]
    found = exposition_samples(python(RENDER, env))
    for pid in pids:
        # Reloaded: the old revision is 0 (the shared files cannot drop a series), the new one 1.
        assert found[("hookbus_policy_info", frozenset({("tenant", "default"), ("version", "old"), ("pid", pid)}))] == 0
        assert found[("hookbus_policy_info", frozenset({("tenant", "default"), ("version", "new"), ("pid", pid)}))] == 1
    assert found[("hookbus_redis_up", frozenset())] == 1  # livemin: one series for every process
    assert found[("hookbus_timeouts_total", frozenset({("stage", "reply")}))] == 4

    multiprocess.mark_process_dead(int(pids[0]), str(tmp_path))  # type: ignore[no-untyped-call]
    found = exposition_samples(python(RENDER, env))
    assert {dict(labels).get("pid") for name, labels in found if name == "hookbus_policy_info"} == {pids[1]}
    assert found[("hookbus_timeouts_total", frozenset({("stage", "reply")}))] == 4  # counted work stays counted
    multiprocess.mark_process_dead(int(pids[1]), str(tmp_path))  # type: ignore[no-untyped-call]
    names = {name for name, _ in exposition_samples(python(RENDER, env))}
    assert "hookbus_redis_up" not in names and "hookbus_policy_info" not in names


def defined_families() -> dict[str, tuple[str, ...]]:
    """Every family bus/runtime/metrics.py defines (the observer's gauges too): exposed name -> labels."""
    from prometheus_client.metrics import MetricWrapperBase

    m = Metrics()
    found: list[MetricWrapperBase] = [value for value in vars(m).values() if isinstance(value, MetricWrapperBase)]
    observed = m.observed()
    found += [getattr(observed, name) for name in observed.__dataclass_fields__]
    audit = m.audit()
    found += [getattr(audit, name) for name in audit.__dataclass_fields__]
    approvals = m.approvals
    found += [getattr(approvals, name) for name in approvals.__dataclass_fields__]
    sessions = session_families(m)
    found += [getattr(sessions, name) for name in sessions.__dataclass_fields__]
    families: dict[str, tuple[str, ...]] = {}
    for family in found:
        name = family._name + ("_total" if family._type == "counter" else "")
        families[name] = tuple(family._labelnames)
    return families


def test_the_deploy_tests_know_every_family_by_name() -> None:
    from tests.deploy.metric_names import DEFINED_METRICS, PLANNED_METRICS

    assert set(defined_families()) == DEFINED_METRICS
    assert not PLANNED_METRICS


def test_docs_list_every_family_with_its_labels() -> None:
    docs = (REPO / "docs" / "metrics.md").read_text()
    for name, labels in defined_families().items():
        rows = [line for line in docs.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, name
        cells = rows[0].split("|")
        assert cells[3].strip() == (", ".join(f"`{label}`" for label in labels) or "\N{EN DASH}"), name
