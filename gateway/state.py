"""One gateway process's state: settings, policy, Redis, the reply reader, appends, readiness.

:class:`Gateway` owns what lives as long as the process (the Redis clients, the reply
reader, the append batcher and spool, the rate limiter, the policy registry and its
watcher) and says who sends a request (:meth:`Gateway.authorize`). The hooks endpoint that
answers ``POST /v1/hooks`` with them is :mod:`gateway.hooks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import uuid
from typing import Any

from bus.errors import BusUnavailable, RequestRejected
from bus.freeze.cache import FreezeCache
from bus.policy.loading import Policy
from bus.policy.registry import PolicyRegistry
from bus.policy.reload import PolicyWatcher
from bus.redis.connection import redis_errors
from bus.redis.keys import WORK_STREAM_MAXLEN, Keyspace
from bus.redis.tokens import TOKEN_PREFIX, TokenStore
from bus.redis.topology import Topology
from bus.runtime.metrics import Metrics, process_metrics
from bus.runtime.replykey import key_or_process
from bus.runtime.settings import Settings, Tokens
from bus.stream.partitions import warn_partitions_changed
from bus.stream.pending_context import APPEND_TAKING_CONTEXT
from bus.stream.protocol import LogRecord, StreamFields, now_ms
from bus.stream.settle import CLAIM_FAIL_OPEN
from gateway.access import bearer_token, caller_for, token_digest
from gateway.appends.batcher import AppendBatcher
from gateway.appends.records import RecordWriter
from gateway.appends.spool import Spool
from gateway.approvals.desk import ApprovalDesk
from gateway.ratelimit import SharedRateLimiter
from gateway.replies.reader import ReplyWaiter
from gateway.replies.sharded import ShardedReplyWaiter

logger = logging.getLogger("hookbus.gateway")


class Gateway:
    """State of one gateway process: settings, policy, Redis, the reply reader."""

    def __init__(self, settings: Settings, policy: Policy, redis_url: str, metrics: Metrics | None = None) -> None:
        #: Everything this gateway counts (``/metrics`` serves it).
        self.metrics = metrics or process_metrics()
        self.settings = settings
        self.policy = policy
        self.redis_url = redis_url
        #: A single Redis or a Redis Cluster, read once from the URL: what differs asks it.
        self.topology = Topology.from_url(redis_url)
        #: The bus's partitions are fixed when the node starts (a reload cannot move a session's events).
        self.keys: Keyspace = settings.keys.with_partitions(policy.settings.streams.partitions)
        self.gateway_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._id_prefix = uuid.uuid4().hex[:16]
        self._ids = itertools.count(1)
        self.redis = self.topology.connect(connect_timeout_s=0.5, socket_timeout_s=None)
        self.partition_clients = self.topology.partition_clients(
            self.redis, connect_timeout_s=0.5, socket_timeout_s=None
        )
        partition_of_stream = self.keys.work_streams(self.keys.all_partitions)
        self.batcher = AppendBatcher(
            self.redis,
            redis_url,
            WORK_STREAM_MAXLEN,
            lambda stream: self.partition_clients.get(partition_of_stream.get(stream, 0)),
            topology=self.topology,
        )
        self.waiter: ReplyWaiter | ShardedReplyWaiter
        if self.topology.sharded_replies:
            self.waiter = ShardedReplyWaiter(self.topology, self.keys, self.gateway_id, self.metrics)
        else:
            self.waiter = ReplyWaiter(redis_url, self.keys.reply_channel(self.gateway_id), self.metrics)
        #: Checks the MAC of every reply (:mod:`bus.runtime.replykey`).
        self.reply_key = key_or_process(settings.reply_key)
        self.spool = Spool(self._append_many, metrics=self.metrics)
        #: Appends the records the gateway writes itself, linked into their chains.
        self.records = RecordWriter(self.redis, self.keys, redis_url, self.partition_clients)
        self.limiter = SharedRateLimiter.from_settings(self.redis, settings)
        self.token_store = TokenStore(self.redis, self.keys, redis_url) if settings.managed_tokens else None
        # Events are sent by tenants: an org-admin token reads, it does not send.
        self._sender_settings = dataclasses.replace(settings, admin_tokens=Tokens({}), tenant_admin_tokens=Tokens({}))
        self.registry = PolicyRegistry(
            policy, self.redis, self.keys, metrics=self.metrics, trusted_keys=settings.policy_trusted_keys
        )
        self.watcher = PolicyWatcher(settings.policy_paths, self.set_policy, metrics=self.metrics)
        #: The freezes in force (:mod:`bus.freeze`): a frozen tool call is answered here.
        self.freezes = FreezeCache(self.redis, self.keys, redis_url, self.metrics)
        #: The approval queue's side in this gateway (held requests, expiry, ``/v1/approvals``).
        self.approvals = ApprovalDesk(self)

    def set_policy(self, policy: Policy) -> None:
        """Swap in the reloaded files (the org layer unless one is pushed); requests in flight
        finish under the policy they started with."""
        warn_partitions_changed(self.keys, policy)
        self.policy = policy
        self.registry.set_base(policy)

    async def start(self) -> None:
        await self.registry.start()
        await self.freezes.start()
        await self.waiter.start()
        await self.spool.start()
        await self.watcher.start()
        if self.policy.settings.approvals.enabled:
            self.approvals.start()
        with contextlib.suppress(asyncio.TimeoutError):
            async with asyncio.timeout(2.0):
                await self.waiter.subscribed.wait()
        # Loaded now, on every master, so that a deadline's claim never has to load it: on a
        # cluster that goes to every master, and one failing over would stall the claim.
        with contextlib.suppress(asyncio.TimeoutError, BusUnavailable):
            async with asyncio.timeout(1.0):
                with redis_errors(self.redis_url):
                    await self.redis.script_load(CLAIM_FAIL_OPEN)
                    if self.batcher.can_take_context:
                        await self.redis.script_load(APPEND_TAKING_CONTEXT)

    async def stop(self) -> None:
        await self.approvals.stop()
        await self.registry.stop()
        await self.freezes.stop()
        await self.watcher.stop()
        await self.spool.stop()
        await self.waiter.stop()
        await self.batcher.aclose()
        await self.partition_clients.aclose()
        await self.redis.aclose()

    def new_event_id(self) -> str:
        """A unique event id: a random per-process prefix and a counter (cheaper than uuid4)."""
        return f"{self._id_prefix}{next(self._ids):08x}"

    async def _append_many(self, entries: list[tuple[str, StreamFields]]) -> None:
        for stream, fields in entries:
            if stream in self.records.logs:  # a record: linked into its chain as it is appended
                await self.records.append_spooled(fields)
        entries = [(stream, fields) for stream, fields in entries if stream not in self.records.logs]
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for stream, fields in entries:
                    pipe.xadd(stream, fields, maxlen=WORK_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]
                await pipe.execute()

    async def log_record(self, record: LogRecord) -> None:
        """Append a record the gateway made itself (a refusal, a frozen call, an approval's end) to
        its session's decision log, linked into its chain; held in the spool while Redis cannot take it."""
        try:
            await self.records.append(record)
        except BusUnavailable:
            self.spool.put(self.keys.decision_log(self.records.partition_of(record)), record.encode())

    def authenticate(self, headers: dict[bytes, bytes]) -> str:
        """The tenant of a static token (``HOOKBUS_TOKENS``), "default" with none configured; 401
        otherwise. The hot path when no managed tokens are on (no await)."""
        if not self.settings.tokens:
            return "default"
        token = bearer_token(headers)
        tenant = self.settings.tokens.tenant_for(token) if token is not None else None
        if tenant is None:
            detail = "missing or wrong bearer token"
            if token is not None and token.startswith(TOKEN_PREFIX) and not self.settings.managed_tokens:
                # Names the setting only: the store is not read, so this says nothing of the token.
                detail += " (tokens of 'hookbus tokens create' need HOOKBUS_MANAGED_TOKENS=1 on the gateway)"
            raise RequestRejected(401, "unauthorized", detail, {"WWW-Authenticate": "Bearer"})
        return tenant

    async def authorize(self, headers: dict[bytes, bytes]) -> tuple[str, str | None]:
        """``(tenant, token id)`` of a request that sends events; 401 for anything else. The id of
        a static token is a digest of it (None when no tokens are configured)."""
        if self.token_store is None:
            tenant = self.authenticate(headers)
            token = bearer_token(headers) if self.settings.tokens else None
            return tenant, token_digest(token) if token is not None else None
        caller = await caller_for(self._sender_settings, headers, self.token_store)
        assert caller.tenant is not None  # no admin tokens here: every caller is a tenant
        return caller.tenant, caller.token_id

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        checks: dict[str, Any] = {
            "policy": {
                "ok": True,
                "revision": self.policy.revision,
                "reload_error": self.watcher.last_error,
                "org_version": self.registry.org_version(),
                "version_errors": self.registry.errors,
            }
        }
        try:
            async with asyncio.timeout(0.5):
                with redis_errors(self.redis_url):
                    await self.redis.ping()
                    beats = await self.redis.hgetall(self.keys.dispatchers)  # type: ignore[misc]
            alive = sum(1 for ms in beats.values() if now_ms() - int(ms) < 10_000)
            checks["redis"] = {"ok": True}
            checks["dispatchers"] = {"ok": alive > 0, "alive": alive}
        except (BusUnavailable, TimeoutError) as exc:
            checks["redis"] = {"ok": False, "error": str(exc) or "timed out after 0.5s"}
        checks["replies"] = {"ok": self.waiter.subscribed.is_set(), "error": self.waiter.last_error}
        checks["spool"] = {"ok": True, "held": len(self.spool)}
        # Informs: a frozen tenant is a decision, not a fault (who and why: GET /v1/freeze).
        frozen = [{k: f.public()[k] for k in ("tenant", "tools", "since", "until")} for f in self.freezes.active()]
        checks["freezes"] = {"ok": True, "frozen": frozen, "error": self.freezes.last_error}
        ready = checks["redis"]["ok"] and checks["replies"]["ok"]
        return ready, checks


__all__ = ["Gateway"]
