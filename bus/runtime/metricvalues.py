"""The fixed parts of hookbus's metrics: histogram buckets, the label values each labelled family
starts with, and the Redis state gauges (:class:`Observed`). The families themselves are in
:mod:`bus.runtime.metrics`; every name, label and bound in docs/metrics.md.
"""

from __future__ import annotations

import dataclasses

from prometheus_client import Gauge

from bus.hooks.decisions import Decision, FailOpenReason

#: A rule decision takes well under a millisecond end to end, so the buckets start at 100 µs.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
#: Up to ``HOOKBUS_DISPATCH_BATCH`` (default 64) entries come back from one read.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

#: An async job's try runs from a millisecond (a function) to a handler's whole timeout.
ASYNC_DURATION_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)


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


#: The label values each labelled family starts with (at 0), so that rates and alerts work
#: before the first event. Event labels are limited to the blocking events.
DECISION_VALUES = tuple(Decision)
FAIL_OPEN_REASONS = tuple(FailOpenReason)
ASYNC_STATUSES = ("queued", "succeeded", "retried", "failed", "dead", "dropped")
REJECTED_CODES = ("400", "401", "413", "429")
SPOOL_STATUSES = ("held", "flushed", "dropped")
ROLES = ("gateway", "dispatcher", "worker")
TIMEOUT_STAGES = ("queue_wait", "handler", "reply")
#: The labels of ``hookbus_limited_total`` (``gateway.limits``): which limit, whose, what the event got.
LIMIT_KINDS = ("rate", "inflight")
LIMIT_SCOPES = ("session", "token", "tenant")
LIMITED_OUTCOMES = ("open", "closed", "refused")
#: Every ``op`` of ``hookbus_redis_errors_total`` (a new call site adds its name here).
REDIS_ERROR_OPS = ("claim", "observe", "read", "settle", "worker", "xadd")
#: The ``tenant`` of ``hookbus_policy_info``: one policy serves every tenant today.
POLICY_TENANT = "default"


__all__ = [
    "ASYNC_DURATION_BUCKETS",
    "ASYNC_STATUSES",
    "BATCH_BUCKETS",
    "DECISION_VALUES",
    "FAIL_OPEN_REASONS",
    "LATENCY_BUCKETS",
    "LIMITED_OUTCOMES",
    "LIMIT_KINDS",
    "LIMIT_SCOPES",
    "POLICY_TENANT",
    "REDIS_ERROR_OPS",
    "REJECTED_CODES",
    "ROLES",
    "SPOOL_STATUSES",
    "TIMEOUT_STAGES",
    "Observed",
]
