"""The gateway's rate limits (:mod:`gateway.ratelimit`): token buckets in Redis per session, token
and tenant, shared by every gateway replica. What a limited request gets is tested over HTTP in
``test_app`` and ``test_limits``.
"""

from __future__ import annotations

from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from gateway.limits import LimitKind, Scope
from gateway.ratelimit import SharedRateLimiter
from tests.conftest import BusProbe


async def test_shared_buckets_are_one_for_every_gateway(bus: BusProbe) -> None:
    keys = Keyspace("rl-test:")
    one = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=1, tenant_burst=3)
    two = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=1, tenant_burst=3)
    answers = [await limiter.take("acme", None, "s") for limiter in (one, two, one, two)]
    assert answers[:3] == [None, None, None]  # three in the burst, across both replicas
    last = answers[3]
    assert last is not None and 0 < last.retry_after_s <= 1.0
    assert (last.kind, last.scope, last.code) == (LimitKind.RATE, Scope.TENANT, "rate_limited")
    assert await one.take("beta", None, "s") is None  # per tenant
    per_token = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0, token_rate_per_s=1, token_burst=1)
    assert await per_token.take("acme", "t1", None) is None
    limited = await per_token.take("acme", "t1", None)
    assert limited is not None and limited.scope is Scope.TOKEN
    assert await per_token.take("acme", "t2", None) is None
    assert await bus.redis.pttl(keys.rate_limit("acme", "tenant")) > 0  # buckets expire when idle


async def test_a_session_spends_its_own_bucket_first_and_its_refusals_cost_its_tenant_nothing(bus: BusProbe) -> None:
    keys = Keyspace("rl-scopes:")
    limiter = SharedRateLimiter(
        bus.redis, keys, tenant_rate_per_s=0.01, tenant_burst=4, session_rate_per_s=0.01, session_burst=2
    )
    flood = [await limiter.take("acme", "tok", "noisy") for _ in range(50)]
    assert flood[:2] == [None, None]
    assert {(a.scope, a.kind) for a in flood[2:] if a is not None} == {(Scope.SESSION, LimitKind.RATE)}
    assert all(a is not None for a in flood[2:])
    assert flood[2] is not None and "HOOKBUS_SESSION_RATE_LIMIT" in flood[2].detail
    # 48 refusals took nothing from the tenant's bucket: two teammates still get its last two.
    assert await limiter.take("acme", "tok", "teammate-1") is None
    assert await limiter.take("acme", "tok", "teammate-2") is None
    spent = await limiter.take("acme", "tok", "teammate-3")
    assert spent is not None and spent.scope is Scope.TENANT  # only now is the tenant's bucket empty
    assert await limiter.take("beta", "tok-b", "noisy") is None  # another tenant's sessions are its own
    # Every bucket of a tenant shares its hash tag (one script takes from all of them on a cluster).
    tagged = [keys.rate_limit("acme", "tenant"), keys.rate_limit("acme", "session", "noisy")]
    assert all("{acme}" in key for key in [*tagged, keys.rate_limit("acme", "token", "tok")])
    assert await bus.redis.exists(*tagged) == 2


async def test_session_ids_of_any_length_make_short_keys(bus: BusProbe) -> None:
    keys = Keyspace("rl-long:")
    limiter = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0, session_rate_per_s=1, session_burst=1)
    assert await limiter.take("acme", None, "s" * 100_000) is None
    limited = await limiter.take("acme", None, "s" * 100_000)
    assert limited is not None and limited.scope is Scope.SESSION
    assert all(len(key) < 200 for key in await bus.redis.keys("rl-long:*"))


async def test_a_session_gets_a_quarter_of_its_tenants_rate_unless_set(bus: BusProbe) -> None:
    derived = SharedRateLimiter.from_settings(bus.redis, Settings(rate_limit_per_s=40, rate_limit_burst=80))
    assert derived.limits[Scope.SESSION] == (10.0, 20.0)
    assert derived.limits[Scope.TENANT] == (40.0, 80.0)
    assert derived.limits[Scope.TOKEN][0] == 0  # no per-token limit unless set
    off = SharedRateLimiter.from_settings(bus.redis, Settings(rate_limit_per_s=40, session_rate_limit_per_s=0))
    assert off.limits[Scope.SESSION][0] == 0
    assert not SharedRateLimiter.from_settings(bus.redis, Settings()).enabled  # nothing is limited by default


async def test_a_rate_of_zero_disables_the_limit_and_touches_no_key(bus: BusProbe) -> None:
    keys = Keyspace("rl-off:")
    off = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0)
    assert not off.enabled
    assert [await off.take("acme", "t1", "s") for _ in range(50)] == [None] * 50
    assert await bus.redis.keys("rl-off:*") == []


async def test_refused_calls_do_not_cost_tokens(bus: BusProbe) -> None:
    keys = Keyspace("rl-refused:")
    limiter = SharedRateLimiter(bus.redis, keys, tenant_rate_per_s=0.5, tenant_burst=1)
    assert await limiter.take("acme", None, None) is None
    waits = [await limiter.take("acme", None, None) for _ in range(20)]
    # Each refusal reports the time to the next token (about 2 s at 0.5/s), never more.
    assert all(wait is not None and 0 < wait.retry_after_s <= 2.0 for wait in waits)
