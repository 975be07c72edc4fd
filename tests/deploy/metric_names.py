"""The hookbus metric names the Prometheus rules and the Grafana dashboard may use.

``DEFINED_METRICS`` are the families ``bus/runtime/metrics.py`` defines (``tests/bus/runtime/test_metrics_families.py``
checks the list against the code both ways). ``PLANNED_METRICS`` is for a family that an alert or a
panel uses before the code exports it; it is empty: everything the deploy files use exists. A
name in neither set is a typo.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

DEFINED_METRICS: Final = frozenset(
    {
        "hookbus_approval_notices_total",  # counter {outcome}: approval webhook notices sent or dropped
        "hookbus_approval_wait_seconds",  # histogram {outcome}: from an ask for a person to its answer
        "hookbus_approvals_pending",  # gauge: approvals waiting for a person
        "hookbus_approvals_total",  # counter {outcome}: asks for a person by how they ended
        "hookbus_async_attempts",  # histogram: tries per async delivery
        "hookbus_async_dead_letters",  # gauge: entries in the async dead-letter stream
        "hookbus_async_job_duration_seconds",  # histogram {type}: one try of an async job
        "hookbus_async_jobs_total",
        "hookbus_async_queue_depth",  # gauge: arq jobs waiting
        "hookbus_audit_consumer_lag",  # gauge {group}: decision-log records a consumer group has not acknowledged
        "hookbus_audit_consumer_lag_seconds",  # gauge {group}: age of the oldest of them
        "hookbus_audit_sink_dead_letters_total",  # counter {group, sink}: records in the dead-letter file
        "hookbus_audit_sink_errors_total",  # counter {group, sink, error}: delivery tries that failed
        "hookbus_audit_sink_lag_seconds",  # gauge {group, sink}: age of the oldest record in hand, not yet accepted
        "hookbus_audit_sink_records_total",  # counter {group, sink}: records a follower's sink accepted
        "hookbus_audit_trimmed_unread_total",  # counter {group}: records trimmed before the group read them
        "hookbus_build_info",  # gauge {version, python} = 1
        "hookbus_dead_letters_total",
        "hookbus_decision_latency_seconds",
        "hookbus_decision_log_age_seconds",  # gauge: age of the oldest decision-log record
        "hookbus_decision_log_length",  # gauge: records in the decision log
        "hookbus_decisions_total",
        "hookbus_dispatch_batch_size",  # histogram: entries per dispatcher read
        "hookbus_dispatchers_alive",  # gauge: dispatchers with a fresh heartbeat
        "hookbus_dlq_size",  # gauge: entries in the dead-letter stream
        "hookbus_events_total",  # counter {agent, event}: hook events by the agent that sent them
        "hookbus_expired_total",
        "hookbus_fail_closed_total",
        "hookbus_fail_open_total",
        "hookbus_freezes_active",  # gauge: tenants frozen now ('hookbus freeze')
        "hookbus_frozen_decisions_total",  # counter {tenant}: tool calls denied by a freeze
        "hookbus_handler_decisions_total",  # counter {event, handler, decision}
        "hookbus_hook_duration_seconds",
        "hookbus_hook_errors_total",
        "hookbus_limited_total",  # counter {limit, scope, outcome}: requests over a rate limit or in-flight budget
        "hookbus_policy_info",  # info-style gauge {tenant, version} = 1
        "hookbus_policy_load_failures_total",
        "hookbus_policy_rejected_total",  # counter {reason}
        "hookbus_redis_errors_total",  # counter {op}
        "hookbus_redis_up",  # gauge 0/1
        "hookbus_refused_inputs_total",  # counter {reason}: inputs the gateway could not judge, denied
        "hookbus_rejected_requests_total",
        "hookbus_replies_rejected_total",  # counter {reason}: replies the gateway dropped
        "hookbus_reply_wait_seconds",  # histogram: the gateway's wait for a reply
        "hookbus_request_head_timeouts_total",
        "hookbus_role_restarts_total",  # counter {role}, `hookbus up` only
        "hookbus_policy_freezes_total",  # counter: tenants frozen by a tenant counter's onLimit
        "hookbus_session_conflicts_total",  # counter: events decided again on their session's newer state
        "hookbus_session_evictions_total",  # counter: session states dropped past hookbus.session.maxSessions
        "hookbus_session_unchecked_settles_total",  # counter: events settled without the check after refusals
        "hookbus_shadow_decisions_total",
        "hookbus_spooled_events_total",
        "hookbus_stop_guard_overrides_total",
        "hookbus_stream_lag",  # gauge {stream, group}
        "hookbus_stream_length",  # gauge {stream}
        "hookbus_stream_pending",  # gauge {stream, group}
        "hookbus_timeouts_total",  # counter {stage}
        "hookbus_traces_forced_ignored_total",  # counter: caller-sampled traces over their tenant's share
    }
)

PLANNED_METRICS: Final[frozenset[str]] = frozenset()

KNOWN_METRICS: Final = DEFINED_METRICS | PLANNED_METRICS

_NAME = re.compile(r"(?<![A-Za-z0-9_:])hookbus_[a-z_]+")
_SERIES_SUFFIXES: Final = ("_bucket", "_sum", "_count")


def metric_names(expressions: Iterable[str]) -> set[str]:
    """Every ``hookbus_*`` metric family named in PromQL ``expressions``.

    Histogram series (``_bucket``, ``_sum``, ``_count``) count as their family.
    """
    names: set[str] = set()
    for expr in expressions:
        for name in _NAME.findall(expr):
            for suffix in _SERIES_SUFFIXES:
                if name.endswith(suffix):
                    name = name.removesuffix(suffix)
                    break
            names.add(name)
    return names
