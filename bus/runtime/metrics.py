"""Prometheus metrics of hookbus (every family, its labels and their bounds: docs/metrics.md).

Under ``hookbus up`` every role runs in its own process with ``PROMETHEUS_MULTIPROC_DIR``
set, and the gateway's ``/metrics`` aggregates all of them; a role started on its own (one
container each) serves its own registry.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hmac
import os
import platform
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from bus.hooks.decisions import Decision, FailOpenReason
from bus.hooks.events import EVENTS, HANDLER_TYPES, STOP_EVENTS

#: A rule decision takes well under a millisecond end to end, so the buckets start at 100 µs.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
#: Up to ``HOOKBUS_DISPATCH_BATCH`` (default 64) entries come back from one read.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

DECISIONS = Counter(
    "hookbus_decisions_total", "Decisions returned to agents, by event and decision", ["event", "decision"]
)
DECISION_LATENCY = Histogram(
    "hookbus_decision_latency_seconds",
    "End-to-end decision latency at the gateway",
    ["event"],
    buckets=LATENCY_BUCKETS,
)
FAIL_OPEN = Counter(
    "hookbus_fail_open_total", "Requests answered with no decision because something failed", ["event", "reason"]
)
HOOK_DURATION = Histogram(
    "hookbus_hook_duration_seconds", "Duration of one handler run", ["type"], buckets=LATENCY_BUCKETS
)
ASYNC_JOBS = Counter("hookbus_async_jobs_total", "Async (fire-and-forget) hook jobs by status", ["status"])
#: An async job's try runs from a millisecond (a function) to a handler's whole timeout.
ASYNC_DURATION_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
ASYNC_JOB_DURATION = Histogram(
    "hookbus_async_job_duration_seconds",
    "Duration of one try of an async hook job, by handler type",
    ["type"],
    buckets=ASYNC_DURATION_BUCKETS,
)
ASYNC_ATTEMPTS = Histogram(
    "hookbus_async_attempts",
    "Tries one async hook delivery took, observed when it ends (delivered or dead-lettered)",
    buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100),
)
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
SPOOLED = Counter("hookbus_spooled_events_total", "Non-blocking events held in memory while Redis was down", ["status"])
REDIS_ERRORS = Counter("hookbus_redis_errors_total", "Redis calls that failed, by operation", ["op"])
HEAD_TIMEOUTS = Counter(
    "hookbus_request_head_timeouts_total", "Connections closed because a request head did not arrive in time"
)
ROLE_RESTARTS = Counter("hookbus_role_restarts_total", "Roles that 'hookbus up' restarted after they crashed", ["role"])
HANDLER_DECISIONS = Counter(
    "hookbus_handler_decisions_total",
    "Decisions by the policy handler that made them (handler = its id in the policy)",
    ["event", "handler", "decision"],
)
TIMEOUTS = Counter(
    "hookbus_timeouts_total", "Blocking work that ran out of time, by stage (queue_wait, handler, reply)", ["stage"]
)
DISPATCH_BATCH = Histogram(
    "hookbus_dispatch_batch_size",
    "Stream entries one dispatcher read returned (reads that returned any)",
    buckets=BATCH_BUCKETS,
)
REPLY_WAIT = Histogram(
    "hookbus_reply_wait_seconds",
    "Time a gateway waited for the dispatchers' reply to a blocking event",
    buckets=LATENCY_BUCKETS,
)
POLICY_LOAD_FAILURES = Counter(
    "hookbus_policy_load_failures_total", "Policy reloads refused because the files did not load"
)
# Gauges of every process (one series per live process under `hookbus up`; a dead one's go).
POLICY_INFO = Gauge(
    "hookbus_policy_info",
    "The policy revision this process enforces (1; 0 for one it enforced before)",
    ["tenant", "version"],
    multiprocess_mode="liveall",
)
BUILD_INFO = Gauge(
    "hookbus_build_info",
    "The hookbus version and Python that run (always 1)",
    ["version", "python"],
    multiprocess_mode="livemax",
)


@dataclasses.dataclass(frozen=True)
class Observed:
    """Gauges of the platform's Redis state, set only by the gateway's observer.

    Created on first use, in the observer's process only: a gauge without labels exists
    (at 0) in every process that creates it, and a dispatcher reporting ``hookbus_redis_up
    0`` would be read as Redis being down.
    """

    redis_up: Gauge
    dispatchers_alive: Gauge
    stream_length: Gauge
    stream_pending: Gauge
    stream_lag: Gauge
    dlq_size: Gauge
    async_queue_depth: Gauge
    async_dead_letters: Gauge
    decision_log_length: Gauge
    decision_log_age: Gauge
    audit_lag: Gauge
    audit_lag_seconds: Gauge


@functools.cache
def observed() -> Observed:
    """The observer's gauges (registered on the first call)."""
    return Observed(
        redis_up=Gauge(
            "hookbus_redis_up", "Whether the last look at Redis succeeded (1) or not (0)", multiprocess_mode="livemin"
        ),
        dispatchers_alive=Gauge(
            "hookbus_dispatchers_alive", "Dispatchers whose heartbeat is under 10 s old", multiprocess_mode="livemax"
        ),
        stream_length=Gauge(
            "hookbus_stream_length", "Entries in a hookbus stream (XLEN)", ["stream"], multiprocess_mode="livemax"
        ),
        stream_pending=Gauge(
            "hookbus_stream_pending",
            "Entries delivered to a consumer group and not yet acknowledged",
            ["stream", "group"],
            multiprocess_mode="livemax",
        ),
        stream_lag=Gauge(
            "hookbus_stream_lag",
            "Entries of a stream not yet delivered to a consumer group",
            ["stream", "group"],
            multiprocess_mode="livemax",
        ),
        dlq_size=Gauge("hookbus_dlq_size", "Entries in the dead-letter stream", multiprocess_mode="livemax"),
        async_dead_letters=Gauge(
            "hookbus_async_dead_letters",
            "Entries in the async dead-letter stream (hookbus dlq)",
            multiprocess_mode="livemax",
        ),
        async_queue_depth=Gauge(
            "hookbus_async_queue_depth", "Async hook jobs waiting in the arq queue", multiprocess_mode="livemax"
        ),
        decision_log_length=Gauge(
            "hookbus_decision_log_length", "Records in the decision log", multiprocess_mode="livemax"
        ),
        decision_log_age=Gauge(
            "hookbus_decision_log_age_seconds",
            "Age of the oldest record in the decision log",
            multiprocess_mode="livemax",
        ),
        audit_lag=Gauge(
            "hookbus_audit_consumer_lag",
            "Decision-log records an audit consumer group has not acknowledged yet (pending + not delivered)",
            ["group"],
            multiprocess_mode="livemax",
        ),
        audit_lag_seconds=Gauge(
            "hookbus_audit_consumer_lag_seconds",
            "Age of the oldest decision-log record an audit consumer group has not acknowledged (0: none)",
            ["group"],
            multiprocess_mode="livemax",
        ),
    )


#: The label values each labelled family starts with (at 0), so that rates and alerts work
#: before the first event. Event labels are limited to the blocking events.
DECISION_VALUES = tuple(Decision)
FAIL_OPEN_REASONS = tuple(FailOpenReason)
ASYNC_STATUSES = ("queued", "succeeded", "retried", "failed", "dead", "dropped")
REJECTED_CODES = ("400", "401", "413", "429")
SPOOL_STATUSES = ("held", "flushed", "dropped")
ROLES = ("gateway", "dispatcher", "worker")
TIMEOUT_STAGES = ("queue_wait", "handler", "reply")
#: Every ``op`` of ``hookbus_redis_errors_total`` (a new call site adds its name here).
REDIS_ERROR_OPS = ("claim", "observe", "read", "settle", "worker", "xadd")
#: The ``tenant`` of ``hookbus_policy_info``: one policy serves every tenant today.
POLICY_TENANT = "default"


@functools.lru_cache(maxsize=4096)
def child(metric: Counter | Histogram | Gauge, *labels: str) -> Any:
    """``metric.labels(*labels)``, looked up once (every label set here is bounded)."""
    return metric.labels(*labels)


def hook_duration(handler_type: str) -> Histogram:
    """The ``hookbus_hook_duration_seconds`` child of one handler type."""
    return child(HOOK_DURATION, handler_type)  # type: ignore[no-any-return]


def event_label(event: str) -> str:
    """Event label for metrics; unknown names collapse to ``other`` (bounded cardinality)."""
    return event if event in EVENTS else "other"


_policy_revision: dict[str, str] = {}


def set_policy_revision(revision: str, tenant: str = POLICY_TENANT) -> None:
    """Report the policy revision this process enforces from now on (``hookbus_policy_info``)."""
    previous = _policy_revision.get(tenant)
    if previous == revision:
        return
    if previous is not None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            POLICY_INFO.labels(tenant, previous).set(0)  # series cannot be removed from the shared files
        else:
            POLICY_INFO.remove(tenant, previous)
    POLICY_INFO.labels(tenant, revision).set(1)
    _policy_revision[tenant] = revision


def build_version() -> str:
    """The installed hookbus version, or ``unknown`` (run from a source tree without installing)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hookbus")
    except PackageNotFoundError:
        return "unknown"


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
        child(ASYNC_JOB_DURATION, handler_type)
        for outcome in ("error", "timeout"):
            child(HOOK_ERRORS, handler_type, outcome)
    for event in sorted(STOP_EVENTS):
        child(STOP_GUARD, event)
    for family, values in (
        (ASYNC_JOBS, ASYNC_STATUSES),
        (REJECTED, REJECTED_CODES),
        (SPOOLED, SPOOL_STATUSES),
        (DEAD_LETTERS, ("blocking", "events")),
        (ROLE_RESTARTS, ROLES),
        (TIMEOUTS, TIMEOUT_STAGES),
        (REDIS_ERRORS, REDIS_ERROR_OPS),
    ):
        for value in values:
            child(family, value)
    BUILD_INFO.labels(build_version(), platform.python_version()).set(1)


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
            self._send(
                404, b'{"error": "not_found", "detail": "this port serves /metrics and /healthz"}', "application/json"
            )
        elif not authorized(self.headers.get("Authorization"), self.token):
            self._send(
                401,
                b'{"error": "unauthorized", "detail": "missing or wrong metrics token"}',
                "application/json",
                {"WWW-Authenticate": "Bearer"},
            )
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
    "ASYNC_ATTEMPTS",
    "ASYNC_JOBS",
    "ASYNC_JOB_DURATION",
    "BUILD_INFO",
    "DEAD_LETTERS",
    "DECISIONS",
    "DECISION_LATENCY",
    "DISPATCH_BATCH",
    "EXPIRED",
    "FAIL_CLOSED",
    "FAIL_OPEN",
    "HANDLER_DECISIONS",
    "HEAD_TIMEOUTS",
    "HOOK_DURATION",
    "HOOK_ERRORS",
    "LATENCY_BUCKETS",
    "POLICY_INFO",
    "POLICY_LOAD_FAILURES",
    "REDIS_ERRORS",
    "REJECTED",
    "REPLY_WAIT",
    "ROLE_RESTARTS",
    "SHADOW_DECISIONS",
    "SPOOLED",
    "STOP_GUARD",
    "TIMEOUTS",
    "Observed",
    "authorized",
    "build_version",
    "child",
    "event_label",
    "hook_duration",
    "init_metrics",
    "observed",
    "render",
    "set_policy_revision",
    "start_http_server",
]
