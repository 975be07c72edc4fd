"""Rate limits (429 past them): token buckets per tenant and per token, shared in Redis."""

from __future__ import annotations

from typing import Any

from bus.redis.keys import Keyspace

# KEYS: one bucket per limit (tenant, token); ARGV: per limit, rate/s and burst, in KEYS order.
# Takes one token from every bucket, or from none; returns {allowed, retry_after_ms}.
_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local levels, wait = {}, 0
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', key, 'tokens', 'ms')
  local tokens = tonumber(state[1]) or burst
  local last = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - last) * rate / 1000)
  levels[i] = tokens
  if tokens < 1 then
    wait = math.max(wait, math.ceil((1 - tokens) * 1000 / rate))
  end
end
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local left = levels[i]
  if wait == 0 then left = left - 1 end
  redis.call('HSET', key, 'tokens', tostring(left), 'ms', now)
  redis.call('PEXPIRE', key, math.ceil(burst * 1000 / rate) + 1000)
end
return {wait == 0 and 1 or 0, wait}
"""


class SharedRateLimiter:
    """Token buckets in Redis, one per tenant and one per token, shared by every gateway replica.

    One script call per request checks and takes from both buckets atomically; the answer
    says how long to wait (``Retry-After``). Only used when a limit is configured.
    """

    def __init__(
        self,
        redis: Any,
        keys: Keyspace,
        tenant_rate_per_s: float,
        tenant_burst: int = 0,
        token_rate_per_s: float = 0.0,
        token_burst: int = 0,
    ) -> None:
        self.keys = keys
        self.limits = {
            "tenant": (tenant_rate_per_s, float(tenant_burst or max(1, int(tenant_rate_per_s)))),
            "token": (token_rate_per_s, float(token_burst or max(1, int(token_rate_per_s)))),
        }
        self._take = redis.register_script(_TAKE)

    @property
    def enabled(self) -> bool:
        return any(rate > 0 for rate, _ in self.limits.values())

    async def take(self, tenant: str, token_id: str | None) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        keys, args = [], []
        for kind, name in (("tenant", tenant), ("token", token_id)):
            rate, burst = self.limits[kind]
            if rate > 0 and name:
                keys.append(self.keys.rate_limit(kind, name))
                args += [rate, burst]
        if not keys:
            return 0.0
        allowed, wait_ms = await self._take(keys, args)
        return 0.0 if allowed else max(0.001, int(wait_ms) / 1000)


__all__ = ["SharedRateLimiter"]
