"""``POST /v1/hooks``: one hook input in, one Claude Code hook output out (docs/api.md).

Blocking events are appended to the blocking stream and the request waits for the
dispatchers' reply up to the event's deadline; past it, or when Redis cannot be reached,
the reply is ``200 {}`` with ``X-Hookbus-Outcome: fail-open`` (counted in
``hookbus_fail_open_total``). Non-blocking events (and blocking ones no handler listens to)
are answered once appended. This is the hot path: it runs as plain ASGI, without a router.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast
from urllib.parse import parse_qs

import orjson

from bus.dialects import CLAUDE, dialect_for
from bus.dialects.base import Dialect
from bus.dialects.mcpnames import naming_servers
from bus.errors import BusUnavailable, RequestRejected
from bus.hooks.decisions import Decision, FailOpenReason, RecordOutcome
from bus.hooks.events import event_spec
from bus.policy.agents import mcp_servers, serves
from bus.policy.loading import Policy
from bus.redis.connection import redis_errors
from bus.rules.limits import json_depth_over
from bus.rules.paths import HOME_FIELD, home_path
from bus.runtime import tracing
from bus.runtime.logs import event_fields
from bus.runtime.metrics import event_label
from bus.stream.pending_context import takes_context
from bus.stream.protocol import Reply, Request, now_ms
from bus.stream.settle import CLAIM_FAIL_OPEN, OUTCOME_GRACE_MS
from gateway.access import json_object
from gateway.approvals.desk import Asker
from gateway.frozen import FrozenAnswers
from gateway.inflight import InflightBudgets, Ticket
from gateway.limits import Limited, LimitedOutcome, limited_answer
from gateway.refusals import REFUSED_HEADER, REFUSED_REASONS, Refusal, agent_answer, refusal_record, refused_output
from gateway.replies.deadlines import Deadlines
from gateway.state import Gateway
from gateway.tracing import ForcedTraces, GatewayTrace

logger = logging.getLogger("hookbus.gateway")

#: How long a request past its deadline may wait for Redis to settle it (the answer is due
#: by deadline + 50 ms).
CLAIM_TIMEOUT_S = 0.03
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class HooksEndpoint:
    """``POST /v1/hooks`` on one gateway's state: authorize, read, append, wait, answer."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.metrics = gateway.metrics
        # What the hot path reads on every request, looked up once (none of it is replaced
        # while the process runs; the policy is read per request from the registry).
        self.settings = gateway.settings
        self.keys = gateway.keys
        self.redis_url = gateway.redis_url
        self.partition_clients = gateway.partition_clients
        self.batcher = gateway.batcher
        self.waiter = gateway.waiter
        self.spool = gateway.spool
        self.limiter = gateway.limiter
        self.registry = gateway.registry
        self.authorize = gateway.authorize
        self.new_event_id = gateway.new_event_id
        self.reply_key = gateway.reply_key
        self._claim_script = gateway.redis.register_script(CLAIM_FAIL_OPEN)
        #: Bytes of request bodies being handled right now, per session, token and tenant.
        self.inflight = InflightBudgets.from_settings(self.settings)
        #: Every waiting request's deadline, on one timer.
        self._deadlines = Deadlines()
        for reason in REFUSED_REASONS:  # the refusal series start at 0 with the gateway
            self.metrics.child(self.metrics.refused_inputs, reason)
        self._rate_limited = self.limiter.enabled  # the limits are the settings', fixed for the process
        #: Each tenant's share of the traces its callers force with a sampled traceparent.
        self._forced_traces = ForcedTraces(self.settings.tracing.forced_per_s, self.metrics.traces_forced_ignored)
        self.frozen = FrozenAnswers(gateway, self._rate)

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

    @classmethod
    def parse(cls, body: bytes) -> dict[str, Any]:
        """A Claude Code hook input from a request body (400 when it is not one)."""
        return cls.check_canonical(cls.parse_object(body))

    @staticmethod
    def parse_object(body: bytes) -> dict[str, Any]:
        return json_object(body, "a JSON object (a Claude Code hook input)")

    @staticmethod
    def check_canonical(hook_input: dict[str, Any]) -> dict[str, Any]:
        """``hook_input`` once its required fields are checked (400 naming the first bad one)."""
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

    async def handle(
        self, headers: dict[bytes, bytes], query: bytes, receive: Receive, client_address: str = ""
    ) -> tuple[bytes, dict[str, str]]:
        """Answer one hook request from ``client_address``: the JSON body and the response headers (status 200)."""
        started = time.perf_counter()
        tenant, token_id = await self.authorize(headers)
        # The limits are checked once the session is known (_admit); the ticket gives back what they took.
        ticket = Ticket(tenant, token_id, 0, client_address=client_address)
        try:
            body = await self.read_body(headers, receive)
        except RequestRejected as exc:
            if exc.status != 413:
                raise
            # Read no further than the limit: the event is not known, the answer denies it.
            speaker = self._speaker(headers, query)
            return await self._refuse(Refusal(exc.code, exc.detail), speaker, tenant, None, ticket)
        ticket.size_bytes = len(body)
        try:
            return await self._answer(headers, query, tenant, body, started, ticket)
        finally:
            self.inflight.release(ticket)

    @staticmethod
    def _speaker(headers: dict[bytes, bytes], query: bytes) -> Dialect:
        """The dialect the request asked for (400 ``unknown_dialect`` for a name there is none of)."""
        if (named := headers.get(b"x-hookbus-dialect")) is None and not query:
            return CLAUDE  # Claude Code's own requests name none
        dialect = (named or b"").decode("latin-1")
        dialect = parse_qs(query.decode("latin-1")).get("dialect", [dialect])[0] if query else dialect
        try:
            return dialect_for(dialect)
        except ValueError as exc:  # an unknown dialect name
            raise RequestRejected(400, "unknown_dialect", str(exc)) from exc

    async def _answer(
        self, headers: dict[bytes, bytes], query: bytes, tenant: str, body: bytes, started: float, ticket: Ticket
    ) -> tuple[bytes, dict[str, str]]:
        speaker = self._speaker(headers, query)
        agent_input: Any = None
        hook_input: Any = None
        try:
            agent_input = hook_input = self.parse_object(body)
            if speaker.name != "claude":
                hook_input = None  # until translated: the agent's own event names mean nothing here
                try:
                    # MCP tool names split as the tenant's policy names its servers (bus.dialects.mcpnames).
                    with naming_servers(mcp_servers(self.registry.for_tenant(tenant)[0])):
                        hook_input = speaker.to_canonical(agent_input)
                    if not isinstance(hook_input, dict):
                        raise TypeError(f"it translates to {type(hook_input).__name__}, not an object")
                    if hook_input is not agent_input:
                        body = orjson.dumps(hook_input)
                except Exception as exc:  # RecursionError, anything: what cannot be translated cannot be judged
                    hook_input = None
                    why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    raise RequestRejected(400, "dialect_error", f"not a {speaker.title} hook input: {why}") from exc
            if (sent_home := headers.get(b"x-hookbus-home")) and (home := home_path(sent_home.decode("latin-1"))):
                # The agent's home (hookbus hook sends its $HOME): what ~ in a path rule stands for.
                hook_input = {**hook_input, HOME_FIELD: home}
                body = orjson.dumps(hook_input)
            self.check_canonical(hook_input)
            event = hook_input["hook_event_name"]
            policy, versions = self.registry.for_tenant(tenant)
            limit = policy.settings.limits.nesting_depth
            if json_depth_over(body, hook_input, limit) is not None:
                raise RequestRejected(
                    400, "too_deep", f"the hook input is nested more than {limit} deep (hookbus.limits.nestingDepth)"
                )
        except RequestRejected as exc:
            refusal = self._refusal(exc, speaker, tenant, hook_input)
            if refusal is None:
                raise
            return await self._refuse(refusal, speaker, tenant, agent_input, ticket)
        ticket.session_id = hook_input["session_id"]
        if (freeze := self.frozen.frozen(tenant, event, hook_input.get("tool_name"))) is not None:
            return await self.frozen.answer(freeze, ticket, speaker, hook_input, body, agent_input, policy, versions)
        if (limited := await self._admit(ticket)) is not None:
            return self._limited(limited, event, policy, speaker, agent_input)
        label = event_label(event)
        partition = self.keys.partition_of(hook_input["session_id"])
        request = Request(
            event_id=self.new_event_id(),
            event=event,
            tenant=tenant,
            payload=body,
            received_ms=now_ms(),
            dialect="" if speaker.name == "claude" else speaker.name,
            policy=versions,
            token_id=ticket.token_id or "",
            client_address=ticket.client_address,
        )
        trace = GatewayTrace.begin(headers, request, speaker.name, started, self._forced_traces) if tracing.on else None
        blocking = _waits_on(policy, event, speaker.name)
        if blocking:
            context_key = None
            if self.batcher.can_take_context and takes_context(policy, event):
                context_key = self.keys.pending_context(tenant, str(hook_input["session_id"]))
            asker = Asker.from_headers(headers, ticket.token_id, speaker) if policy.settings.approvals.enabled else None
            output, decision, fail_open = await self._decide(
                request, started, policy, partition, context_key, trace, asker
            )
        else:
            output, decision, fail_open = await self._record(request, partition, trace)
        response_headers = {"X-Hookbus-Event-Id": request.event_id, "X-Hookbus-Policy-Version": versions}
        if fail_open is not None:
            self.metrics.child(self.metrics.fail_open, label, fail_open).inc()
        if fail_open is not None and FailOpenReason(fail_open).answered_by_gateway:
            response_headers["X-Hookbus-Outcome"] = RecordOutcome.FAIL_OPEN
        else:
            response_headers["X-Hookbus-Outcome"] = RecordOutcome.DECIDED if blocking else RecordOutcome.RECORDED
        self.metrics.child(self.metrics.decisions, label, decision).inc()
        latency_s = time.perf_counter() - started
        self.metrics.child(self.metrics.decision_latency, label).observe(latency_s)
        if trace is not None:
            outcome = response_headers["X-Hookbus-Outcome"]
            trace.finish(self.metrics, label, latency_s, decision, outcome, fail_open, self.settings.tracing.always)
        if fail_open is not None or logger.isEnabledFor(logging.DEBUG):
            _log_answer(request, hook_input, decision, fail_open)
        self.metrics.child(self.metrics.events_by_agent, speaker.name, label).inc()
        if speaker.name != "claude":
            output = speaker.to_agent(event, output, agent_input)
        return orjson.dumps(output), response_headers

    def _refusal(self, exc: RequestRejected, speaker: Dialect, tenant: str, hook_input: Any) -> Refusal | None:
        """The refusal ``exc`` is for an input that cannot be judged, or ``None`` when it stays a
        4xx: another error, or an event the gateway would not wait on."""
        if exc.code not in REFUSED_REASONS:
            return None
        fields = hook_input if isinstance(hook_input, dict) else {}
        event, session_id, tool_name = (fields.get(k) for k in ("hook_event_name", "session_id", "tool_name"))
        if not isinstance(event, str) or not event:
            event = None
        elif not _waits_on(self.registry.for_tenant(tenant)[0], event, speaker.name):
            return None
        session_id = session_id if isinstance(session_id, str) else ""
        return Refusal(exc.code, exc.detail, event, session_id, tool_name if isinstance(tool_name, str) else "")

    async def _refuse(
        self, refusal: Refusal, speaker: Dialect, tenant: str, agent_input: Any, ticket: Ticket
    ) -> tuple[bytes, dict[str, str]]:
        """Answer an input that cannot be judged as denied (:mod:`gateway.refusals`), and record it
        unless its sender is over a rate limit (a flood of them fills no log)."""
        ticket.session_id = refusal.session_id or None
        limited = await self._rate(ticket)
        output, decision = refused_output(refusal.event, refusal.reason)
        answer = agent_answer(speaker, refusal, output, agent_input)
        event_id = self.new_event_id()
        _, versions = self.registry.for_tenant(tenant)
        label = event_label(refusal.event or "")
        self.metrics.child(self.metrics.refused_inputs, refusal.code).inc()
        self.metrics.child(self.metrics.decisions, label, decision).inc()
        self.metrics.child(self.metrics.events_by_agent, speaker.name, label).inc()
        fields = event_fields(
            event_id,
            refusal.event or "unknown",
            tenant,
            refusal.session_id or None,
            decision=decision,
            reason=refusal.code,
        )
        headers = {
            "X-Hookbus-Event-Id": event_id,
            "X-Hookbus-Policy-Version": versions,
            "X-Hookbus-Outcome": RecordOutcome.DECIDED,
            REFUSED_HEADER: refusal.header,
        }
        if limited is not None:  # denied all the same; only the record and the log line are left out
            self.metrics.child(self.metrics.limited, limited.kind, limited.scope, LimitedOutcome.CLOSED).inc()
            headers["X-Hookbus-Limited"] = limited.headers(LimitedOutcome.CLOSED)["X-Hookbus-Limited"]
            return orjson.dumps(answer), headers
        logger.info("denied a hook input it cannot judge: %s", refusal.header, extra=fields)
        agent = "claude" if speaker.name == "claude" else speaker.name
        record = refusal_record(refusal, event_id, tenant, agent, output, decision, now_ms(), versions)
        record.token_id, record.client_address = ticket.token_id or "", ticket.client_address
        await self.gateway.log_record(record)
        return orjson.dumps(answer), headers

    async def _record(
        self, request: Request, partition: int, trace: GatewayTrace | None = None
    ) -> tuple[dict[str, Any], str, str | None]:
        fields = request.encode()
        stream = self.keys.events_stream(partition)
        try:
            if trace is not None:
                trace.appending()
            await self.batcher.append(stream, fields)
            if trace is not None:
                trace.appended()
        except BusUnavailable:
            return self._spooled(request, stream, FailOpenReason.REDIS_UNAVAILABLE)
        return {}, Decision.NONE, None

    async def _admit(self, ticket: Ticket) -> Limited | None:
        """The limit ``ticket``'s request meets (its rates, then its bytes in flight), else None
        with its bytes held."""
        limited = await self._rate(ticket)
        return limited if limited is not None else self.inflight.hold(ticket)

    async def _rate(self, ticket: Ticket) -> Limited | None:
        """The rate limit ``ticket``'s request meets, else None (a token taken from each bucket)."""
        if not self._rate_limited:
            return None
        try:
            async with asyncio.timeout(0.05):
                with redis_errors(self.redis_url):
                    return await self.limiter.take(ticket.tenant, ticket.token_id, ticket.session_id)
        except (BusUnavailable, TimeoutError):
            self.metrics.child(self.metrics.redis_errors, "ratelimit").inc()
            return None  # the rate cannot be checked: the request goes on (fail open)

    def _limited(
        self, limited: Limited, event: str, policy: Policy, speaker: Dialect, agent_input: Any
    ) -> tuple[bytes, dict[str, str]]:
        """A limited event's answer: 429 when the agent does not wait on it, else 200 in its
        format as ``hookbus.whenLimited`` says (:mod:`gateway.limits`)."""
        if not event_spec(event).blocking:
            self.metrics.child(self.metrics.limited, limited.kind, limited.scope, LimitedOutcome.REFUSED).inc()
            raise limited.rejection()
        # An event no handler listens to would get no opinion anyway: a limit takes nothing from it.
        decided = _waits_on(policy, event, speaker.name)
        answer, outcome = limited_answer(event, limited, policy.settings.when_limited if decided else "open")
        self.metrics.child(self.metrics.limited, limited.kind, limited.scope, outcome).inc()
        self.metrics.child(self.metrics.decisions, event_label(event), answer.decision).inc()
        logger.debug("limited (%s): %s", outcome, limited.detail)
        output = answer.output if speaker.name == "claude" else speaker.to_agent(event, answer.output, agent_input)
        return orjson.dumps(output), limited.headers(outcome)

    async def _decide(
        self,
        request: Request,
        started: float,
        policy: Policy,
        partition: int,
        context_key: str | None,
        trace: GatewayTrace | None = None,
        asker: Asker | None = None,
    ) -> tuple[dict[str, Any], str, str | None]:
        # The deadline runs from the request's arrival (reading and parsing it count too), and
        # the dispatchers see the same instant as the end of their budget.
        remaining_s = max(0.0, policy.settings.deadline_for(request.event) - (time.perf_counter() - started))
        request.reply_to = self.waiter.channel_for(partition)
        request.deadline_ms = now_ms() + int(remaining_s * 1000)
        entry = request.encode()
        # Only a reply made with the reply key for this very request is taken (bus.runtime.replykey).
        binding = self.reply_key.bind(cast(bytes, entry["m"]), request.payload)
        future = self.waiter.expect(request.event_id, binding)
        stream = self.keys.blocking_stream(partition)
        reply: Reply | None
        waiting = time.perf_counter()
        try:
            with self._deadlines.after(remaining_s):
                if trace is None:  # the task wakes once, for the reply; an append that fails fails its wait
                    self.batcher.append_failing_into(future, stream, entry, context_key)
                else:
                    await trace.append(self.batcher.append(stream, entry, context_key))
                reply = await future
                if trace is not None:
                    trace.replied()
            self.metrics.reply_wait.observe(time.perf_counter() - waiting)
        except TimeoutError:
            self.metrics.reply_wait.observe(time.perf_counter() - waiting)
            self.metrics.child(self.metrics.timeouts, "reply").inc()
            reply = await self._claim(request, FailOpenReason.TIMEOUT, partition, binding)
        except BusUnavailable as exc:
            logger.debug("failing open: %s", exc)
            return self._spooled(request, stream, FailOpenReason.REDIS_UNAVAILABLE)
        finally:
            self.waiter.forget(request.event_id)
        if reply is None:
            return {}, Decision.NONE, FailOpenReason.TIMEOUT
        if reply.approval is not None and asker is not None:  # an ask for a person (gateway.approvals)
            return await self.frozen.after_approval(request, await self.gateway.approvals.ask(request, reply, asker))
        return reply.output, reply.decision, reply.fail_open

    async def _claim(
        self, request: Request, reason: FailOpenReason, partition: int, binding: hashlib.blake2b
    ) -> Reply | None:
        """Past the deadline: the decision if a dispatcher settled the event in time (its
        reply was lost or late) and it verifies against ``binding``, else mark the event as answered
        fail-open (:mod:`bus.stream.settle`); with Redis out of reach its entry is spooled so marked."""
        ttl_ms = OUTCOME_GRACE_MS + max(0, request.deadline_ms - now_ms())
        outcome_key = self.keys.outcome(request.event_id, partition)
        try:
            async with asyncio.timeout(CLAIM_TIMEOUT_S):
                with redis_errors(self.redis_url):
                    client = self.partition_clients.get(partition)
                    stored = await self._claim_script([outcome_key], [reason, ttl_ms], client=client)
        except (BusUnavailable, TimeoutError) as exc:
            self.metrics.child(self.metrics.redis_errors, "claim").inc()
            logger.debug("could not settle %s as fail-open: %s", request.event_id, exc)
            self._spooled(request, self.keys.blocking_stream(partition), reason)
            return None
        return self.waiter.verified(request.event_id, binding, stored) if stored else None

    def _spooled(self, request: Request, stream: str, reason: FailOpenReason) -> tuple[dict[str, Any], str, str]:
        """Fail-open: ``request``'s entry, so marked, waits for Redis, then a dispatcher logs it."""
        request.fail_open = reason
        self.spool.put(stream, request.encode())
        return {}, Decision.NONE, reason


def _waits_on(policy: Policy, event: str, agent: str) -> bool:
    """Whether the gateway waits for a decision on ``event`` from ``agent`` under ``policy`` (on every
    blocking event when any plugin is listed: plugins register their callbacks in the dispatchers)."""
    return event_spec(event).blocking and (serves(policy, event, agent) or bool(policy.settings.plugins))


def _log_answer(request: Request, hook_input: dict[str, Any], decision: str, fail_open: str | None) -> None:
    """One line per answer: at info when the gateway answered fail-open, else at debug."""
    session = hook_input.get("session_id")
    fields = event_fields(request.event_id, request.event, request.tenant, session, decision=decision, reason=fail_open)
    if fail_open in (FailOpenReason.TIMEOUT, FailOpenReason.DISPATCHER_ERROR):
        logger.info("answered fail-open: %s", fail_open, extra=fields)
    else:  # redis_unavailable is logged once per outage, by the reply reader and the spool
        logger.debug("answered %s", decision, extra=fields)


__all__ = ["HooksEndpoint"]
