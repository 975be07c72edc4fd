"""The gateway's per-tenant token bucket (:mod:`gateway.ratelimit`), on an explicit clock.

Every call passes ``now``, so refills are exact and no test waits for time to pass; one test
uses the real monotonic clock. The 429 it leads to is tested over HTTP in ``test_app``.
"""

from __future__ import annotations

import time

import pytest

from gateway.ratelimit import RateLimiter
from tests.conftest import BusProbe

T0 = 1_000.0


def admitted(limiter: RateLimiter, tenant: str, attempts: int, now: float) -> int:
    """How many of ``attempts`` calls at ``now`` are let through."""
    return sum(limiter.allow(tenant, now) for _ in range(attempts))


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_rate_of_zero_or_less_disables_the_limit(rate: float) -> None:
    limiter = RateLimiter(rate, burst=1)
    assert not limiter.enabled
    assert admitted(limiter, "acme", 10_000, T0) == 10_000
    assert limiter.retry_after_s("acme") == 0.0


@pytest.mark.parametrize(("rate", "burst", "expected"), [(2.0, 0, 2), (10.0, 0, 10), (0.5, 0, 1), (2.5, 0, 2),
                                                         (1.0, 5, 5), (100.0, 3, 3)])
def test_a_full_bucket_admits_a_burst_then_refuses(rate: float, burst: int, expected: int) -> None:
    # Without an explicit burst the bucket holds one second's worth (at least one token).
    limiter = RateLimiter(rate, burst)
    assert limiter.enabled
    assert admitted(limiter, "acme", expected + 5, T0) == expected


def test_tokens_refill_at_the_rate() -> None:
    limiter = RateLimiter(2.0)
    assert admitted(limiter, "acme", 2, T0) == 2
    assert not limiter.allow("acme", T0 + 0.25)  # half a token
    assert limiter.allow("acme", T0 + 0.5)  # one token after 1 / rate seconds
    assert not limiter.allow("acme", T0 + 0.5)
    assert admitted(limiter, "acme", 5, T0 + 1.5) == 2  # two more in the next second


def test_refused_calls_do_not_cost_tokens() -> None:
    limiter = RateLimiter(1.0)
    assert limiter.allow("acme", T0)
    for step in range(1, 10):  # hammering while empty does not push the next token further away
        assert not limiter.allow("acme", T0 + step * 0.1)
    assert limiter.allow("acme", T0 + 1.0)


def test_an_idle_bucket_fills_up_to_the_burst_only() -> None:
    limiter = RateLimiter(1.0, burst=3)
    assert admitted(limiter, "acme", 3, T0) == 3
    assert admitted(limiter, "acme", 10, T0 + 3600) == 3


def test_tenants_have_buckets_of_their_own() -> None:
    limiter = RateLimiter(1.0, burst=2)
    assert admitted(limiter, "acme", 5, T0) == 2
    assert admitted(limiter, "beta", 5, T0) == 2
    assert not limiter.allow("acme", T0)
    assert limiter.retry_after_s("beta") == pytest.approx(1.0)


def test_retry_after_is_the_time_to_the_next_token() -> None:
    limiter = RateLimiter(4.0, burst=1)
    assert limiter.allow("acme", T0)
    assert not limiter.allow("acme", T0)
    assert limiter.retry_after_s("acme") == pytest.approx(0.25)
    assert not limiter.allow("acme", T0 + 0.1)  # 0.4 of a token by now
    assert limiter.retry_after_s("acme") == pytest.approx(0.15)
    assert limiter.allow("acme", T0 + 0.1 + limiter.retry_after_s("acme") + 1e-9)


def test_the_default_clock_is_monotonic_time() -> None:
    limiter = RateLimiter(1.0, burst=1)
    started = time.monotonic()
    first, second = limiter.allow("acme"), limiter.allow("acme")
    elapsed = time.monotonic() - started
    assert first
    assert not second or elapsed >= 1.0  # within a second the bucket is still empty
    assert 0.0 < limiter.retry_after_s("acme") <= 1.0


async def test_shared_buckets_are_one_for_every_gateway(bus: BusProbe) -> None:
    from bus.keys import Keyspace
    from gateway.ratelimit import SharedRateLimiter

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
