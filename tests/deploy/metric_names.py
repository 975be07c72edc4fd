"""The hookbus metric names the Prometheus rules and the Grafana dashboard may use.

``DEFINED_METRICS`` are the families ``bus/metrics.py`` has defined all along;
``PLANNED_METRICS`` are families added together with the alerts and the dashboard, which use
them as soon as they are exported. A name in neither set is a typo.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

DEFINED_METRICS: Final = frozenset(
    {
        "hookbus_async_jobs_total",
        "hookbus_dead_letters_total",
        "hookbus_decision_latency_seconds",
        "hookbus_decisions_total",
        "hookbus_expired_total",
        "hookbus_fail_closed_total",
        "hookbus_fail_open_total",
        "hookbus_hook_duration_seconds",
        "hookbus_hook_errors_total",
        "hookbus_rejected_requests_total",
        "hookbus_shadow_decisions_total",
        "hookbus_spooled_events_total",
        "hookbus_stop_guard_overrides_total",
    }
)

PLANNED_METRICS: Final = frozenset(
    {
        "hookbus_async_queue_depth",  # gauge: arq jobs waiting
        "hookbus_dispatchers_alive",  # gauge: dispatchers with a fresh heartbeat
        "hookbus_dlq_size",  # gauge: entries in the dead-letter stream
        "hookbus_handler_decisions_total",  # counter {event, handler, decision}
        "hookbus_policy_info",  # info-style gauge {tenant, version} = 1
        "hookbus_policy_load_failures_total",  # counter
        "hookbus_redis_errors_total",  # counter {op}
        "hookbus_redis_up",  # gauge 0/1
        "hookbus_role_restarts_total",  # counter {role}, `hookbus up` only
        "hookbus_stream_lag",  # gauge {stream, group}
    }
)

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
