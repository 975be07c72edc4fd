"""Rate limits: token buckets per session, per token and per tenant, shared in Redis.

A request takes one token from each of its buckets, or from none: a refused request costs
nothing, so a session past its own rate does not drain its tenant's bucket, and its
teammates keep getting their decisions. What a limited request gets: :mod:`gateway.limits`.
"""

from __future__ import annotations

from typing import Any

from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from gateway.limits import Limited, LimitKind, Scope

# KEYS: one bucket per limit (session, token, tenant: narrowest first); ARGV: per limit, rate/s
# and burst, in KEYS order. Takes one token from every bucket, or from none; returns
# {allowed, retry_after_ms, the 1-based index of the first bucket that was short (0: none)}.
_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local levels, wait, short = {}, 0, 0
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', key, 'tokens', 'ms')
  local tokens = tonumber(state[1]) or burst
  local last = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - last) * rate / 1000)
  levels[i] = tokens
  if tokens < 1 then
    wait = math.max(wait, math.ceil((1 - tokens) * 1000 / rate))
    if short == 0 then short = i end
  end
end
for i, key in ipairs(KEYS) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local left = levels[i]
  if wait == 0 then left = left - 1 end
  redis.call('HSET', key, 'tokens', tostring(left), 'ms', now)
  redis.call('PEXPIRE', key, math.ceil(burst * 1000 / rate) + 1000)
end
return {wait == 0 and 1 or 0, wait, short}
"""

#: A session's share of its tenant's rate (and burst) when ``HOOKBUS_SESSION_RATE_LIMIT`` is not set.
SESSION_SHARE = 0.25

_SETTINGS = {
    Scope.SESSION: "HOOKBUS_SESSION_RATE_LIMIT",
    Scope.TOKEN: "HOOKBUS_TOKEN_RATE_LIMIT",
    Scope.TENANT: "HOOKBUS_RATE_LIMIT",
}


def _bucket(rate_per_s: float, burst: int | float) -> tuple[float, float]:
    return rate_per_s, float(burst or max(1, int(rate_per_s)))


class SharedRateLimiter:
    """Token buckets in Redis, one per session, token and tenant, shared by every gateway replica.

    One script call per request checks and takes from all of its buckets atomically (a
    tenant's buckets share a Redis Cluster slot); the answer names the narrowest one that was
    empty and how long to wait (``Retry-After``). A rate of 0 is no limit at that scope.
    """

    def __init__(
        self,
        redis: Any,
        keys: Keyspace,
        tenant_rate_per_s: float,
        tenant_burst: int = 0,
        token_rate_per_s: float = 0.0,
        token_burst: int = 0,
        session_rate_per_s: float = 0.0,
        session_burst: int = 0,
    ) -> None:
        self.keys = keys
        self.limits = {
            Scope.SESSION: _bucket(session_rate_per_s, session_burst),
            Scope.TOKEN: _bucket(token_rate_per_s, token_burst),
            Scope.TENANT: _bucket(tenant_rate_per_s, tenant_burst),
        }
        self._take = redis.register_script(_TAKE)

    @classmethod
    def from_settings(cls, redis: Any, settings: Settings) -> SharedRateLimiter:
        """The limiter of ``settings``: a session's rate is a quarter of its tenant's unless set."""
        session_rate = settings.session_rate_limit_per_s
        session_burst = settings.session_rate_limit_burst
        if session_rate is None:
            session_rate = settings.rate_limit_per_s * SESSION_SHARE
            if settings.rate_limit_burst and not session_burst:
                session_burst = max(1, int(settings.rate_limit_burst * SESSION_SHARE))
        return cls(
            redis,
            settings.keys,
            settings.rate_limit_per_s,
            settings.rate_limit_burst,
            settings.token_rate_limit_per_s,
            settings.token_rate_limit_burst,
            session_rate,
            session_burst,
        )

    @property
    def enabled(self) -> bool:
        return any(rate > 0 for rate, _ in self.limits.values())

    async def take(self, tenant: str, token_id: str | None, session_id: str | None) -> Limited | None:
        """None when the request may go ahead, else the limit it met (nothing taken then)."""
        keys: list[str] = []
        args: list[float] = []
        scopes: list[Scope] = []
        for scope, name in ((Scope.SESSION, session_id), (Scope.TOKEN, token_id), (Scope.TENANT, tenant)):
            rate, burst = self.limits[scope]
            if rate > 0 and name:
                keys.append(self.keys.rate_limit(tenant, scope, "" if scope is Scope.TENANT else name))
                args += [rate, burst]
                scopes.append(scope)
        if not keys:
            return None
        allowed, wait_ms, short = await self._take(keys, args)
        if allowed:
            return None
        scope = scopes[max(1, int(short)) - 1]
        rate = self.limits[scope][0]
        detail = f"the {scope} is over its rate limit of {rate:g} requests/s ({_SETTINGS[scope]})"
        return Limited(LimitKind.RATE, scope, max(0.001, int(wait_ms) / 1000), detail)


__all__ = ["SESSION_SHARE", "SharedRateLimiter"]
