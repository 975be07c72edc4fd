"""Approvals in Redis, per tenant: opened, answered and expired by one script each.

Each script checks and changes an approval in one step, so that two answers (or an answer and
the expiry) never both win, and publishes ``{p}approvals:answered`` when one ends, for the
gateways holding its agents' requests. A tenant's keys share its hash tag (one slot on a Redis
Cluster). Keys: :mod:`bus.redis.keys`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import orjson
import redis.asyncio as aioredis

from bus.approvals.approval import Approval, Status
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.stream.protocol import now_ms

#: KEYS: pending zset, the call's key, the session grant, the new approval.
#: ARGV: now, id, doc, deadline, max pending, keep (ms), approvers needed.
#: Returns {"granted"}, {"full"}, {"known", id} or {"opened", id}. An approval whose allow was
#: delivered is spent: the same call later opens a new one (approved once is once).
OPEN: Final = """
if redis.call('EXISTS', KEYS[3]) == 1 then return {'granted', ''} end
local known = redis.call('GET', KEYS[2])
if known then
  local key = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[2]) .. known
  local st = redis.call('HMGET', key, 'status', 'delivered')
  if st[1] and not (st[1] == 'approved' and st[2]) then return {'known', known} end
end
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') >= tonumber(ARGV[5]) then return {'full', ''} end
local ttl = tonumber(ARGV[4]) - tonumber(ARGV[1]) + tonumber(ARGV[6])
redis.call('HSET', KEYS[4], 'doc', ARGV[3], 'status', 'pending', 'deadline', ARGV[4], 'need', ARGV[7])
redis.call('PEXPIRE', KEYS[4], ttl)
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
return {'opened', ARGV[2]}
"""

#: KEYS: the approval, pending zset, the session grant (or the approval again: no grant).
#: ARGV: now, id, status, answer JSON, approver's token, grant ms (0: none), channel, message, approver's name.
#: Returns {"ok"}, {"first"} (one of two approvers), {"unknown"}, {"answered", status},
#: {"expired"} or {"same_approver"}.
ANSWER: Final = """
local st = redis.call('HMGET', KEYS[1], 'status', 'deadline', 'need', 'approver_ids', 'approvers')
if not st[1] then return {'unknown'} end
if st[1] ~= 'pending' then return {'answered', st[1]} end
if tonumber(st[2]) <= tonumber(ARGV[1]) then return {'expired'} end
local ids, names = {}, {}
if st[4] then ids = cjson.decode(st[4]) names = cjson.decode(st[5]) end
if ARGV[3] == 'approved' then
  for _, a in ipairs(ids) do if a == ARGV[5] then return {'same_approver'} end end
end
table.insert(ids, ARGV[5])
table.insert(names, ARGV[9])
redis.call('HSET', KEYS[1], 'approver_ids', cjson.encode(ids), 'approvers', cjson.encode(names))
if ARGV[3] == 'approved' and #ids < tonumber(st[3] or '1') then return {'first'} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'answer', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[2])
if tonumber(ARGV[6]) > 0 then redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[6]) end
redis.call('PUBLISH', ARGV[7], ARGV[8])
return {'ok'}
"""

#: KEYS: the approval, pending zset. ARGV: now, id, answer JSON, channel, message.
#: Returns the status after: "expired" when this call expired it.
EXPIRE: Final = """
local st = redis.call('HMGET', KEYS[1], 'status', 'deadline')
if not st[1] then redis.call('ZREM', KEYS[2], ARGV[2]) return 'unknown' end
if st[1] ~= 'pending' then return st[1] end
if tonumber(st[2]) > tonumber(ARGV[1]) then return 'pending' end
redis.call('HSET', KEYS[1], 'status', 'expired', 'answer', ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 'expired_now'
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """What opening an approval found: ``granted`` (a session grant), ``full`` (the tenant's
    queue is), ``known`` (the same call has one) or ``opened``; with the approval's id."""

    kind: str
    approval_id: str = ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ApprovalStore:
    """A tenant's approvals in Redis (``redis``: a client that returns bytes)."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, redis_url: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.redis_url = redis_url
        self._open = redis.register_script(OPEN)
        self._answer = redis.register_script(ANSWER)
        self._expire = redis.register_script(EXPIRE)

    def message(self, tenant: str, approval_id: str) -> str:
        """What ``{p}approvals:answered`` carries: the tenant and the id."""
        return f"{tenant} {approval_id}"

    async def open(self, approval: Approval, call: str, rule: str, max_pending: int, keep_ms: int) -> Opened:
        keys = self.keys
        tenant = approval.tenant
        with redis_errors(self.redis_url):
            raw = await self._open(
                [
                    keys.approvals_pending(tenant),
                    keys.approval_call(tenant, call),
                    keys.approval_grant(tenant, approval.session_id, rule),
                    keys.approval(tenant, approval.id),
                ],
                [
                    approval.created_ms,
                    approval.id,
                    approval.doc(),
                    approval.deadline_ms,
                    max_pending,
                    keep_ms,
                    approval.need,
                ],
            )
            opened = Opened(_text(raw[0]), _text(raw[1]))
            if opened.kind == "opened":
                await self.redis.sadd(keys.approval_tenants, tenant)  # type: ignore[misc]
        return opened

    async def get(self, tenant: str, approval_id: str) -> Approval | None:
        with redis_errors(self.redis_url):
            fields = await self.redis.hgetall(self.keys.approval(tenant, approval_id))  # type: ignore[misc]
        return Approval.from_hash(fields) if fields else None

    async def tenants(self) -> list[str]:
        with redis_errors(self.redis_url):
            members = await self.redis.smembers(self.keys.approval_tenants)  # type: ignore[misc]
        return sorted(_text(m) for m in members)

    async def find(self, approval_id: str, tenant: str | None) -> Approval | None:
        """The approval ``approval_id`` of ``tenant`` (of any tenant when None)."""
        for name in [tenant] if tenant is not None else await self.tenants():
            approval = await self.get(name, approval_id)
            if approval is not None:
                return approval
        return None

    async def pending(self, tenant: str, limit: int = 500) -> list[Approval]:
        """``tenant``'s pending approvals, the soonest deadline first."""
        with redis_errors(self.redis_url):
            ids = await self.redis.zrange(self.keys.approvals_pending(tenant), 0, limit - 1)
            async with self.redis.pipeline(transaction=False) as pipe:
                for approval_id in ids:
                    pipe.hgetall(self.keys.approval(tenant, _text(approval_id)))
                found = await pipe.execute()
        return [Approval.from_hash(fields) for fields in found if fields]

    async def pending_count(self, tenants: list[str]) -> int:
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for tenant in tenants:
                    pipe.zcard(self.keys.approvals_pending(tenant))
                counts = await pipe.execute()
        return sum(int(c) for c in counts)

    async def overdue(self, tenant: str, at_ms: int, limit: int = 100) -> list[str]:
        with redis_errors(self.redis_url):
            ids = await self.redis.zrangebyscore(self.keys.approvals_pending(tenant), "-inf", at_ms, 0, limit)
        return [_text(i) for i in ids]

    async def answer(
        self, approval: Approval, status: Status, answer: dict[str, Any], approver: str, grant_ms: int = 0
    ) -> tuple[str, str]:
        """Settle ``approval`` as ``status`` (approved or denied): ``("ok", "")``, ``("first", "")``
        (one approver of two), or why not (``unknown``, ``answered``, ``expired``, ``same_approver``)."""
        keys, tenant = self.keys, approval.tenant
        hash_key = keys.approval(tenant, approval.id)
        grant = keys.approval_grant(tenant, approval.session_id, approval.rule) if grant_ms else hash_key
        with redis_errors(self.redis_url):
            raw = await self._answer(
                [hash_key, keys.approvals_pending(tenant), grant],
                [
                    now_ms(),
                    approval.id,
                    status,
                    orjson.dumps(answer),
                    approver,
                    grant_ms,
                    keys.approvals_answered,
                    self.message(tenant, approval.id),
                    answer.get("by", ""),
                ],
            )
        return _text(raw[0]), _text(raw[1]) if len(raw) > 1 else ""

    async def deliver(self, approval: Approval, event_id: str) -> bool:
        """Claim ``approval``'s allow for ``event_id``: False when another event got it already."""
        key = self.keys.approval(approval.tenant, approval.id)
        with redis_errors(self.redis_url):
            if await self.redis.hsetnx(key, "delivered", event_id):  # type: ignore[misc]
                return True
            return _text(await self.redis.hget(key, "delivered")) == event_id  # type: ignore[misc]

    async def expire(self, tenant: str, approval_id: str, at_ms: int | None = None) -> bool:
        """Expire the approval if it is pending past its deadline: True when this call did."""
        keys = self.keys
        answer = orjson.dumps({"outcome": Status.EXPIRED, "at_ms": at_ms or now_ms()})
        with redis_errors(self.redis_url):
            raw = await self._expire(
                [keys.approval(tenant, approval_id), keys.approvals_pending(tenant)],
                [at_ms or now_ms(), approval_id, answer, keys.approvals_answered, self.message(tenant, approval_id)],
            )
        return _text(raw) == "expired_now"


__all__ = ["ANSWER", "EXPIRE", "OPEN", "ApprovalStore", "Opened"]
