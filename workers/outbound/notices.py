"""The webhook of the approval queue: each new pending approval, sent to ``hookbus.approvals.webhook``.

A gateway that opens an approval adds its tenant and id to ``{p}approvals:opened``; the
dispatchers read that stream through one consumer group (``notices``, so each approval is sent
once) and POST ``{"type": "hookbus.approval.pending", "timestamp", "text", "data"}`` through the
SSRF guard, with Standard Webhooks headers (``webhook-id`` is the approval's id), signed when
``webhookSecret`` names a ``whsec_`` secret. ``text`` is one line a Slack or Teams incoming
webhook shows as it is. A notice that fails is tried three times, then logged, counted
(``hookbus_approval_notices_total{outcome="failed"}``) and dropped: the approval waits in the
queue all the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Final

import orjson
import redis.asyncio as aioredis

from bus.approvals.approval import Approval
from bus.approvals.store import ApprovalStore
from bus.errors import BusUnavailable, HookBusError, RedisCommandError
from bus.policy.loading import Policy
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import iso_time, now_ms
from workers.outbound.client import guarded_request
from workers.outbound.webhooks import webhook_headers
from workers.services import Services

logger = logging.getLogger("hookbus.dispatcher")

GROUP: Final = "notices"
#: Tries per notice, and the time each may take.
TRIES: Final = 3
TIMEOUT_S: Final = 5.0


def notice_text(approval: Approval) -> str:
    """The one line a chat shows: who asks for what, why, and how to answer."""
    tool_input = approval.tool_input if isinstance(approval.tool_input, dict) else {}
    what = str(tool_input.get("command") or tool_input.get("file_path") or tool_input.get("url") or "")[:300]
    call = f"{approval.tool_name}: {what}" if what else approval.tool_name
    return (
        f"hookbus: {approval.agent} in {approval.tenant} (session {approval.session_id[:12]}) asks to run {call}. "
        f"{approval.reason}. Answer by {iso_time(approval.deadline_ms)}: "
        f"hookbus approvals approve {approval.id} (or deny {approval.id} --reason ...)"
    )


def notice_body(approval: Approval) -> bytes:
    view = approval.view()
    return orjson.dumps(
        {
            "type": "hookbus.approval.pending",
            "timestamp": iso_time(now_ms()),
            "text": notice_text(approval),
            "data": view,
        }
    )


class ApprovalNotices:
    """Sends the webhook of each new approval (one task per dispatcher)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keyspace,
        redis_url: str,
        policy_of: Any,
        services: Services | None,
        consumer: str,
        metrics: Metrics | None = None,
    ) -> None:
        """``policy_of(tenant)``: the policy (awaitable) whose ``hookbus.approvals.webhook`` applies."""
        self.redis = redis
        self.keys = keys
        self.redis_url = redis_url
        self.store = ApprovalStore(redis, keys, redis_url)
        self.policy_of = policy_of
        self.services = services
        self.consumer = consumer
        self.metrics = metrics

    async def run(self, stop: asyncio.Event) -> None:
        stream = self.keys.approvals_opened
        while not stop.is_set():
            try:
                with redis_errors(self.redis_url):
                    try:
                        await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
                    except Exception as exc:  # BUSYGROUP: it exists
                        if "BUSYGROUP" not in str(exc):
                            raise
                    while not stop.is_set():
                        found = await self.redis.xreadgroup(GROUP, self.consumer, {stream: ">"}, count=16, block=500)
                        for _, entries in found or ():
                            for entry_id, fields in entries:
                                await self.send(fields)
                                await self.redis.xack(stream, GROUP, entry_id)
            except asyncio.CancelledError:
                raise
            except (BusUnavailable, RedisCommandError) as exc:
                logger.debug("approval notices: %s", exc)
                await asyncio.sleep(1.0)

    async def send(self, fields: dict[bytes, bytes]) -> bool:
        """POST one notice; True when the receiver took it."""
        tenant, approval_id = fields.get(b"tn", b"").decode(), fields.get(b"id", b"").decode()
        approval = await self.store.get(tenant, approval_id)
        if approval is None:
            return False
        policy: Policy = await self.policy_of(tenant)
        settings = policy.settings.approvals
        if settings.webhook is None:
            return False
        body = notice_body(approval)
        for attempt in range(TRIES):
            try:
                headers = {"content-type": "application/json"}
                headers |= webhook_headers(approval.id, body, settings.webhook_secret, os.environ)
                response = await guarded_request(
                    self.services, policy, "POST", settings.webhook, timeout_s=TIMEOUT_S, content=body, headers=headers
                )
                if 200 <= response.status_code < 300:
                    self._count("sent")
                    return True
                why = f"HTTP {response.status_code}"
            except HookBusError as exc:  # SSRF guard, timeouts, signing: never sent unsigned
                why = str(exc)
            logger.warning("approval %s: the webhook did not take the notice (%s)", approval.id, why)
            await asyncio.sleep(0.5 * (attempt + 1))
        self._count("failed")
        return False

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.approvals.notices.labels(outcome).inc()


def notices_of(dispatcher: Any) -> ApprovalNotices:
    """The notices task of a :class:`workers.dispatcher.answering.Dispatcher` (its Redis, registry, services)."""

    async def policy_of(tenant: str) -> Policy:
        policy: Policy = await dispatcher.registry.resolve(tenant, "")
        return policy

    return ApprovalNotices(
        dispatcher.redis,
        dispatcher.keys,
        dispatcher.redis_url,
        policy_of,
        dispatcher.services,
        dispatcher.consumer,
        dispatcher.metrics,
    )


__all__ = ["GROUP", "ApprovalNotices", "notice_body", "notice_text", "notices_of"]
