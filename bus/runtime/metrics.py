"""Prometheus metrics of hookbus (every family, its labels and their bounds: docs/metrics.md).

Under ``hookbus up`` every role runs in its own process with ``PROMETHEUS_MULTIPROC_DIR``
set, and the gateway's ``/metrics`` aggregates all of them; a role started on its own (one
container each) serves its own registry.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from bus.errors import POLICY_REJECTED_REASONS
from bus.hooks.events import EVENTS, HANDLER_TYPES, STOP_EVENTS
from bus.runtime.approvalmetrics import ApprovalFamilies
from bus.runtime.auditmetrics import AuditFamilies
from bus.runtime.exemplars import OPENMETRICS_CONTENT_TYPE, Exemplars, openmetrics_text
from bus.runtime.metricvalues import (
    ASYNC_DURATION_BUCKETS,
    ASYNC_STATUSES,
    BATCH_BUCKETS,
    DECISION_VALUES,
    FAIL_OPEN_REASONS,
    LATENCY_BUCKETS,
    LIMIT_KINDS,
    LIMIT_SCOPES,
    LIMITED_OUTCOMES,
    POLICY_TENANT,
    REDIS_ERROR_OPS,
    REJECTED_CODES,
    ROLES,
    SPOOL_STATUSES,
    TIMEOUT_STAGES,
    Observed,
)


class Metrics:
    """Every metric family of hookbus, registered on one registry.

    A process builds one at start-up on prometheus-client's default registry
    (:func:`process_metrics`) and passes it down to everything that counts; a test builds
    its own on a fresh ``CollectorRegistry`` and reads its values, shared with no other test.
    Under ``PROMETHEUS_MULTIPROC_DIR`` the values go to the shared files whatever the registry.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        registry = self.registry
        self.decisions = Counter(
            "hookbus_decisions_total",
            "Decisions returned to agents, by event and decision",
            ["event", "decision"],
            registry=registry,
        )
        self.events_by_agent = Counter(
            "hookbus_events_total",
            "Hook events received by the gateway, by the agent that sent them and event",
            ["agent", "event"],
            registry=registry,
        )
        self.decision_latency = Histogram(
            "hookbus_decision_latency_seconds",
            "End-to-end decision latency at the gateway",
            ["event"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.fail_open = Counter(
            "hookbus_fail_open_total",
            "Requests answered with no decision because something failed",
            ["event", "reason"],
            registry=registry,
        )
        self.hook_duration = Histogram(
            "hookbus_hook_duration_seconds",
            "Duration of one handler run",
            ["type"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.async_jobs = Counter(
            "hookbus_async_jobs_total", "Async (fire-and-forget) hook jobs by status", ["status"], registry=registry
        )
        self.async_job_duration = Histogram(
            "hookbus_async_job_duration_seconds",
            "Duration of one try of an async hook job, by handler type",
            ["type"],
            buckets=ASYNC_DURATION_BUCKETS,
            registry=registry,
        )
        self.async_attempts = Histogram(
            "hookbus_async_attempts",
            "Tries one async hook delivery took, observed when it ends (delivered or dead-lettered)",
            buckets=(1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100),
            registry=registry,
        )
        self.fail_closed = Counter(
            "hookbus_fail_closed_total",
            "Handler failures turned into deny/block by failMode: closed",
            ["event", "type"],
            registry=registry,
        )
        self.shadow_decisions = Counter(
            "hookbus_shadow_decisions_total",
            "Would-be decisions of shadow handlers (never enforced)",
            ["event", "decision"],
            registry=registry,
        )
        self.stop_guard = Counter(
            "hookbus_stop_guard_overrides_total",
            "Stop/SubagentStop blocks turned into allows by the Stop guard",
            ["event"],
            registry=registry,
        )
        self.hook_errors = Counter(
            "hookbus_hook_errors_total", "Handler runs that failed or timed out", ["type", "outcome"], registry=registry
        )
        self.expired = Counter(
            "hookbus_expired_total",
            "Blocking events a dispatcher dropped because their deadline had passed",
            ["event"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "hookbus_dead_letters_total",
            "Stream entries moved to the dead-letter stream",
            ["stream"],
            registry=registry,
        )
        self.rejected = Counter(
            "hookbus_rejected_requests_total", "Requests refused at the gateway", ["code"], registry=registry
        )
        self.replies_rejected = Counter(  # bus.runtime.replykey
            "hookbus_replies_rejected_total", "Replies the gateway dropped", ["reason"], registry=registry
        )
        self.refused_inputs = Counter(
            "hookbus_refused_inputs_total", "Hook inputs the gateway denied unjudged", ["reason"], registry=registry
        )
        self.spooled = Counter(
            "hookbus_spooled_events_total",
            "Non-blocking events held in memory while Redis was down",
            ["status"],
            registry=registry,
        )
        self.redis_errors = Counter(
            "hookbus_redis_errors_total", "Redis calls that failed, by operation", ["op"], registry=registry
        )
        self.limited = Counter(
            "hookbus_limited_total",
            "Hook requests over a rate limit or in-flight budget, by limit, scope and what the event got",
            ["limit", "scope", "outcome"],
            registry=registry,
        )
        self.traces_forced_ignored = Counter(
            "hookbus_traces_forced_ignored_total", "Sampled traceparents over their tenant's share", registry=registry
        )
        self.head_timeouts = Counter(
            "hookbus_request_head_timeouts_total",
            "Connections closed because a request head did not arrive in time",
            registry=registry,
        )
        self.role_restarts = Counter(
            "hookbus_role_restarts_total",
            "Roles that 'hookbus up' restarted after they crashed",
            ["role"],
            registry=registry,
        )
        self.handler_decisions = Counter(
            "hookbus_handler_decisions_total",
            "Decisions by the policy handler that made them (handler = its id in the policy)",
            ["event", "handler", "decision"],
            registry=registry,
        )
        self.timeouts = Counter(
            "hookbus_timeouts_total",
            "Blocking work that ran out of time, by stage (queue_wait, handler, reply)",
            ["stage"],
            registry=registry,
        )
        self.dispatch_batch = Histogram(
            "hookbus_dispatch_batch_size",
            "Stream entries one dispatcher read returned (reads that returned any)",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.reply_wait = Histogram(
            "hookbus_reply_wait_seconds",
            "Time a gateway waited for the dispatchers' reply to a blocking event",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.policy_load_failures = Counter(
            "hookbus_policy_load_failures_total",
            "Policy reloads refused because the files did not load",
            registry=registry,
        )
        self.policy_rejected = Counter(
            "hookbus_policy_rejected_total",
            "Pushed policy versions refused because their signature is missing or does not verify",
            ["reason"],
            registry=registry,
        )
        self.frozen_decisions = Counter(
            "hookbus_frozen_decisions_total",
            "Tool calls denied because their tenant is frozen ('hookbus freeze')",
            ["tenant"],
            registry=registry,
        )
        self.freezes_active = Gauge(
            "hookbus_freezes_active",
            "Tenants frozen now, as this process sees them",
            multiprocess_mode="livemax",
            registry=registry,
        )
        self.policy_info = Gauge(
            "hookbus_policy_info",
            "The policy revision this process enforces (1; 0 for one it enforced before)",
            ["tenant", "version"],
            multiprocess_mode="liveall",
            registry=registry,
        )
        self.build_info = Gauge(
            "hookbus_build_info",
            "The hookbus version and Python that run (always 1)",
            ["version", "python"],
            multiprocess_mode="livemax",
            registry=registry,
        )
        #: Trace ids of recent latency observations (:mod:`bus.runtime.exemplars`), for OpenMetrics.
        self.exemplars = Exemplars()
        self._observed: Observed | None = None
        self._audit: AuditFamilies | None = None
        self._policy_revision: dict[str, str] = {}
        #: ``child(family, *labels)``: ``family.labels(*labels)``, looked up once (every label set is bounded).
        self.child = functools.lru_cache(maxsize=4096)(_labels)

    @functools.cached_property
    def approvals(self) -> ApprovalFamilies:
        """The approval queue's families (registered, at 0, on the first use: the gateway's)."""
        return ApprovalFamilies.register(self.registry)

    def audit(self) -> AuditFamilies:
        """The audit pipelines' families (registered on the first call)."""
        if self._audit is None:
            self._audit = AuditFamilies.register(self.registry)
        return self._audit

    def observed(self) -> Observed:
        """The observer's gauges (registered on the first call)."""
        if self._observed is None:
            self._observed = Observed(
                redis_up=Gauge(
                    "hookbus_redis_up",
                    "Whether the last look at Redis succeeded (1) or not (0)",
                    multiprocess_mode="livemin",
                    registry=self.registry,
                ),
                dispatchers_alive=Gauge(
                    "hookbus_dispatchers_alive",
                    "Dispatchers whose heartbeat is under 10 s old",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                stream_length=Gauge(
                    "hookbus_stream_length",
                    "Entries in a hookbus stream (XLEN)",
                    ["stream"],
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                stream_pending=Gauge(
                    "hookbus_stream_pending",
                    "Entries delivered to a consumer group and not yet acknowledged",
                    ["stream", "group"],
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                stream_lag=Gauge(
                    "hookbus_stream_lag",
                    "Entries of a stream not yet delivered to a consumer group",
                    ["stream", "group"],
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                dlq_size=Gauge(
                    "hookbus_dlq_size",
                    "Entries in the dead-letter stream",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                async_dead_letters=Gauge(
                    "hookbus_async_dead_letters",
                    "Entries in the async dead-letter stream (hookbus dlq)",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                async_queue_depth=Gauge(
                    "hookbus_async_queue_depth",
                    "Async hook jobs waiting in the arq queue",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                decision_log_length=Gauge(
                    "hookbus_decision_log_length",
                    "Records in the decision log",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                decision_log_age=Gauge(
                    "hookbus_decision_log_age_seconds",
                    "Age of the oldest record in the decision log",
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                audit_lag=Gauge(
                    "hookbus_audit_consumer_lag",
                    "Decision-log records an audit consumer group has not acknowledged yet (pending + not delivered)",
                    ["group"],
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
                audit_lag_seconds=Gauge(
                    "hookbus_audit_consumer_lag_seconds",
                    "Age of the oldest decision-log record an audit consumer group has not acknowledged (0: none)",
                    ["group"],
                    multiprocess_mode="livemax",
                    registry=self.registry,
                ),
            )
        return self._observed

    def set_policy_revision(self, revision: str, tenant: str = POLICY_TENANT) -> None:
        """Report the policy revision this process enforces from now on (``hookbus_policy_info``)."""
        previous = self._policy_revision.get(tenant)
        if previous == revision:
            return
        if previous is not None:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                self.policy_info.labels(tenant, previous).set(0)  # series cannot be removed from the shared files
            else:
                self.policy_info.remove(tenant, previous)
        self.policy_info.labels(tenant, revision).set(1)
        self._policy_revision[tenant] = revision

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value in this registry (0 when the series does not exist)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def render(self, openmetrics: bool = False) -> tuple[bytes, str]:
        """The exposition text of this registry, or of all processes in multiprocess mode; with
        ``openmetrics``, the OpenMetrics text with the latency exemplars."""
        registry = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        if openmetrics:
            return openmetrics_text(registry, self.exemplars), OPENMETRICS_CONTENT_TYPE
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def init(self) -> None:
        """Create every labelled series whose label values are known, at 0 (idempotent)."""
        child = self.child
        blocking = [name for name, spec in EVENTS.items() if spec.blocking]
        for event in blocking:
            child(self.decision_latency, event)
            child(self.expired, event)
            for decision in DECISION_VALUES:
                child(self.decisions, event, decision)
                child(self.shadow_decisions, event, decision)
            for reason in FAIL_OPEN_REASONS:
                child(self.fail_open, event, reason)
            for handler_type in HANDLER_TYPES:
                child(self.fail_closed, event, handler_type)
        for handler_type in HANDLER_TYPES:
            child(self.hook_duration, handler_type)
            child(self.async_job_duration, handler_type)
            for outcome in ("error", "timeout"):
                child(self.hook_errors, handler_type, outcome)
        for event in sorted(STOP_EVENTS):
            child(self.stop_guard, event)
        for kind in LIMIT_KINDS:
            for scope in LIMIT_SCOPES:
                for outcome in LIMITED_OUTCOMES:
                    child(self.limited, kind, scope, outcome)
        for family, values in (
            (self.async_jobs, ASYNC_STATUSES),
            (self.rejected, REJECTED_CODES),
            (self.replies_rejected, ("unauthenticated", "malformed")),
            (self.spooled, SPOOL_STATUSES),
            (self.dead_letters, ("blocking", "events")),
            (self.role_restarts, ROLES),
            (self.timeouts, TIMEOUT_STAGES),
            (self.redis_errors, REDIS_ERROR_OPS),
            (self.policy_rejected, POLICY_REJECTED_REASONS),
        ):
            for value in values:
                child(family, value)
        self.build_info.labels(build_version(), platform.python_version()).set(1)


def _labels(family: Counter | Histogram | Gauge, *labels: str) -> Any:
    return family.labels(*labels)


@functools.cache
def process_metrics() -> Metrics:
    """This process's metrics, on prometheus-client's default registry (built on first use)."""
    return Metrics(REGISTRY)


def event_label(event: str) -> str:
    """Event label for metrics; unknown names collapse to ``other`` (bounded cardinality)."""
    return event if event in EVENTS else "other"


def build_version() -> str:
    """The installed hookbus version, or ``unknown`` (run from a source tree without installing)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hookbus")
    except PackageNotFoundError:
        return "unknown"


__all__ = [
    "LATENCY_BUCKETS",
    "POLICY_REJECTED_REASONS",
    "ROLES",
    "Metrics",
    "Observed",
    "build_version",
    "event_label",
    "process_metrics",
]
