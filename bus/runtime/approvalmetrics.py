"""The metric families of the approval queue: how asks for a person ended, how many wait, how long.

Registered on a :class:`~bus.runtime.metrics.Metrics` registry on first use
(:attr:`~bus.runtime.metrics.Metrics.approvals`, which the gateway takes when it starts), with
every outcome at 0.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: How an ask for a person ended (:class:`bus.approvals.approval.Outcome`).
APPROVAL_OUTCOMES: Final = ("approved", "denied", "expired", "overflow", "session", "always")
#: How a webhook notice of a new approval ended (``failed``: dropped after every try).
NOTICE_OUTCOMES: Final = ("sent", "failed")
#: A person's answer takes seconds to hours.
APPROVAL_WAIT_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0)


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalFamilies:
    """Every approval family (labels: docs/metrics.md)."""

    total: Counter
    pending: Gauge
    wait: Histogram
    #: Webhook notices of new approvals, by whether the receiver took one (``failed``: after every try).
    notices: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> ApprovalFamilies:
        families = cls(
            total=Counter(
                "hookbus_approvals_total", "Asks for a person, by how they ended", ["outcome"], registry=registry
            ),
            pending=Gauge(
                "hookbus_approvals_pending",
                "Approvals waiting for a person",
                multiprocess_mode="livemax",
                registry=registry,
            ),
            wait=Histogram(
                "hookbus_approval_wait_seconds",
                "From an ask for a person to its answer or expiry",
                ["outcome"],
                buckets=APPROVAL_WAIT_BUCKETS,
                registry=registry,
            ),
            notices=Counter(
                "hookbus_approval_notices_total",
                "Webhook notices of new approvals, by whether the receiver took them",
                ["outcome"],
                registry=registry,
            ),
        )
        for notice in NOTICE_OUTCOMES:
            families.notices.labels(notice)
        for outcome in APPROVAL_OUTCOMES:
            families.total.labels(outcome)
            families.wait.labels(outcome)
        return families

    def settled(self, outcome: str, wait_s: float | None = None) -> None:
        """Count one ask that ended as ``outcome`` (and its wait, when a person could have answered)."""
        self.total.labels(outcome).inc()
        if wait_s is not None:
            self.wait.labels(outcome).observe(wait_s)


__all__ = ["APPROVAL_OUTCOMES", "APPROVAL_WAIT_BUCKETS", "ApprovalFamilies"]
