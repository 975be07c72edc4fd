"""Holding an agent's request while a person answers its ``ask`` (``hookbus.approvals``).

When the dispatchers' reply is an ``ask`` marked for the queue (:attr:`Reply.approval`) and the
section covers the request, the gateway opens a pending approval in Redis (or finds the one
this session's same call already has: a retry, ``claude -p --resume``) and answers from it:

* answered: allow (maybe with the approver's edited input) or deny with the approver's reason;
* a headless Claude Code run: ``defer`` at once (the run stops; ``--resume`` asks again);
* otherwise the request is held up to ``holdSeconds`` (and the agent's own hook timeout, which
  ``X-Hookbus-Hold-Seconds`` carries); still pending then, the agent is told to retry later:
  a deny, never an allow. A full queue or a queue that cannot be reached gives the timeout's
  verdict at once.

One Pub/Sub subscription per gateway wakes the held requests when an approval ends (a poll
every :data:`POLL_S` covers a lost message), and a sweeper expires overdue approvals.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, Final

from bus.approvals.approval import (
    Approval,
    Outcome,
    Status,
    answer_output,
    pending_output,
    timeout_output,
    verdict_output,
)
from bus.approvals.asking import applies, approved_always, approvers_needed, call_digest
from bus.approvals.store import ApprovalStore
from bus.dialects.base import Dialect, Support
from bus.errors import BusUnavailable, ProtocolError
from bus.hooks.decisions import Decision
from bus.policy.approvals import ApprovalsSettings
from bus.redaction.redact import redactor_for
from bus.redis.connection import redis_errors
from bus.stream.protocol import LogRecord, Reply, Request, now_ms, payload_json
from gateway.approvals.records import answer_record, approval_note, unstored_note

logger = logging.getLogger("hookbus.gateway")

#: How often a held request looks at its approval itself while the gateway's subscription is down,
#: and while it is up (a lost Pub/Sub message costs at most that much; 10,000 held requests poll
#: Redis 1,000 times a second).
POLL_S: Final = 1.0
POLL_SUBSCRIBED_S: Final = 10.0
#: How often each gateway expires overdue approvals and counts the pending ones.
SWEEP_S: Final = 1.0
#: The session's last events an approval shows, from this many of the newest records.
TRAIL_EVENTS: Final = 10
TRAIL_SCAN: Final = 200
#: Webhook notices kept for the dispatchers (a safety cap: they are read within a second).
NOTICES_MAXLEN: Final = 10_000


#: The ASGI ``receive`` of the hook request being answered (:mod:`gateway.app` sets it): a held
#: request ends as soon as its agent goes away, instead of holding a slot until ``holdSeconds``.
HOOK_RECEIVE: ContextVar[Callable[[], Awaitable[Mapping[str, Any]]] | None] = ContextVar(
    "hookbus_hook_receive", default=None
)


@dataclasses.dataclass(frozen=True, slots=True)
class Asker:
    """Who sent the request: its token (a digest or managed id; never approves), its agent,
    whether it runs headless and its own hook timeout (``X-Hookbus-Hold-Seconds``)."""

    token: str | None
    dialect: Dialect
    headless: bool = False
    hold_s: float | None = None

    @classmethod
    def from_headers(cls, headers: dict[bytes, bytes], token: str | None, dialect: Dialect) -> Asker:
        headless = headers.get(b"x-hookbus-headless", b"").strip().lower() in (b"1", b"true", b"yes")
        hold_s: float | None = None
        with contextlib.suppress(ValueError):
            hold_s = float(headers.get(b"x-hookbus-hold-seconds", b"") or "nan")
        return cls(token, dialect, headless, hold_s if hold_s is not None and math.isfinite(hold_s) else None)


def _summary(record: LogRecord) -> dict[str, Any]:
    hook_input = payload_json(record.payload)
    tool_input = hook_input.get("tool_input") if isinstance(hook_input, dict) else None
    what = ""
    if isinstance(tool_input, dict):
        what = str(tool_input.get("command") or tool_input.get("file_path") or tool_input.get("url") or "")
    return {"event": record.event, "tool": record.tool_name or None, "decision": record.decision, "what": what[:200]}


class ApprovalDesk:
    """One gateway's side of the approval queue."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.keys = gateway.keys
        self.metrics = gateway.metrics.approvals
        self.store = ApprovalStore(gateway.redis, gateway.keys, gateway.redis_url)
        self._held: dict[str, set[asyncio.Future[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: The answered channel is subscribed: held requests rely on it and poll seldom.
        self.subscribed = False

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._listen(), name="hookbus-approvals-listen"),
                asyncio.create_task(self._sweep(), name="hookbus-approvals-sweep"),
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def settings_for(self, tenant: str) -> tuple[ApprovalsSettings, Any]:
        policy = self.gateway.registry.for_tenant(tenant)[0]
        return policy.settings.approvals, policy

    async def ask(self, request: Request, reply: Reply, asker: Asker) -> tuple[dict[str, Any], str, str | None]:
        """The agent's answer to an ``ask`` the dispatchers marked for the queue: the output, the
        decision and the fail-open reason (None: an approval answer is never a fail-open one)."""
        hook_input = request.hook_input()
        settings, policy = self.settings_for(request.tenant)
        asks = asker.dialect.capabilities["ask"].support is Support.YES
        if reply.approval is None or not applies(
            settings, request.tenant, request.agent, request.event, asker.headless, asks
        ):
            return reply.output, reply.decision, reply.fail_open
        self.start()
        session_id = str(hook_input.get("session_id", ""))
        created = now_ms()
        approval = Approval(
            id=secrets.token_hex(8),
            tenant=request.tenant,
            event_id=request.event_id,
            event=request.event,
            session_id=session_id,
            agent=request.agent,
            tool_name=str(hook_input.get("tool_name") or ""),
            tool_input=hook_input.get("tool_input"),
            reason=reply.approval.get("reason", ""),
            rule=reply.approval.get("rule", ""),
            requester=asker.token or "",
            created_ms=created,
            deadline_ms=created + int(settings.timeout_seconds * 1000),
            on_timeout=settings.on_timeout,
            need=approvers_needed(settings, reply.approval),
            partition=self.keys.partition_of(session_id),
            cwd=str(hook_input.get("cwd") or ""),
        )
        if (rule := approved_always(settings, hook_input)) is not None:  # "approve always", in the policy
            self.metrics.settled(Outcome.ALWAYS)
            reason = f"approved always in hookbus policy (rule {rule})"
            output = verdict_output(request.event, Decision.ALLOW, reason)
            note = unstored_note(approval, Outcome.ALWAYS, rule=rule)
            await self._record(approval, request.event_id, (output, Decision.ALLOW), note, policy, hook_input)
            return output, Decision.ALLOW, None
        keep_ms = int(settings.keep_seconds * 1000)
        try:
            approval.trail, approval.facts = await self._trail(approval.partition, request.tenant, session_id)
            opened = await self.store.open(
                approval, call_digest(session_id, hook_input), approval.rule, settings.max_pending, keep_ms
            )
            if opened.kind == "known":
                known = await self.store.get(request.tenant, opened.approval_id)
                approval = known if known is not None else approval
        except BusUnavailable as exc:
            logger.warning("the approval queue cannot be reached (%s): the timeout's verdict", exc)
            output, decision = timeout_output(
                request.event, settings.on_timeout, "the approval queue cannot be reached"
            )
            return output, decision, None
        if opened.kind in ("granted", "full"):
            outcome = Outcome.SESSION if opened.kind == "granted" else Outcome.OVERFLOW
            self.metrics.settled(outcome)
            if outcome is Outcome.SESSION:  # no approval of this call exists: the reason names none
                reason = "approved for this session in hookbus by an earlier answer for the same rule"
                output, decision = verdict_output(request.event, Decision.ALLOW, reason), Decision.ALLOW
            else:
                why = f"too many approvals are pending for tenant {request.tenant} (hookbus.approvals.maxPending)"
                output, decision = timeout_output(request.event, settings.on_timeout, why)
            await self._record(
                approval, request.event_id, (output, decision), unstored_note(approval, outcome), policy, hook_input
            )
            return output, decision, None
        if opened.kind == "opened" and settings.webhook is not None:
            await self._announce(approval)

        if approval.status == Status.PENDING:
            defer = asker.dialect.name == "claude" and asker.headless and settings.defer_headless
            if defer and request.event == "PreToolUse":
                output, decision = pending_output(approval, defer=True)
                note = approval_note(approval, "deferred")
                await self._record(approval, request.event_id, (output, decision), note, policy, hook_input)
                return output, decision, None
            hold_s = min(settings.hold_seconds, asker.hold_s if asker.hold_s is not None else math.inf)
            approval = await self._hold(approval, max(0.0, hold_s))
        if approval.status == Status.PENDING:
            output, decision = pending_output(approval, defer=False)
            await self._record(
                approval, request.event_id, (output, decision), approval_note(approval, "held"), policy, hook_input
            )
            return output, decision, None
        if approval.status == Status.APPROVED and not await self._delivered(approval, request.event_id):
            output, decision = pending_output(approval, defer=False, spent=True)
            await self._record(
                approval, request.event_id, (output, decision), approval_note(approval, "spent"), policy, hook_input
            )
            return output, decision, None
        output, decision = answer_output(approval)
        if approval.event_id != request.event_id:  # a retry: its own record (the first one's was written when it ended)
            note = approval_note(approval, approval.status, answered_event=approval.event_id)
            await self._record(approval, request.event_id, (output, decision), note, policy, hook_input)
        return output, decision, None

    async def _delivered(self, approval: Approval, event_id: str) -> bool:
        try:
            return await self.store.deliver(approval, event_id)
        except BusUnavailable:
            return False  # cannot claim it: not an allow

    async def _announce(self, approval: Approval) -> None:
        """Tell the dispatchers to send the webhook of a new approval (:mod:`workers.outbound.notices`)."""
        try:
            with redis_errors(self.gateway.redis_url):
                fields = {"tn": approval.tenant, "id": approval.id}
                await self.gateway.redis.xadd(
                    self.keys.approvals_opened, fields, maxlen=NOTICES_MAXLEN, approximate=True
                )
        except BusUnavailable as exc:  # the approval waits all the same; only its notice is lost
            logger.warning("approval %s: its webhook notice cannot be queued (%s)", approval.id, exc)

    async def _hold(self, approval: Approval, hold_s: float) -> Approval:
        """``approval`` once it ends, or as it stands after ``hold_s`` seconds."""
        loop = asyncio.get_running_loop()
        until = loop.time() + hold_s
        key = self.store.message(approval.tenant, approval.id)
        receive, gone = HOOK_RECEIVE.get(), asyncio.Event()
        watcher = asyncio.create_task(self._until_gone(receive, gone, key)) if receive is not None else None
        try:
            return await self._held_until(approval, key, until, gone)
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _until_gone(
        self, receive: Callable[[], Awaitable[Mapping[str, Any]]], gone: asyncio.Event, key: str
    ) -> None:
        """Set ``gone`` (and wake the held requests of ``key``) when the agent disconnects."""
        while (await receive()).get("type") != "http.disconnect":
            pass
        gone.set()
        self.wake(key)

    async def _held_until(self, approval: Approval, key: str, until: float, gone: asyncio.Event) -> Approval:
        loop = asyncio.get_running_loop()
        while True:
            left = until - loop.time()
            if left <= 0 or gone.is_set():
                return approval
            to_deadline = (approval.deadline_ms - now_ms()) / 1000
            woken: asyncio.Future[None] = loop.create_future()
            self._held.setdefault(key, set()).add(woken)
            try:
                with contextlib.suppress(TimeoutError):
                    poll_s = POLL_SUBSCRIBED_S if self.subscribed else POLL_S
                    async with asyncio.timeout(max(0.0, min(poll_s, left, to_deadline + 0.001))):
                        await woken
            finally:
                held = self._held.get(key)
                if held is not None:
                    held.discard(woken)
                    if not held:
                        del self._held[key]
            try:
                if now_ms() >= approval.deadline_ms:
                    await self.expire(approval.tenant, approval.id)
                current = await self.store.get(approval.tenant, approval.id)
            except BusUnavailable:
                continue  # held on: Redis may come back before the hold ends (never an allow meanwhile)
            if current is None:
                return approval
            approval = current
            if approval.status != Status.PENDING:
                return approval

    def wake(self, message: str) -> None:
        for woken in self._held.get(message, ()):
            if not woken.done():
                woken.set_result(None)

    async def _listen(self) -> None:
        backoff = 0.1
        while True:
            try:
                with redis_errors(self.gateway.redis_url):
                    pubsub = self.gateway.redis.pubsub()
                    try:
                        await pubsub.subscribe(self.keys.approvals_answered)
                        backoff, self.subscribed = 0.1, True
                        async for message in pubsub.listen():
                            if message.get("type") == "message":
                                data = message["data"]
                                self.wake(data.decode() if isinstance(data, bytes) else str(data))
                    finally:
                        with contextlib.suppress(Exception):
                            await pubsub.aclose()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis gone: held requests poll meanwhile
                logger.debug("approvals listener: %s", exc)
            self.subscribed = False
            await asyncio.sleep(backoff)
            backoff = min(5.0, backoff * 2)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await self.expire_overdue()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.debug("approvals sweep: %s", exc)

    async def expire_overdue(self) -> None:
        """Expire every overdue approval (each once, whichever gateway gets there first) and
        set ``hookbus_approvals_pending``."""
        tenants = await self.store.tenants()
        at_ms = now_ms()
        for tenant in tenants:
            for approval_id in await self.store.overdue(tenant, at_ms):
                await self.expire(tenant, approval_id)
        self.metrics.pending.set(await self.store.pending_count(tenants))

    async def expire(self, tenant: str, approval_id: str) -> None:
        """Expire one overdue approval; the call that does counts it and writes its record."""
        if not await self.store.expire(tenant, approval_id):
            return
        approval = await self.store.get(tenant, approval_id)
        if approval is None:
            return
        self.settled(approval, Outcome.EXPIRED)
        output, decision = answer_output(approval)
        await self._record(
            approval, approval.event_id, (output, decision), approval_note(approval, Outcome.EXPIRED), None
        )

    def settled(self, approval: Approval, outcome: Outcome) -> None:
        """Count how ``approval`` ended, and its wait."""
        wait_s = max(0.0, (int(approval.answer.get("at_ms") or now_ms()) - approval.created_ms) / 1000)
        self.metrics.settled(outcome, wait_s)

    async def record_answer(self, approval: Approval, outcome: str) -> None:
        """The record of the approval's event once a person answered it."""
        output, decision = answer_output(approval)
        await self._record(approval, approval.event_id, (output, decision), approval_note(approval, outcome), None)

    async def _record(
        self,
        approval: Approval,
        event_id: str,
        answer: tuple[dict[str, Any], str],
        note: dict[str, Any],
        policy: Any,
        hook_input: dict[str, Any] | None = None,
    ) -> None:
        """Append the record of ``event_id`` answered with ``answer`` (output, decision)."""
        if policy is None:
            policy = self.settings_for(approval.tenant)[1]
        redactor = redactor_for(policy.settings.redact)
        record = answer_record(approval, event_id, *answer, note, redactor, hook_input)
        await self.gateway.log_record(record)  # in the session's partition, linked into its chain

    async def _trail(self, partition: int, tenant: str, session_id: str) -> tuple[list[dict[str, Any]], list[str]]:
        """The session's last events from the newest records of its decision log (bounded; the
        tenant's own: another tenant's session may have the same id), and its facts as its
        newest record left them."""
        with redis_errors(self.gateway.redis_url):
            entries = await self.gateway.redis.xrevrange(self.keys.decision_log(partition), count=TRAIL_SCAN)
        trail: list[dict[str, Any]] = []
        facts: list[str] | None = None
        for _, fields in entries:
            try:
                record = LogRecord.decode(fields)
            except ProtocolError:  # an unreadable record is left out of the trail
                record = None
            if record is not None and record.session_id == session_id and record.tenant == tenant:
                trail.append(_summary(record))
                if facts is None:
                    facts = list(record.facts)
                if len(trail) >= TRAIL_EVENTS:
                    break
        return trail[::-1], facts or []


__all__ = ["POLL_S", "SWEEP_S", "ApprovalDesk", "Asker"]
