"""The metric families of session policy (``hookbus.session``): states evicted past a tenant's cap,
decisions taken again because the session changed meanwhile, and those settled unchecked after
too many.

Registered on a :class:`~bus.runtime.metrics.Metrics` registry on first use
(:func:`session_families`): every dispatcher registers them when it starts.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter


@dataclasses.dataclass(frozen=True, slots=True)
class SessionFamilies:
    """Every session-policy family (docs/metrics.md)."""

    evictions: Counter
    conflicts: Counter
    unchecked: Counter
    policy_freezes: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> SessionFamilies:
        return cls(
            evictions=Counter(
                "hookbus_session_evictions_total",
                "Session states dropped past hookbus.session.maxSessions of a tenant",
                registry=registry,
            ),
            conflicts=Counter(
                "hookbus_session_conflicts_total",
                "Events decided again because another event of their session settled first",
                registry=registry,
            ),
            unchecked=Counter(
                "hookbus_session_unchecked_settles_total",
                "Events settled on their last decision without the version check after refusals in a row",
                registry=registry,
            ),
            policy_freezes=Counter(
                "hookbus_policy_freezes_total",
                "Tenants frozen by a tenant or agent counter's onLimit (hookbus.session)",
                registry=registry,
            ),
        )


class _HasRegistry(Protocol):
    @property
    def registry(self) -> CollectorRegistry: ...


_FAMILIES: Final[weakref.WeakKeyDictionary[CollectorRegistry, SessionFamilies]] = weakref.WeakKeyDictionary()


def session_families(metrics: _HasRegistry) -> SessionFamilies:
    """The session families of ``metrics``' registry (registered, at 0, on the first call)."""
    found = _FAMILIES.get(metrics.registry)
    if found is None:
        found = _FAMILIES[metrics.registry] = SessionFamilies.register(metrics.registry)
    return found


__all__ = ["SessionFamilies", "session_families"]
