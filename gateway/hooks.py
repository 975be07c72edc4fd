"""``POST /v1/hooks``: one hook input in, one Claude Code hook output out (docs/api.md).

Blocking events are appended to the blocking stream and the request waits for the
dispatchers' reply up to the event's deadline; past it, or when Redis cannot be reached,
the reply is ``200 {}`` with ``X-Hookbus-Outcome: fail-open`` (counted in
``hookbus_fail_open_total``). Non-blocking events (and blocking ones no handler listens to)
are answered once appended. This is the hot path: it runs as plain ASGI, without a router.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import orjson

from bus.errors import BusUnavailable, ProtocolError, RequestRejected
from bus.hooks.events import event_spec
from bus.policy.loading import Policy
from bus.policy.registry import PolicyRegistry
from bus.policy.reload import PolicyWatcher
from bus.redis.connection import PartitionClients, connect, is_cluster, redis_errors
from bus.redis.keys import WORK_STREAM_MAXLEN, Keyspace
from bus.redis.tokens import TokenStore
from bus.rules.limits import depth_over
from bus.runtime import metrics
from bus.runtime.logs import event_fields
from bus.runtime.settings import Settings, Tokens
from bus.stream.partitions import warn_partitions_changed
from bus.stream.pending_context import APPEND_TAKING_CONTEXT, takes_context
from bus.stream.protocol import FailOpenReason, Reply, Request, StreamFields, now_ms
from bus.stream.settle import CLAIM_FAIL_OPEN, OUTCOME_GRACE_MS
from gateway.access import bearer_token, caller_for
from gateway.appends.batcher import AppendBatcher
from gateway.appends.spool import Spool
from gateway.dialects import from_dialect, to_dialect
from gateway.ratelimit import SharedRateLimiter
from gateway.replies.reader import ReplyWaiter
from gateway.replies.sharded import ShardedReplyWaiter

logger = logging.getLogger("hookbus.gateway")

#: How long a request past its deadline may wait for Redis to settle it (the answer is due
#: by deadline + 50 ms).
CLAIM_TIMEOUT_S = 0.03
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class Gateway:
    """State of one gateway process: settings, policy, Redis, the reply reader."""

    def __init__(self, settings: Settings, policy: Policy, redis_url: str) -> None:
        self.settings = settings
        self.policy = policy
        self.redis_url = redis_url
        #: The bus's partitions are fixed when the node starts (a reload cannot move a session's events).
        self.keys: Keyspace = settings.keys.with_partitions(policy.settings.streams.partitions)
        self.gateway_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._id_prefix = uuid.uuid4().hex[:16]
        self._ids = itertools.count(1)
        self.redis = connect(redis_url, connect_timeout_s=0.5, socket_timeout_s=None)
        self.partition_clients = PartitionClients(self.redis, redis_url, connect_timeout_s=0.5, socket_timeout_s=None)
        partition_of_stream = self.keys.work_streams(self.keys.all_partitions)
        self.batcher = AppendBatcher(
            self.redis,
            redis_url,
            WORK_STREAM_MAXLEN,
            lambda stream: self.partition_clients.get(partition_of_stream.get(stream, 0)),
        )
        self._claim_script = self.redis.register_script(CLAIM_FAIL_OPEN)
        self.waiter: ReplyWaiter | ShardedReplyWaiter
        if is_cluster(self.redis):
            self.waiter = ShardedReplyWaiter(redis_url, self.keys, self.gateway_id)
        else:
            self.waiter = ReplyWaiter(redis_url, self.keys.reply_channel(self.gateway_id))
        self.spool = Spool(self._append_many)
        self.limiter = SharedRateLimiter(
            self.redis,
            self.keys,
            settings.rate_limit_per_s,
            settings.rate_limit_burst,
            settings.token_rate_limit_per_s,
            settings.token_rate_limit_burst,
        )
        #: Bytes of request bodies being handled right now, per tenant (the in-flight budget).
        self._inflight_bytes: dict[str, int] = {}
        self.token_store = TokenStore(self.redis, self.keys, redis_url) if settings.managed_tokens else None
        # Events are sent by tenants: an org-admin token reads, it does not send.
        self._sender_settings = dataclasses.replace(settings, admin_tokens=Tokens({}))
        self.registry = PolicyRegistry(policy, self.redis, self.keys)
        self.watcher = PolicyWatcher(settings.policy_paths, self.set_policy)

    def set_policy(self, policy: Policy) -> None:
        """Swap in the reloaded files (the org layer unless one is pushed); requests in flight
        finish under the policy they started with."""
        warn_partitions_changed(self.keys, policy)
        self.policy = policy
        self.registry.set_base(policy)

    async def start(self) -> None:
        await self.registry.start()
        await self.waiter.start()
        await self.spool.start()
        await self.watcher.start()
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
        await self.registry.stop()
        await self.watcher.stop()
        await self.spool.stop()
        await self.waiter.stop()
        await self.partition_clients.aclose()
        await self.redis.aclose()

    def new_event_id(self) -> str:
        """A unique event id: a random per-process prefix and a counter (cheaper than uuid4)."""
        return f"{self._id_prefix}{next(self._ids):08x}"

    async def _append_many(self, entries: list[tuple[str, StreamFields]]) -> None:
        with redis_errors(self.redis_url):
            async with self.redis.pipeline(transaction=False) as pipe:
                for stream, fields in entries:
                    pipe.xadd(stream, fields, maxlen=WORK_STREAM_MAXLEN, approximate=True)  # type: ignore[arg-type]
                await pipe.execute()

    # -- the request --------------------------------------------------------------------

    def authenticate(self, headers: dict[bytes, bytes]) -> str:
        """The tenant of a static token (``HOOKBUS_TOKENS``), "default" with none configured; 401
        otherwise. The hot path when no managed tokens are on (no await)."""
        if not self.settings.tokens:
            return "default"
        token = bearer_token(headers)
        tenant = self.settings.tokens.tenant_for(token) if token is not None else None
        if tenant is None:
            raise RequestRejected(401, "unauthorized", "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        return tenant

    async def authorize(self, headers: dict[bytes, bytes]) -> tuple[str, str | None]:
        """``(tenant, managed token id)`` of a request that sends events; 401 for anything else."""
        if self.token_store is None:
            return self.authenticate(headers), None
        caller = await caller_for(self._sender_settings, headers, self.token_store)
        assert caller.tenant is not None  # no admin tokens here: every caller is a tenant
        return caller.tenant, caller.token_id

    async def read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        limit = self.settings.max_body_bytes
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestRejected(413, "payload_too_large", f"body is {int(declared)} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestRejected(400, "disconnected", "the client went away before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestRejected(413, "payload_too_large", f"body is over the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    @staticmethod
    def parse(body: bytes) -> dict[str, Any]:
        try:
            hook_input = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RequestRejected(400, "invalid_json", f"body is not valid JSON: {exc}") from exc
        if not isinstance(hook_input, dict):
            raise RequestRejected(400, "invalid_input", "body must be a JSON object (a Claude Code hook input)")
        for name in ("hook_event_name", "session_id"):
            value = hook_input.get(name)
            if value is None:
                raise RequestRejected(400, "missing_field", f"'{name}' is required")
            if not isinstance(value, str) or not value:
                raise RequestRejected(400, "invalid_field", f"'{name}' must be a non-empty string")
        tool_name, tool_input = hook_input.get("tool_name"), hook_input.get("tool_input")
        if tool_name is not None and not isinstance(tool_name, str):
            raise RequestRejected(400, "invalid_field", "'tool_name' must be a string")
        if tool_input is not None and not isinstance(tool_input, dict):
            raise RequestRejected(400, "invalid_field", "'tool_input' must be a JSON object")
        return hook_input

    async def handle(self, headers: dict[bytes, bytes], query: bytes, receive: Receive) -> tuple[bytes, dict[str, str]]:
        """Answer one hook request: the JSON body and the response headers (status 200)."""
        started = time.perf_counter()
        tenant, token_id = await self.authorize(headers)
        if self.limiter.enabled:
            await self._rate_limit(tenant, token_id)
        body = await self.read_body(headers, receive)
        budget = self.settings.tenant_inflight_bytes
        held = self._inflight_bytes.get(tenant, 0)
        if budget and held + len(body) > budget:
            raise RequestRejected(
                429,
                "over_budget",
                f"tenant '{tenant}' has {held} bytes of events in flight; "
                f"its budget is {budget} (HOOKBUS_TENANT_INFLIGHT_BYTES)",
                {"Retry-After": "1"},
            )
        self._inflight_bytes[tenant] = held + len(body)
        try:
            return await self._answer(headers, query, tenant, body, started)
        finally:
            if (left := self._inflight_bytes[tenant] - len(body)) > 0:
                self._inflight_bytes[tenant] = left
            else:
                del self._inflight_bytes[tenant]

    async def _answer(
        self, headers: dict[bytes, bytes], query: bytes, tenant: str, body: bytes, started: float
    ) -> tuple[bytes, dict[str, str]]:
        dialect = headers.get(b"x-hookbus-dialect", b"").decode("latin-1")
        if query:
            dialect = parse_qs(query.decode("latin-1")).get("dialect", [dialect])[0]
        hook_input = self.parse(body)
        if dialect:
            try:
                hook_input, body = from_dialect(dialect, hook_input, body)
            except ValueError as exc:  # an unknown dialect name
                raise RequestRejected(400, "unknown_dialect", str(exc)) from exc
        event = hook_input["hook_event_name"]
        label = metrics.event_label(event)
        partition = self.keys.partition_of(hook_input["session_id"])
        policy, versions = self.registry.for_tenant(tenant)
        limit = policy.settings.limits.nesting_depth
        # Fewer brackets than the limit cannot nest deeper (one count in C; the walk only past it).
        if body.count(b"[") + body.count(b"{") > limit and depth_over(hook_input, limit) is not None:
            raise RequestRejected(
                400, "too_deep", f"the hook input is nested more than {limit} deep (hookbus.limits.nestingDepth)"
            )
        request = Request(
            event_id=self.new_event_id(),
            event=event,
            tenant=tenant,
            payload=body,
            received_ms=now_ms(),
            dialect=dialect,
            policy=versions,
        )
        # Plugins register their callbacks inside the dispatchers, so with any plugin listed
        # every blocking event waits for a decision.
        blocking = event_spec(event).blocking and bool(policy.entries(event) or policy.settings.plugins)
        if blocking:
            context_key = None
            if self.batcher.can_take_context and takes_context(policy, event):
                context_key = self.keys.pending_context(tenant, str(hook_input["session_id"]))
            output, decision, fail_open = await self._decide(request, started, policy, partition, context_key)
        else:
            output, decision, fail_open = await self._record(request, partition)
        response_headers = {"X-Hookbus-Event-Id": request.event_id, "X-Hookbus-Policy-Version": versions}
        if fail_open is not None:
            metrics.child(metrics.FAIL_OPEN, label, fail_open).inc()
        if fail_open is not None and FailOpenReason(fail_open).answered_by_gateway:
            response_headers["X-Hookbus-Outcome"] = "fail-open"
        else:
            response_headers["X-Hookbus-Outcome"] = "decided" if blocking else "recorded"
        metrics.child(metrics.DECISIONS, label, decision).inc()
        metrics.child(metrics.DECISION_LATENCY, label).observe(time.perf_counter() - started)
        if fail_open is not None or logger.isEnabledFor(logging.DEBUG):
            _log_answer(request, hook_input, decision, fail_open)
        if dialect:
            output = to_dialect(dialect, event, output)
        return orjson.dumps(output), response_headers

    async def _record(self, request: Request, partition: int) -> tuple[dict[str, Any], str, str | None]:
        fields = request.encode()
        stream = self.keys.events_stream(partition)
        try:
            await self.batcher.append(stream, fields)
        except BusUnavailable:
            request.fail_open = FailOpenReason.REDIS_UNAVAILABLE
            self.spool.put(stream, request.encode())
            return {}, "none", FailOpenReason.REDIS_UNAVAILABLE
        return {}, "none", None

    async def _rate_limit(self, tenant: str, token_id: str | None) -> None:
        try:
            async with asyncio.timeout(0.05):
                with redis_errors(self.redis_url):
                    wait_s = await self.limiter.take(tenant, token_id)
        except (BusUnavailable, TimeoutError):
            metrics.child(metrics.REDIS_ERRORS, "ratelimit").inc()
            return  # the limit cannot be checked: let the request through (fail open)
        if wait_s > 0:
            who = f"token {token_id}" if token_id else f"tenant '{tenant}'"
            raise RequestRejected(
                429, "rate_limited", f"{who} is over its rate limit", {"Retry-After": str(max(1, math.ceil(wait_s)))}
            )

    async def _decide(
        self, request: Request, started: float, policy: Policy, partition: int, context_key: str | None
    ) -> tuple[dict[str, Any], str, str | None]:
        # The deadline runs from the request's arrival (reading and parsing it count too), and
        # the dispatchers see the same instant as the end of their budget.
        remaining_s = max(0.0, policy.settings.deadline_for(request.event) - (time.perf_counter() - started))
        request.reply_to = self.waiter.channel_for(partition)
        request.deadline_ms = now_ms() + int(remaining_s * 1000)
        future = self.waiter.expect(request.event_id)
        stream = self.keys.blocking_stream(partition)
        reply: Reply | None
        waiting = time.perf_counter()
        try:
            async with asyncio.timeout(remaining_s):
                await self.batcher.append(stream, request.encode(), context_key)
                reply = await future
            metrics.REPLY_WAIT.observe(time.perf_counter() - waiting)
        except TimeoutError:
            metrics.REPLY_WAIT.observe(time.perf_counter() - waiting)
            metrics.child(metrics.TIMEOUTS, "reply").inc()
            reply = await self._claim(request, FailOpenReason.TIMEOUT, partition)
        except BusUnavailable as exc:
            logger.debug("failing open: %s", exc)
            # Keep the audit record: a dispatcher writes it, as fail-open, once Redis is back.
            request.fail_open = FailOpenReason.REDIS_UNAVAILABLE
            self.spool.put(stream, request.encode())
            return {}, "none", FailOpenReason.REDIS_UNAVAILABLE
        finally:
            self.waiter.forget(request.event_id)
        if reply is None:
            return {}, "none", FailOpenReason.TIMEOUT
        return reply.output, reply.decision, reply.fail_open

    async def _claim(self, request: Request, reason: FailOpenReason, partition: int) -> Reply | None:
        """Past the deadline: the decision if a dispatcher settled the event in time (its
        reply was lost or late), else mark the event as answered fail-open (:mod:`bus.stream.settle`)."""
        ttl_ms = OUTCOME_GRACE_MS + max(0, request.deadline_ms - now_ms())
        try:
            async with asyncio.timeout(CLAIM_TIMEOUT_S):
                with redis_errors(self.redis_url):
                    outcome_key = self.keys.outcome(request.event_id, partition)
                    stored = await self._claim_script(
                        [outcome_key], [reason, ttl_ms], client=self.partition_clients.get(partition)
                    )
        except (BusUnavailable, TimeoutError) as exc:
            metrics.child(metrics.REDIS_ERRORS, "claim").inc()
            logger.debug("could not settle %s as fail-open: %s", request.event_id, exc)
            return None
        if not stored:
            return None
        try:
            return Reply.decode(stored)
        except ProtocolError:
            return None

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
        ready = checks["redis"]["ok"] and checks["replies"]["ok"]
        return ready, checks


def _log_answer(request: Request, hook_input: dict[str, Any], decision: str, fail_open: str | None) -> None:
    """One line per answer: at info when the gateway answered fail-open, else at debug."""
    fields = event_fields(
        request.event_id,
        request.event,
        request.tenant,
        hook_input.get("session_id"),
        decision=decision,
        reason=fail_open,
    )
    if fail_open in (FailOpenReason.TIMEOUT, FailOpenReason.DISPATCHER_ERROR):
        logger.info("answered fail-open: %s", fail_open, extra=fields)
    else:  # redis_unavailable is logged once per outage, by the reply reader and the spool
        logger.debug("answered %s", decision, extra=fields)


__all__ = ["Gateway"]
