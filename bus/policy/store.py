"""Policy as immutable, versioned objects in Redis, pushed once and live on every node.

A *scope* is ``org`` (the layer every tenant runs under) or ``tenant:<name>``. A push
validates the files exactly like ``hookbus policy check`` and refuses a bad policy before
anything is stored. A good one becomes a version: its files, a content hash of them and
the scope (the version id, so pushing the same files twice is one version), author, time and
message. Making it current is one Redis transaction that also publishes on
``{p}policy:changed``; every node listens there (and re-reads the pointers every second, in
case a message is missed) and switches, keeping its last good version when a new one will not load.

A version may carry an Ed25519 signature (``push(..., signing_key=...)``; see
:mod:`bus.policy.signing` for what it covers). Signing the files of an existing version adds
the signature to it; nodes with trusted keys activate only versions whose signature verifies.
"""

from __future__ import annotations

import dataclasses
import difflib
import getpass
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bus.errors import ConfigError, HookBusError, PolicyError
from bus.policy.layers import compose
from bus.policy.loading import PolicyFile, merge_policy, parse_policy_text
from bus.policy.signing import sign
from bus.redis.connection import redis_errors, transaction
from bus.redis.keys import Keyspace

ORG = "org"


def scope_for(tenant: str | None) -> str:
    """``org`` for None, else ``tenant:<name>``."""
    return ORG if tenant is None else f"tenant:{tenant}"


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyVersion:
    """One pushed version: the files as pushed and who pushed them, when and why; its signature
    (base64, "" when unsigned) and the id of the key that made it."""

    id: str
    scope: str
    files: tuple[tuple[str, str], ...]  # (name, text)
    author: str
    created_ms: int
    message: str
    signature: str = ""
    signed_by: str = ""

    def parsed(self) -> list[PolicyFile]:
        return [parse_policy_text(text, f"{self.scope}@{self.id}/{name}") for name, text in self.files]

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "files": [name for name, _ in self.files],
            "author": self.author,
            "created_ms": self.created_ms,
            "message": self.message,
            "signed_by": self.signed_by or None,
        }

    def encode(self) -> dict[str, str]:
        return {
            "scope": self.scope,
            "files": orjson.dumps(self.files).decode(),
            "author": self.author,
            "created_ms": str(self.created_ms),
            "message": self.message,
            **self.signature_fields(),
        }

    def signature_fields(self) -> dict[str, str]:
        return {"signature": self.signature, "signed_by": self.signed_by} if self.signature else {}

    @classmethod
    def decode(cls, version_id: str, raw: dict[bytes, bytes]) -> PolicyVersion:
        return cls(
            id=version_id,
            scope=raw[b"scope"].decode(),
            files=tuple((str(n), str(t)) for n, t in orjson.loads(raw[b"files"])),
            author=raw[b"author"].decode(),
            created_ms=int(raw[b"created_ms"]),
            message=raw.get(b"message", b"").decode(),
            signature=raw.get(b"signature", b"").decode(errors="replace"),
            signed_by=raw.get(b"signed_by", b"").decode(errors="replace"),
        )


def version_id(files: Sequence[tuple[str, str]], scope: str = ORG) -> str:
    """The content hash of a scope's files: the same files in two tenants' layers are two versions
    (each stored with its own scope, as its signature covers it)."""
    digest = hashlib.sha256()
    if scope != ORG:  # the org's ids are as they were before tenants' ids named their scope
        digest.update(len(scope.encode()).to_bytes(8, "big") + scope.encode())
    for name, text in files:
        for part in (name.encode(), text.encode()):
            digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:12]


class PolicyStore:
    """Pushed policy versions (see the module docstring); methods may raise BusUnavailable."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, redis_url: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.redis_url = redis_url

    async def push(
        self,
        files: Sequence[tuple[str, str]],
        tenant: str | None = None,
        *,
        message: str = "",
        author: str | None = None,
        signing_key: Ed25519PrivateKey | None = None,
    ) -> tuple[PolicyVersion, bool]:
        """Validate and store ``(name, text)`` files as the scope's current version, signed
        with ``signing_key`` when given.

        Returns the version and whether it changed anything (a signature added to the
        current version counts). Raises PolicyError (nothing stored) when the files, alone or
        layered under the current org version, do not load.
        """
        if not files:
            raise ConfigError("policy push needs at least one file")
        scope = scope_for(tenant)
        parsed = [parse_policy_text(text, name) for name, text in files]
        if tenant is None:
            merge_policy(parsed)
        else:
            org = await self.current(ORG)
            compose(org.parsed() if org else [], parsed)  # the tenant layer must load under the org's
        version = PolicyVersion(
            id=version_id(files, scope),
            scope=scope,
            files=tuple(files),
            author=author or _default_author(),
            created_ms=int(time.time() * 1000),
            message=message,
        )
        if signing_key is not None:
            signature, signed_by = sign(signing_key, scope, version.id, version.files)
            version = dataclasses.replace(version, signature=signature, signed_by=signed_by)
        with redis_errors(self.redis_url):
            current = await self.redis.hget(self.keys.policy_current, scope)  # type: ignore[misc]
            is_current = current is not None and current.decode() == version.id
            try:
                stored = await self.get(version.id)
            except HookBusError:
                stored = None  # not a version hookbus wrote: written again below
            # A version whose files no longer match its id was edited in Redis: this push restores it.
            rewrite = stored is None or (stored.scope, stored.files) != (version.scope, version.files)
            if signing_key is None and stored is not None:
                version = dataclasses.replace(version, signature=stored.signature, signed_by=stored.signed_by)
            # Ed25519 signatures are deterministic: the same key over the same version signs alike.
            new_signature = signing_key is not None and (stored is None or stored.signature != version.signature)
            if is_current and not rewrite and not new_signature:
                return stored or version, False
            key = self.keys.policy_version(version.id)
            async with transaction(self.redis, self.keys.policy_current) as pipe:
                if rewrite:  # otherwise immutable: a version's files are written once
                    pipe.delete(key)
                    pipe.hset(key, mapping=version.encode())
                elif new_signature:
                    pipe.hset(key, mapping=version.signature_fields())
                if not is_current:
                    pipe.rpush(self.keys.policy_versions(scope), version.id)
                    pipe.hset(self.keys.policy_current, scope, version.id)
                pipe.publish(self.keys.policy_changed, scope)
                await pipe.execute()
        return version, True

    async def get(self, version: str) -> PolicyVersion | None:
        with redis_errors(self.redis_url):
            raw = await self.redis.hgetall(self.keys.policy_version(version))  # type: ignore[misc]
        if not raw:
            return None
        try:
            return PolicyVersion.decode(version, raw)
        except (KeyError, ValueError, TypeError) as exc:  # written by hand, or by something else
            raise HookBusError(f"policy version {version} in Redis is not a version hookbus wrote ({exc!r})") from exc

    async def current_ids(self) -> dict[str, str]:
        """Scope -> current version id, for every scope."""
        with redis_errors(self.redis_url):
            raw = await self.redis.hgetall(self.keys.policy_current)  # type: ignore[misc]
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def current(self, scope: str) -> PolicyVersion | None:
        with redis_errors(self.redis_url):
            found = await self.redis.hget(self.keys.policy_current, scope)  # type: ignore[misc]
        return await self.get(found.decode()) if found else None

    async def versions(self, scope: str) -> list[PolicyVersion]:
        """The scope's versions, oldest first (a rollback appears again, as it was made current)."""
        with redis_errors(self.redis_url):
            ids = await self.redis.lrange(self.keys.policy_versions(scope), 0, -1)  # type: ignore[misc]
        found = [await self.get(i.decode()) for i in dict.fromkeys(ids)]
        return [v for v in found if v is not None]

    async def rollback(self, tenant: str | None = None, to: str | None = None) -> PolicyVersion:
        """Make ``to`` (default: the version before the current one) current again."""
        scope = scope_for(tenant)
        with redis_errors(self.redis_url):
            ids = [i.decode() for i in await self.redis.lrange(self.keys.policy_versions(scope), 0, -1)]  # type: ignore[misc]
        current = (await self.current_ids()).get(scope)
        if to is None:
            earlier = [i for i in ids if i != current]
            if not earlier:
                raise ConfigError(f"{scope} has no earlier version to roll back to")
            to = earlier[-1]
        target = await self.get(to)
        if target is None or target.scope != scope:
            raise ConfigError(f"no version {to!r} in {scope}")
        if tenant is not None:
            org = await self.current(ORG)
            compose(org.parsed() if org else [], target.parsed())
        with redis_errors(self.redis_url):
            async with transaction(self.redis, self.keys.policy_current) as pipe:
                pipe.rpush(self.keys.policy_versions(scope), target.id)
                pipe.hset(self.keys.policy_current, scope, target.id)
                pipe.publish(self.keys.policy_changed, scope)
                await pipe.execute()
        return target


def diff(old: PolicyVersion, new: PolicyVersion) -> str:
    """A unified diff of two versions' files."""
    names = list(dict.fromkeys([n for n, _ in old.files] + [n for n, _ in new.files]))
    before, after = dict(old.files), dict(new.files)
    out: list[str] = []
    for name in names:
        out += difflib.unified_diff(
            before.get(name, "").splitlines(keepends=True),
            after.get(name, "").splitlines(keepends=True),
            f"{old.id}/{name}",
            f"{new.id}/{name}",
        )
    return "".join(out)


def _default_author() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


__all__ = ["ORG", "PolicyError", "PolicyStore", "PolicyVersion", "diff", "scope_for", "version_id"]
