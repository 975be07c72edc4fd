"""Evaluating one event against the policy: select, run concurrently, merge, guard.

Handlers are selected by the agent that sent the event (a handler's ``agents``), the group
matcher and the handler's ``if``; ``async`` handlers become jobs for the arq queue
(:attr:`Evaluation.jobs`, queued when the event is settled, see :mod:`workers.jobs.enqueue`);
the rest run concurrently, each bounded by its own timeout and by the event's deadline. Their
results are merged by :func:`bus.hooks.merge.merge_results`. Platform rules follow:
``failMode: closed``, ``shadow`` handlers (logged, never enforced), ``once`` across the fleet,
and the Stop guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal

import orjson
import redis.asyncio as aioredis

from bus.approvals.asking import queued_ask
from bus.errors import BusUnavailable, RedisCommandError
from bus.freeze.cache import FreezeCache
from bus.freeze.freezes import FREEZE_HANDLER
from bus.hooks.decisions import Decision, FailOpenReason
from bus.hooks.events import STOP_EVENTS
from bus.hooks.merge import MergedDecision, merge_results
from bus.hooks.plugins import hooks_for
from bus.hooks.results import HandlerResult, Outcome, with_note
from bus.policy.compiled import CompiledHandler, compiled
from bus.policy.compiled import selected as compiled_selected
from bus.policy.deciding import deciders, judge
from bus.policy.loading import HandlerEntry, Policy
from bus.policy.rulelists import Call, decide_rules, read_call_files
from bus.redis.connection import redis_errors
from bus.redis.keys import Keyspace
from bus.redis.topology import Topology
from bus.rules.permissions import Files
from bus.runtime import tracing
from bus.runtime.logs import event_fields
from bus.runtime.metrics import Metrics, event_label, process_metrics
from bus.session.definitions import session_policy
from bus.session.state import SessionState
from bus.stream.pending_context import CONTEXT_BATCH, CONTEXT_TTL_S, parse_items, takes_context, with_context
from bus.stream.protocol import CLAUDE_CODE, Request
from workers.engine.contextpops import ContextPops
from workers.engine.durations import observe_all
from workers.engine.fleetvalues import FleetValues
from workers.engine.judging import judge_command, judged
from workers.engine.sessions import SessionJudge, SessionOutcome
from workers.handlers.context import HookContext, Runner, default_timeout_s
from workers.handlers.function import run_plugins
from workers.handlers.runners import SELF_TIMED_TYPES
from workers.handlers.tracing import HandlerSpan
from workers.jobs.enqueue import PreparedJob, prepare_job
from workers.services import Services

logger = logging.getLogger("hookbus.dispatcher")

ONCE_TTL_S = 7 * 86400
ONCE_CLAIM_GRACE_S = 30
#: Handler types evaluated in-process without I/O: no task, no timer.
INLINE_TYPES = frozenset({"rule"})
STOP_GUARD_TTL_S = 3600

#: What the engine does with ``async`` handlers: make them jobs (:attr:`Evaluation.jobs`, the
#: dispatcher's), leave them out (a policy replay: they never decide), or run them like the others.
AsyncHandlers = Literal["jobs", "skip", "inline"]


@dataclasses.dataclass(slots=True)
class Evaluation:
    """What the policy said about one event."""

    merged: MergedDecision
    results: list[HandlerResult]
    shadow: list[dict[str, Any]]
    fail_open: FailOpenReason | None = None
    #: The jobs of the selected ``async`` handlers, for the settlement to queue.
    jobs: list[PreparedJob] = dataclasses.field(default_factory=list)
    #: The ids of the handlers that made the decision (none for ``none``).
    decided_by: list[str] = dataclasses.field(default_factory=list)
    #: An ``ask`` for the central approval queue (:func:`bus.approvals.asking.queued_ask`), else None.
    approval: dict[str, str] | None = None
    #: What the event does to its session's state (None: the policy keeps none).
    session: SessionOutcome | None = None


def selected(entry: HandlerEntry, event: str, hook_input: Mapping[str, Any], agent: str = CLAUDE_CODE) -> bool:
    """Does ``entry`` run on this event from ``agent`` (its ``agents``, group matcher, then ``if``)?
    The reference :meth:`bus.policy.compiled.CompiledEvent.select` decides as."""
    return compiled_selected(entry, event, hook_input, agent)


async def _unsupported(ctx: HookContext) -> HandlerResult:
    return HandlerResult(Outcome.ERROR, reason=f"handler type '{ctx.entry.handler.type}' is not available here")


class Engine:
    """Runs the policy for one event at a time; shared by all of a dispatcher's tasks."""

    def __init__(
        self,
        policy: Policy,
        redis: aioredis.Redis,
        keys: Keyspace,
        runners: Mapping[str, Runner],
        async_handlers: AsyncHandlers = "inline",
        services: Services | None = None,
        metrics: Metrics | None = None,
        topology: Topology | None = None,
    ) -> None:
        self.metrics = metrics or process_metrics()
        self.policy = policy
        self.redis = redis
        #: Pending-context pops of concurrent events, pipelined together.
        self.context_pops = ContextPops(redis, topology=topology)
        self.keys = keys
        self.runners = dict(runners)
        self.async_handlers = async_handlers
        self.services = services
        #: The freezes in force (:mod:`bus.freeze`); the dispatcher starts its polling.
        self.freezes = FreezeCache(redis, keys, metrics=self.metrics)
        #: Tenant and agent counters that when: conditions read (the dispatcher starts the poll).
        self.fleet_values = FleetValues(redis, keys)

    async def evaluate(
        self,
        request: Request,
        hook_input: dict[str, Any],
        policy: Policy | None = None,
        session: SessionState | None = None,
        session_at_ms: int | None = None,
    ) -> Evaluation:
        """Run ``policy`` (default: the engine's own) on one event, ``session`` its session's state
        (judged at ``session_at_ms``, default now: a replay judges at the recorded time).

        A long shell command is split first, off the event loop and within a budget (or not at
        all past ``hookbus.limits``); every rule and ``if`` of the event sees that judgement."""
        policy = policy or self.policy
        limits = policy.settings.limits
        found = await judge_command(hook_input, limits, request.remaining_s(), request.tenant)
        with judged(found, limits):
            if not request.traced:  # tracing off, or an event whose trace is not sampled
                return await self._evaluate(request, hook_input, policy, session, session_at_ms)
            with tracing.current(tracing.start("hookbus.evaluate", attributes={"hookbus.policy": policy.revision})):
                return await self._evaluate(request, hook_input, policy, session, session_at_ms)

    async def _evaluate(
        self,
        request: Request,
        hook_input: dict[str, Any],
        policy: Policy,
        session: SessionState | None,
        session_at_ms: int | None = None,
    ) -> Evaluation:
        event = request.event
        if (freeze := self.freezes.frozen(request.tenant, event, hook_input.get("tool_name"))) is not None:
            # Frozen (an event appended before its gateway saw the freeze): denied, whatever the policy says.
            self.metrics.child(self.metrics.frozen_decisions, request.tenant).inc()
            result = freeze.result(event)
            return Evaluation(merge_results(event, [result]), [result], [], decided_by=[FREEZE_HANDLER])
        sessions = None  # SessionJudge.of(), inline: once per event
        if (compiled_session := session_policy(policy)).defined:
            values = self.fleet_values  # the tenant's and agent's counters, when the policy reads some
            fleet = (lambda c: values.get(request.tenant, request.agent, c)) if compiled_session.fleet else None
            sessions = SessionJudge(compiled_session, session or SessionState(), session_at_ms, fleet)
        slots: list[HandlerResult | None] = []  # in policy order; None: run below
        contexts: list[tuple[int, HookContext, str]] = []  # and the note its answer's reason takes
        jobs: list[PreparedJob] = []
        fast = not request.traced
        call: Call | None = None  # the tool call as rule lists read it, once an event
        files: Files | None = None  # and a file tool's paths
        unread = True
        given: dict[str, Any] | None = None  # the session as handlers are given it, once an event
        inline_s: list[float] = []  # the durations of the rule handlers decided here, observed at once
        chosen = compiled(policy).select(event, hook_input, request.agent)
        for handler in chosen if sessions is None else sessions.keep(chosen):
            if handler.run_async and self.async_handlers != "inline":
                if self.async_handlers == "jobs":
                    settings = policy.settings.async_
                    max_age_s = handler.handler.max_age_seconds or settings.max_age_seconds
                    jobs.append(prepare_job(request, handler.handler_id, max_age_s, settings.max_queued))
                continue
            if fast and handler.inline:
                if unread:
                    (call, files), unread = _read_call(hook_input), False
                result = self._decide_inline(handler, request, hook_input, call, files)
                inline_s.append(result.duration_s)
                slots.append(result)
                continue
            if sessions is not None and given is None:
                given = sessions.handed()
            ctx = HookContext(
                request, hook_input, handler.entry, policy, handler.timeout_s, self.services, session=given
            )
            contexts.append((len(slots), ctx, handler.note))
            slots.append(None)
        if inline_s:
            observe_all(self.metrics.child(self.metrics.hook_duration, "rule"), inline_s)
        if len(contexts) == 1 or all(ctx.entry.handler.type in INLINE_TYPES for _, ctx, _ in contexts):
            # In-process handlers finish without yielding: running them in turn skips a task each.
            for i, ctx, note in contexts:
                slots[i] = with_note(await self._run(ctx), note)
        else:
            ran = await asyncio.gather(*(self._run(ctx) for _, ctx, _ in contexts))
            for (i, _, note), result in zip(contexts, ran, strict=True):
                slots[i] = with_note(result, note)
        results = [result for result in slots if result is not None]
        if hooks_for(event) and not policy.disable_all_hooks:  # bus.hooks.plugins callbacks, after the policy's
            timeout_s = min(default_timeout_s("function", event), request.remaining_s())
            results.append(await run_plugins(event, hook_input, timeout_s, self.metrics))
        if sessions is not None:
            results = sessions.answers(results, event, hook_input, call)
        judgement = judge(event, results, policy.settings.shadow)
        merged = judgement.merged
        if event in STOP_EVENTS:
            merged = await self._stop_guard(request, hook_input, merged, policy.settings.stop_block_limit)
        if request.context is not None or (request.blocking and takes_context(policy, event)):
            merged = await self._deliver_async_context(request, hook_input, merged)
        decided_by = deciders(event, judgement.enforced, merged.decision)
        child = self.metrics.child
        for count in judgement.counts:  # the judgement's side effects, in one step
            child(getattr(self.metrics, count.metric), *count.labels).inc()
        for handler_id in decided_by:
            child(self.metrics.handler_decisions, event_label(event), handler_id, merged.decision).inc()
        approval = None
        if request.blocking and merged.decision == Decision.ASK:
            approvals, entries = policy.settings.approvals, policy.by_event.get(event, ())
            matched = {result.handler_id: result.rule for result in results if result.rule}
            approval = queued_ask(approvals, entries, event, merged.decision, decided_by, merged.reason, matched)
        outcome = None if sessions is None else sessions.outcome(event, hook_input, merged.decision, call)
        return Evaluation(
            merged, results, judgement.shadow, judgement.fail_open, jobs, decided_by, approval, session=outcome
        )

    async def _deliver_async_context(
        self, request: Request, hook_input: dict[str, Any], merged: MergedDecision
    ) -> MergedDecision:
        """Add what async hooks left for this session (Claude Code delivers it on the next turn):
        what the gateway took into the entry, or else what is in the session's list now."""
        try:
            if request.context is not None:
                items = parse_items(request.context)
            else:
                key = self.keys.pending_context(request.tenant, str(hook_input.get("session_id")))
                # One atomic command (also on a Redis Cluster, which has no MULTI); what is left
                # past the count waits for the next turn.
                popped = await self.context_pops.pop(key, CONTEXT_BATCH)
                items = parse_items(popped) if popped else []
        except BusUnavailable:
            return merged
        except ValueError as exc:  # orjson.JSONDecodeError is one
            logger.warning("pending context of event %s dropped: %s", request.event_id, exc)
            return merged
        if not items:
            return merged
        return dataclasses.replace(merged, output=with_context(merged.output, request.event, items))

    async def restore_context(self, request: Request) -> None:
        """Put back what the gateway took into an event that will not deliver it (it expired
        waiting): at the head of the session's list, for the session's next turn."""
        if not request.context or request.context == b"[]":
            return
        try:
            items = [orjson.dumps(item) for item in parse_items(request.context)]
            key = self.keys.pending_context(request.tenant, str(request.hook_input().get("session_id")))
            with redis_errors():
                async with self.redis.pipeline(transaction=False) as pipe:  # one key: one node of a cluster
                    pipe.lpush(key, *reversed(items))
                    pipe.expire(key, CONTEXT_TTL_S)
                    await pipe.execute()
        except (BusUnavailable, RedisCommandError, ValueError) as exc:
            # ValueError: the hook input is no JSON object; RedisCommandError: the key is no list.
            logger.warning("pending context of event %s could not be put back: %s", request.event_id, exc)

    def _decide_inline(
        self,
        handler: CompiledHandler,
        request: Request,
        hook_input: dict[str, Any],
        call: Call | None = None,
        files: Files | None = None,
    ) -> HandlerResult:
        """A ``rule`` handler without ``once``, untraced, decided in this call: what :meth:`_run`
        does, without the task, the timer and the coroutine it needs for handlers that wait (its
        duration is observed by the caller, with the event's other rule handlers')."""
        assert handler.rules is not None
        started = time.perf_counter()
        try:
            result = decide_rules(handler.rules, handler.reason, request.event, hook_input, call, files, handler.note)
        except Exception as exc:  # a broken handler must never break the dispatcher
            extra = _fields(request, hook_input, handler.handler_id, handler_type="rule")
            logger.exception("handler raised", extra=extra)
            result = HandlerResult(Outcome.ERROR, reason=f"{type(exc).__name__}: {exc}")
        result.duration_s = time.perf_counter() - started
        result.handler_type = handler.handler_type
        result.handler_id = handler.handler_id
        result.fail_closed = handler.fail_closed
        result.shadow = handler.handler.shadow
        if result.failed:
            self.metrics.hook_errors.labels(handler.handler_type, result.outcome.value).inc()
            closed = " (failMode: closed, so it blocks)" if result.fail_closed else ""
            extra = _fields(request, hook_input, handler.handler_id, handler_type="rule", reason=result.reason)
            logger.info("handler %s%s", result.outcome.value, closed, extra=extra)
        return result

    async def _run(self, ctx: HookContext) -> HandlerResult:
        handler = ctx.entry.handler
        once_key = None
        if handler.once:
            once_key = self.keys.once(ctx.request.tenant, str(ctx.hook_input.get("session_id")), ctx.entry.handler_id)
            # Claimed for the run only (a dispatcher that dies mid-run must not keep it forever);
            # a successful run makes it last.
            claim_s = int(min(ctx.timeout_s, ctx.request.remaining_s())) + ONCE_CLAIM_GRACE_S
            try:
                with redis_errors():
                    claimed = await self.redis.set(once_key, b"running", nx=True, ex=claim_s)
            except BusUnavailable:
                claimed = True  # cannot tell: run it (fail open)
            if not claimed:
                return HandlerResult(
                    Outcome.OK,
                    output={},
                    handler_type=handler.type,
                    handler_id=ctx.entry.handler_id,
                    reason="once: already ran",
                )
        runner = self.runners.get(handler.type, _unsupported)
        timeout_s = 0.0
        span = HandlerSpan(handler, ctx.entry.handler_id) if ctx.request.traced else None
        started = time.perf_counter()
        try:
            if handler.type in INLINE_TYPES or handler.type in SELF_TIMED_TYPES:
                result = await runner(ctx)
            else:
                timeout_s = min(ctx.timeout_s, ctx.request.remaining_s())
                async with asyncio.timeout(timeout_s):
                    result = await runner(ctx)
        except TimeoutError:
            result = HandlerResult(Outcome.TIMEOUT, reason=f"timed out after {timeout_s:.3g}s")
        except Exception as exc:  # a broken handler must never break the dispatcher
            logger.exception(
                "handler raised",
                extra=_fields(ctx.request, ctx.hook_input, ctx.entry.handler_id, handler_type=handler.type),
            )
            result = HandlerResult(Outcome.ERROR, reason=f"{type(exc).__name__}: {exc}")
        result.duration_s = time.perf_counter() - started
        result.handler_type = handler.type
        result.handler_id = ctx.entry.handler_id
        result.fail_closed = handler.fail_mode == "closed"
        result.shadow = handler.shadow
        if span is not None:
            span.end(result)
        self.metrics.child(self.metrics.hook_duration, handler.type).observe(result.duration_s)
        if result.failed:
            self.metrics.hook_errors.labels(handler.type, result.outcome.value).inc()
            closed = " (failMode: closed, so it blocks)" if result.fail_closed else ""
            logger.info(
                "handler %s%s",
                result.outcome.value,
                closed,
                extra=_fields(
                    ctx.request, ctx.hook_input, ctx.entry.handler_id, handler_type=handler.type, reason=result.reason
                ),
            )
        if once_key is not None:
            # Only a successful run counts; a failing or blocking one may run again.
            with contextlib.suppress(BusUnavailable), redis_errors():
                if result.failed or result.outcome is Outcome.BLOCK:
                    await self.redis.delete(once_key)
                else:
                    await self.redis.set(once_key, b"done", ex=ONCE_TTL_S)
        return result

    async def _stop_guard(
        self, request: Request, hook_input: dict[str, Any], merged: MergedDecision, limit: int
    ) -> MergedDecision:
        """Past ``stopBlockLimit`` consecutive blocks per session, let the agent stop."""
        key = self.keys.stop_guard(request.tenant, str(hook_input.get("session_id")))
        try:
            with redis_errors():
                if merged.decision != Decision.BLOCK:
                    await self.redis.delete(key)
                    return merged
                if limit == 0:
                    return merged
                async with self.redis.pipeline(transaction=False) as pipe:  # one key: one node, in order
                    pipe.incr(key)
                    pipe.expire(key, STOP_GUARD_TTL_S)
                    count, _ = await pipe.execute()
                if int(count) <= limit:
                    return merged
                await self.redis.delete(key)
        except BusUnavailable:
            return merged
        self.metrics.stop_guard.labels(request.event).inc()
        logger.info(
            "stop guard: let the agent stop after %s blocks in a row",
            count,
            extra=_fields(request, hook_input, None, decision=Decision.NONE),
        )
        message = (
            f"hookbus: a hook blocked {request.event} {count} times in a row; overriding and letting the agent stop "
            f"(stopBlockLimit {limit}). Last reason: {merged.reason or 'none'}"
        )
        return MergedDecision(output={"systemMessage": message}, decision=Decision.NONE, reason=merged.reason)


def _read_call(hook_input: dict[str, Any]) -> tuple[Call | None, Files | None]:
    """:func:`read_call_files`, or ``(None, None)`` when it raises: then each handler reads the
    call itself and fails as it did alone."""
    try:
        return read_call_files(hook_input)
    except Exception:
        return None, None


def _fields(request: Request, hook_input: Mapping[str, Any], handler: str | None, **more: Any) -> dict[str, Any]:
    return event_fields(request.event_id, request.event, request.tenant, hook_input.get("session_id"), handler, **more)


__all__ = ["AsyncHandlers", "Engine", "Evaluation", "deciders", "selected"]
