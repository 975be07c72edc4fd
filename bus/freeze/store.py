"""Freezes in Redis: one hash, tenant -> the freeze as JSON (:attr:`bus.redis.keys.Keyspace.freezes`).

Setting a freeze replaces the tenant's previous one; a freeze past its ``until`` counts as
lifted everywhere at once (every reader checks the time), and is deleted by the next call
here that lists freezes. Every function may raise :class:`~bus.errors.BusUnavailable`.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

from bus.freeze.freezes import Freeze, check_tenant, now_ms
from bus.redis.connection import redis_errors, transaction
from bus.redis.keys import Keyspace

#: Deletes a field only if it still holds the value read (an expired freeze, not one set since).
_DELETE_IF_SAME = """
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
"""


def decode_all(raw: dict[bytes, bytes]) -> list[Freeze]:
    """Every freeze of an HGETALL answer, expired ones included; undecodable entries are skipped."""
    found = []
    for value in raw.values():
        try:
            found.append(Freeze.decode(value))
        except (ValueError, KeyError, TypeError):
            continue
    return found


async def freeze(
    redis: aioredis.Redis,
    keys: Keyspace,
    tenant: str,
    tools: Sequence[str] | None = None,
    until_ms: int | None = None,
    reason: str = "",
    by: str = "",
    redis_url: str = "",
) -> Freeze:
    """Freeze ``tenant``'s ``tools`` (default: :data:`~bus.freeze.freezes.STATE_CHANGING_TOOLS`)
    until ``until_ms`` (None: until lifted); every node obeys within a second.

    This is what an automatic trigger calls as much as ``POST /v1/freeze``; ConfigError for a bad
    tenant, tool matcher or a past ``until_ms``.
    """
    found = Freeze.new(tenant, tools, until_ms, reason, by)
    with redis_errors(redis_url):
        await redis.hset(keys.freezes, found.tenant, found.encode().decode())  # type: ignore[misc]
    return found


async def unfreeze(redis: aioredis.Redis, keys: Keyspace, tenant: str, redis_url: str = "") -> Freeze | None:
    """Lift ``tenant``'s freeze; what it was (None: there was none in force)."""
    check_tenant(tenant)
    with redis_errors(redis_url):
        async with transaction(redis, keys.freezes) as pipe:
            pipe.hget(keys.freezes, tenant)
            pipe.hdel(keys.freezes, tenant)
            raw, _ = await pipe.execute()
    if raw is None:
        return None
    lifted = decode_all({b"": raw})
    return lifted[0] if lifted and lifted[0].active() else None


async def active_freezes(redis: aioredis.Redis, keys: Keyspace, redis_url: str = "") -> list[Freeze]:
    """The freezes in force, oldest first; expired ones are deleted on the way."""
    with redis_errors(redis_url):
        raw = await redis.hgetall(keys.freezes)  # type: ignore[misc]
        now = now_ms()
        expired = [(field, value) for field, value in raw.items() if not _active_raw(value, now)]
        if expired:
            args = [item for pair in expired for item in pair]
            await redis.eval(_DELETE_IF_SAME, 1, keys.freezes, *args)  # type: ignore[misc]
    return sorted((f for f in decode_all(raw) if f.active(now)), key=lambda f: (f.since_ms, f.tenant))


def _active_raw(value: bytes, now: int) -> bool:
    found = decode_all({b"": value})
    return bool(found) and found[0].active(now)


__all__ = ["active_freezes", "decode_all", "freeze", "unfreeze"]
