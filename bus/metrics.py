"""Prometheus metrics of hookbus (contract §5 names, plus a few more).

Under ``hookbus up`` every role runs in its own process with ``PROMETHEUS_MULTIPROC_DIR``
set, and the gateway's ``/metrics`` aggregates all of them; a role started on its own (one
container each) serves its own registry.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

DECISIONS = Counter(
    "hookbus_decisions_total", "Decisions returned to agents, by event and decision", ["event", "decision"]
)
DECISION_LATENCY = Histogram(
    "hookbus_decision_latency_seconds",
    "End-to-end decision latency at the gateway",
    ["event"],
    buckets=_LATENCY_BUCKETS,
)
FAIL_OPEN = Counter(
    "hookbus_fail_open_total", "Requests answered with no decision because something failed", ["event", "reason"]
)
HOOK_DURATION = Histogram(
    "hookbus_hook_duration_seconds", "Duration of one handler run", ["type"], buckets=_LATENCY_BUCKETS
)
ASYNC_JOBS = Counter("hookbus_async_jobs_total", "Async (fire-and-forget) hook jobs by status", ["status"])
FAIL_CLOSED = Counter(
    "hookbus_fail_closed_total", "Handler failures turned into deny/block by failMode: closed", ["event", "type"]
)
SHADOW_DECISIONS = Counter(
    "hookbus_shadow_decisions_total", "Would-be decisions of shadow handlers (never enforced)", ["event", "decision"]
)
STOP_GUARD = Counter(
    "hookbus_stop_guard_overrides_total", "Stop/SubagentStop blocks turned into allows by the Stop guard", ["event"]
)
HOOK_ERRORS = Counter("hookbus_hook_errors_total", "Handler runs that failed or timed out", ["type", "outcome"])
EXPIRED = Counter(
    "hookbus_expired_total", "Blocking events a dispatcher dropped because their deadline had passed", ["event"]
)
DEAD_LETTERS = Counter("hookbus_dead_letters_total", "Stream entries moved to the dead-letter stream", ["stream"])
REJECTED = Counter("hookbus_rejected_requests_total", "Requests refused at the gateway", ["code"])
SPOOLED = Counter(
    "hookbus_spooled_events_total", "Non-blocking events held in memory while Redis was down", ["status"]
)


@functools.lru_cache(maxsize=4096)
def child(metric: Counter | Histogram, *labels: str) -> Any:
    """``metric.labels(*labels)``, looked up once (every label set here is bounded)."""
    return metric.labels(*labels)


def hook_duration(handler_type: str) -> Histogram:
    """The ``hookbus_hook_duration_seconds`` child of one handler type."""
    return child(HOOK_DURATION, handler_type)  # type: ignore[no-any-return]


def event_label(event: str) -> str:
    """Event label for metrics; unknown names collapse to ``other`` (bounded cardinality)."""
    from bus.events import EVENTS

    return event if event in EVENTS else "other"


def render() -> tuple[bytes, str]:
    """The exposition text of this process, or of all processes in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


def start_http_server(port: int | None, host: str = "127.0.0.1") -> None:
    """Serve this process's metrics on ``host:port`` (nothing when no port is given)."""
    if port:
        import prometheus_client

        prometheus_client.start_http_server(port, addr=host)


__all__ = [
    "ASYNC_JOBS",
    "DEAD_LETTERS",
    "DECISIONS",
    "DECISION_LATENCY",
    "EXPIRED",
    "FAIL_CLOSED",
    "FAIL_OPEN",
    "HOOK_DURATION",
    "HOOK_ERRORS",
    "REJECTED",
    "SHADOW_DECISIONS",
    "SPOOLED",
    "STOP_GUARD",
    "child",
    "event_label",
    "hook_duration",
    "render",
    "start_http_server",
]
