"""The metric families of audit pipelines: what each ``hookbus audit follow`` sink delivered, its
errors and lag, and the records trimmed from the decision log before a group read them.

Registered on a :class:`~bus.runtime.metrics.Metrics` registry on first use
(:meth:`~bus.runtime.metrics.Metrics.audit`): a follower serves its sink's on ``--metrics-port``;
the gateway's observer counts the trimmed records (:mod:`bus.decisionlog.trimmed`).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

#: The ``sink`` label: the kinds of sink ``hookbus audit follow`` delivers to.
SINK_KINDS: Final = ("jsonl", "http", "otlp")
#: The ``error`` label: why a delivery try did not succeed (see docs/metrics.md).
SINK_ERRORS: Final = ("no_answer", "server", "client", "refused", "partial", "io")


@dataclasses.dataclass(frozen=True, slots=True)
class AuditFamilies:
    """Every audit-pipeline family (labels: docs/metrics.md)."""

    trimmed_unread: Counter
    records: Counter
    errors: Counter
    dead_letters: Counter
    lag_seconds: Gauge

    @classmethod
    def register(cls, registry: CollectorRegistry) -> AuditFamilies:
        return cls(
            trimmed_unread=Counter(
                "hookbus_audit_trimmed_unread_total",
                "Decision-log records trimmed (retention) before an audit consumer group read them",
                ["group"],
                registry=registry,
            ),
            records=Counter(
                "hookbus_audit_sink_records_total",
                "Records an audit follower's sink accepted (then acknowledged)",
                ["group", "sink"],
                registry=registry,
            ),
            errors=Counter(
                "hookbus_audit_sink_errors_total",
                "Delivery tries of an audit follower's sink that did not succeed, by why",
                ["group", "sink", "error"],
                registry=registry,
            ),
            dead_letters=Counter(
                "hookbus_audit_sink_dead_letters_total",
                "Records an audit sink's receiver refused for good, written to the dead-letter file",
                ["group", "sink"],
                registry=registry,
            ),
            lag_seconds=Gauge(
                "hookbus_audit_sink_lag_seconds",
                "Age of the oldest record an audit follower holds and its sink has not accepted yet (0: none)",
                ["group", "sink"],
                multiprocess_mode="livemax",
                registry=registry,
            ),
        )

    def sink(self, group: str, kind: str) -> SinkCounters:
        """The series of one follower, every error label started at 0."""
        counters = SinkCounters(
            records=self.records.labels(group, kind),
            errors=_Errors(self.errors, group, kind),
            dead_letters=self.dead_letters.labels(group, kind),
            lag_seconds=self.lag_seconds.labels(group, kind),
            trimmed=self.trimmed(group),
        )
        for error in SINK_ERRORS:
            counters.errors.labels(error)
        return counters

    def trimmed(self, group: str) -> Counter:
        """``hookbus_audit_trimmed_unread_total`` of ``group``."""
        return self.trimmed_unread.labels(group)


class _Errors:
    """``errors.labels(error)`` of one follower's ``(group, sink)``."""

    def __init__(self, family: Counter, group: str, kind: str) -> None:
        self._family = family
        self._group = group
        self._kind = kind

    def labels(self, error: str) -> Counter:
        return self._family.labels(self._group, self._kind, error)


@dataclasses.dataclass(frozen=True, slots=True)
class SinkCounters:
    """One follower's series: what its sink accepted, its errors, dead letters and lag."""

    records: Counter
    errors: _Errors
    dead_letters: Counter
    lag_seconds: Gauge
    #: Records trimmed while pending: read, but gone before the sink had them.
    trimmed: Counter


__all__ = ["SINK_ERRORS", "SINK_KINDS", "AuditFamilies", "SinkCounters"]
