"""Bearer tokens managed in Redis: created, listed, revoked and checked by every gateway.

A token is shown once, when it is created; Redis keeps only its SHA-256 (a token is 32
random bytes, so a fast hash is enough: there is nothing to guess). A gateway looks a
token up by its hash, compares the stored hash in constant time, and caches the answer
for at most :data:`CACHE_S`, so a revoked or expired token is refused on every gateway
within that time. ``HOOKBUS_TOKENS`` (static ``tenant:token`` pairs) keeps working beside it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
import time
from typing import Any

import orjson
import redis.asyncio as aioredis

from bus.errors import ConfigError
from bus.redis.connection import redis_errors, transaction
from bus.redis.keys import Keyspace

#: Seconds a gateway trusts a cached answer about a token.
CACHE_S = 0.5
#: How often the last-used time of a token is written, in seconds (not on every request).
LAST_USED_EVERY_S = 60.0
TOKEN_PREFIX = "hb_"  # noqa: S105 (a prefix that makes leaked tokens greppable, not a secret)
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration_s(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` in seconds; ConfigError otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigError(f"{text!r} is not a duration like 30d, 12h, 90m or 45s")
    return int(match.group(1)) * _UNITS[match.group(2)]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class TokenInfo:
    """What Redis holds about a token (never the token itself)."""

    id: str
    tenant: str
    name: str
    created_ms: int
    expires_ms: int | None
    hash: str = dataclasses.field(repr=False)
    last_used_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and now_ms >= self.expires_ms

    def public(self) -> dict[str, Any]:
        """A JSON view without the hash."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "name": self.name,
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
            "last_used_ms": self.last_used_ms,
        }


class TokenStore:
    """Tokens in Redis (see the module docstring); every method may raise BusUnavailable."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, redis_url: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.redis_url = redis_url
        self._cache: dict[str, tuple[float, TokenInfo | None]] = {}
        self._used_at: dict[str, float] = {}

    async def create(self, tenant: str, name: str = "", expires_s: float | None = None) -> tuple[str, TokenInfo]:
        """A new token for ``tenant``: ``(token, info)``. The token is not stored anywhere."""
        if not tenant or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", tenant):
            raise ConfigError(f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-'")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now_ms = int(time.time() * 1000)
        info = TokenInfo(
            id=secrets.token_hex(6),
            tenant=tenant,
            name=name,
            created_ms=now_ms,
            expires_ms=now_ms + int(expires_s * 1000) if expires_s else None,
            hash=token_hash(token),
        )
        record = orjson.dumps({**info.public(), "hash": info.hash}).decode()
        with redis_errors(self.redis_url):
            async with transaction(self.redis, self.keys.tokens) as pipe:
                pipe.hset(self.keys.tokens, info.id, record)
                pipe.set(self.keys.token_lookup(info.hash), info.id)
                await pipe.execute()
        return token, info

    async def list(self, tenant: str | None = None) -> list[TokenInfo]:
        with redis_errors(self.redis_url):
            raw = await self.redis.hgetall(self.keys.tokens)  # type: ignore[misc]
            used = await self.redis.hgetall(self.keys.tokens_last_used)  # type: ignore[misc]
        found = [self._decode(value, used.get(key)) for key, value in raw.items()]
        return sorted((t for t in found if tenant is None or t.tenant == tenant), key=lambda t: t.created_ms)

    async def revoke(self, token_id: str) -> TokenInfo | None:
        """Delete a token by id; returns what it was, or None if there is no such token."""
        with redis_errors(self.redis_url):
            raw = await self.redis.hget(self.keys.tokens, token_id)  # type: ignore[misc]
            if raw is None:
                return None
            info = self._decode(raw, None)
            async with transaction(self.redis, self.keys.tokens) as pipe:
                pipe.hdel(self.keys.tokens, token_id)
                pipe.hdel(self.keys.tokens_last_used, token_id)
                pipe.delete(self.keys.token_lookup(info.hash))
                await pipe.execute()
        return info

    async def verify(self, token: str) -> TokenInfo | None:
        """The live (not revoked, not expired) token's info, or None; cached for :data:`CACHE_S`."""
        digest = token_hash(token)
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_S:
            info = cached[1]
        else:
            info = await self._lookup(digest)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now, info)
        if info is None or info.expired(int(time.time() * 1000)):
            return None
        if now - self._used_at.get(info.id, 0.0) >= LAST_USED_EVERY_S:
            self._used_at[info.id] = now
            with redis_errors(self.redis_url):
                await self.redis.hset(self.keys.tokens_last_used, info.id, str(int(time.time() * 1000)))  # type: ignore[misc]
        return info

    async def _lookup(self, digest: str) -> TokenInfo | None:
        with redis_errors(self.redis_url):
            token_id = await self.redis.get(self.keys.token_lookup(digest))
            raw = await self.redis.hget(self.keys.tokens, token_id) if token_id else None  # type: ignore[misc]
        if raw is None:
            return None
        info = self._decode(raw, None)
        return info if hmac.compare_digest(info.hash, digest) else None

    @staticmethod
    def _decode(raw: bytes, last_used: bytes | None) -> TokenInfo:
        data = orjson.loads(raw)
        return TokenInfo(
            id=data["id"],
            tenant=data["tenant"],
            name=data.get("name", ""),
            created_ms=int(data["created_ms"]),
            expires_ms=data.get("expires_ms"),
            hash=data["hash"],
            last_used_ms=int(last_used) if last_used else None,
        )


__all__ = ["CACHE_S", "TOKEN_PREFIX", "TokenInfo", "TokenStore", "parse_duration_s", "token_hash"]
