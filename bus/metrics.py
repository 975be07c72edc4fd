"""Prometheus metrics of hookbus (every family, its labels and their bounds: docs/metrics.md).

Under ``hookbus up`` every role runs in its own process with ``PROMETHEUS_MULTIPROC_DIR``
set, and the gateway's ``/metrics`` aggregates all of them; a role started on its own (one
container each) serves its own registry.
"""

from __future__ import annotations

import errno
import functools
import hmac
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
REDIS_ERRORS = Counter("hookbus_redis_errors_total", "Redis calls that failed, by operation", ["op"])
HEAD_TIMEOUTS = Counter(
    "hookbus_request_head_timeouts_total", "Connections closed because a request head did not arrive in time"
)
ROLE_RESTARTS = Counter(
    "hookbus_role_restarts_total", "Roles that 'hookbus up' restarted after they crashed", ["role"]
)

#: The label values each labelled family starts with (at 0), so that rates and alerts work
#: before the first event. Event labels are limited to the blocking events.
DECISION_VALUES = ("allow", "deny", "ask", "defer", "block", "none")
FAIL_OPEN_REASONS = ("timeout", "redis_unavailable", "dispatcher_error", "hook_error", "hook_timeout")
ASYNC_STATUSES = ("queued", "succeeded", "retried", "failed", "dead")
REJECTED_CODES = ("400", "401", "413", "429")
SPOOL_STATUSES = ("held", "flushed", "dropped")
ROLES = ("gateway", "dispatcher", "worker")


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


def init_metrics() -> None:
    """Create every labelled series whose label values are known, at 0 (idempotent)."""
    from bus.events import EVENTS, STOP_EVENTS
    from bus.schema import HANDLER_TYPES

    blocking = [name for name, spec in EVENTS.items() if spec.blocking]
    for event in blocking:
        child(DECISION_LATENCY, event)
        child(EXPIRED, event)
        for decision in DECISION_VALUES:
            child(DECISIONS, event, decision)
            child(SHADOW_DECISIONS, event, decision)
        for reason in FAIL_OPEN_REASONS:
            child(FAIL_OPEN, event, reason)
        for handler_type in HANDLER_TYPES:
            child(FAIL_CLOSED, event, handler_type)
    for handler_type in HANDLER_TYPES:
        child(HOOK_DURATION, handler_type)
        for outcome in ("error", "timeout"):
            child(HOOK_ERRORS, handler_type, outcome)
    for event in sorted(STOP_EVENTS):
        child(STOP_GUARD, event)
    for family, values in ((ASYNC_JOBS, ASYNC_STATUSES), (REJECTED, REJECTED_CODES), (SPOOLED, SPOOL_STATUSES),
                           (DEAD_LETTERS, ("blocking", "events")), (ROLE_RESTARTS, ROLES)):
        for value in values:
            child(family, value)


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always true when no token is set)."""
    if not token:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class _Handler(BaseHTTPRequestHandler):
    token: str | None = None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b'{"status": "ok"}', "application/json")
        elif path != "/metrics":
            self._send(404, b'{"error": "not_found", "detail": "this port serves /metrics and /healthz"}',
                       "application/json")
        elif not authorized(self.headers.get("Authorization"), self.token):
            self._send(401, b'{"error": "unauthorized", "detail": "missing or wrong metrics token"}',
                       "application/json", {"WWW-Authenticate": "Bearer"})
        else:
            body, content_type = render()
            self._send(200, body, content_type)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes every few seconds: no access log
        pass


def start_http_server(
    port: int | None, host: str = "127.0.0.1", token: str | None = None
) -> ThreadingHTTPServer | None:
    """Serve ``/metrics`` (bearer ``token`` when set) and ``/healthz`` on ``host:port`` in a daemon thread.

    Returns the server (``shutdown()`` stops it), or None when no port is given; a port in
    use raises ConfigError.
    """
    if not port:
        return None
    from bus.errors import ConfigError

    handler = type("MetricsHandler", (_Handler,), {"token": token})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"metrics port {port} is in use; pass --metrics-port") from exc
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="hookbus-metrics", daemon=True).start()
    return server


__all__ = [
    "ASYNC_JOBS",
    "DEAD_LETTERS",
    "DECISIONS",
    "DECISION_LATENCY",
    "EXPIRED",
    "FAIL_CLOSED",
    "FAIL_OPEN",
    "HEAD_TIMEOUTS",
    "HOOK_DURATION",
    "HOOK_ERRORS",
    "REDIS_ERRORS",
    "REJECTED",
    "ROLE_RESTARTS",
    "SHADOW_DECISIONS",
    "SPOOLED",
    "STOP_GUARD",
    "authorized",
    "child",
    "event_label",
    "hook_duration",
    "init_metrics",
    "render",
    "start_http_server",
]
