"""A per-tenant token bucket (429 past it)."""

from __future__ import annotations

import time


class RateLimiter:
    """Allows ``rate_per_s`` requests per second per tenant, with bursts up to ``burst``."""

    def __init__(self, rate_per_s: float, burst: int = 0) -> None:
        self.rate_per_s = rate_per_s
        self.burst = float(burst or max(1, int(rate_per_s)))
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    def allow(self, tenant: str, now: float | None = None) -> bool:
        """Take one token from ``tenant``'s bucket; False when it is empty."""
        if not self.enabled:
            return True
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.get(tenant, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate_per_s)
        if tokens < 1.0:
            self._buckets[tenant] = (tokens, now)
            return False
        self._buckets[tenant] = (tokens - 1.0, now)
        return True

    def retry_after_s(self, tenant: str) -> float:
        tokens, _ = self._buckets.get(tenant, (0.0, 0.0))
        return max(0.0, (1.0 - tokens) / self.rate_per_s) if self.enabled else 0.0


__all__ = ["RateLimiter"]
