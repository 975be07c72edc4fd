"""The gateway's rate limits (:mod:`gateway.ratelimit`): token buckets in Redis, shared by every
gateway replica. The 429 they lead to is tested over HTTP in ``test_app``.
"""

from __future__ import annotations

from bus.redis.keys import Keyspace
from gateway.ratelimit import SharedRateLimiter
from tests.conftest import BusProbe


async def test_shared_buckets_are_one_for_every_gateway(bus: BusProbe) -> None:
    keys = Keyspace("rl-test:")
    one = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=1, tenant_burst=3)
    two = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=1, tenant_burst=3)
    waits = [await limiter.take("acme", None) for limiter in (one, two, one, two)]
    assert waits[:3] == [0.0, 0.0, 0.0] and 0 < waits[3] <= 1.0  # three in the burst, across both replicas
    assert await one.take("beta", None) == 0.0  # per tenant
    per_token = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0, token_rate_per_s=1, token_burst=1)
    assert await per_token.take("acme", "t1") == 0.0
    assert await per_token.take("acme", "t1") > 0
    assert await per_token.take("acme", "t2") == 0.0
    assert await bus.redis.pttl(keys.rate_limit("tenant", "acme")) > 0  # buckets expire when idle


async def test_a_rate_of_zero_disables_the_limit_and_touches_no_key(bus: BusProbe) -> None:
    keys = Keyspace("rl-off:")
    off = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0)
    assert not off.enabled
    assert [await off.take("acme", "t1") for _ in range(50)] == [0.0] * 50
    assert await bus.redis.keys("rl-off:*") == []


async def test_refused_calls_do_not_cost_tokens(bus: BusProbe) -> None:
    keys = Keyspace("rl-refused:")
    limiter = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0.5, tenant_burst=1)
    assert await limiter.take("acme", None) == 0.0
    waits = [await limiter.take("acme", None) for _ in range(20)]
    # Each refusal reports the time to the next token (about 2 s at 0.5/s), never more.
    assert all(0 < wait <= 2.0 for wait in waits)
