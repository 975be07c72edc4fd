"""Running policy test cases in this process, with the dispatcher's own engine.

Each case is one event through :class:`workers.engine.evaluation.Engine`, as a dispatcher
would evaluate it, with what a policy replay runs (:func:`hookbus.replay.run.build_runners`):
``rule`` and ``function`` handlers (and plugins) run; ``command``, ``http``, ``prompt``,
``agent`` and ``mcp_tool`` handlers count as no opinion unless the case stubs their answer or
``--run-handlers`` runs them (commands in the replay's sandbox). ``async`` handlers never
decide and are left out. There is no Redis: each case gets a fresh
:class:`hookbus.policytools.state.SessionState` seeded with the case's session, so nothing a
case does is seen by another, or by anything outside.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any, cast

import orjson
import redis.asyncio as aioredis

from bus.hooks.events import event_spec
from bus.hooks.output import result_from_exit
from bus.hooks.results import HandlerResult
from bus.policy.loading import HandlerEntry, Policy
from bus.policy.schema import AgentHandler, CommandHandler, FunctionHandler, HttpHandler, McpToolHandler, PromptHandler
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from bus.session.apply import apply_ops
from bus.session.state import SessionState as SessionFacts
from bus.stream.protocol import Request, now_ms
from hookbus.policytools.cases import Case, LoadedCase, Stub
from hookbus.policytools.state import SessionState
from hookbus.replay.report import reason_of
from hookbus.replay.run import build_runners, describe
from workers.engine.evaluation import Engine
from workers.handlers.context import HookContext, Runner
from workers.services import Services

#: A handler id given by its start needs at least this many characters (the reports show 8).
MIN_ID_PREFIX = 8


@dataclasses.dataclass
class CaseResult:
    """What one case got back, and how that compares with what it expects."""

    name: str
    source: str
    line: int | None
    decision: str = "none"
    reason: str = ""
    output: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The handlers that made the decision, for people (``rule Bash(rm -rf *) [1a2b3c4d]``).
    decided_by: list[str] = dataclasses.field(default_factory=list)
    #: Handlers selected but not run (no stub, no ``--run-handlers``): they counted as no opinion.
    not_run: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)
    #: Set when the case could not run as written (a stub naming no handler).
    error: str = ""
    #: The session's facts once the event is decided (``hookbus.session``).
    facts: list[str] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures and not self.error

    @property
    def where(self) -> str:
        return self.source if self.line is None else f"{self.source}:{self.line}"


def handler_labels(entry: HandlerEntry) -> set[str]:
    """The names a test file may give ``entry`` by (besides its id)."""
    handler = entry.handler
    labels: set[str] = set()
    if isinstance(handler, CommandHandler):
        labels.add(handler.command)
    elif isinstance(handler, HttpHandler) and handler.url:
        labels.add(handler.url)
    elif isinstance(handler, FunctionHandler):
        labels.add(handler.function)
    elif isinstance(handler, McpToolHandler):
        labels.add(f"{handler.server}/{handler.tool}")
    elif isinstance(handler, PromptHandler | AgentHandler):
        labels.add(handler.prompt)
    if handler.status_message:
        labels.add(handler.status_message)
    return labels


def find_handlers(policy: Policy, name: str, event: str | None = None) -> list[HandlerEntry]:
    """The handlers of ``policy`` (of ``event``, if given) that ``name`` names: by id (or its
    start), by command, url, function, ``server/tool`` or prompt, or else by a part of one."""
    events = [event] if event is not None else sorted(policy.events())
    entries = [entry for each in events for entry in policy.entries(each)]
    exact = [
        e
        for e in entries
        if (len(name) >= MIN_ID_PREFIX and e.handler_id.startswith(name)) or name in handler_labels(e)
    ]
    return exact or [e for e in entries if any(name in label for label in handler_labels(e))]


def _stubbed(inner: Runner, stubs: Mapping[str, Stub]) -> Runner:
    async def run(ctx: HookContext) -> HandlerResult:
        stub = stubs.get(ctx.entry.handler_id)
        if stub is None:
            return await inner(ctx)
        return result_from_exit(ctx.event, stub.exit_code, stub.stdout_text(), stub.stderr)

    return run


def updated_input(output: Mapping[str, Any]) -> dict[str, Any] | None:
    specific = output.get("hookSpecificOutput")
    found = specific.get("updatedInput") if isinstance(specific, dict) else None
    return found if isinstance(found, dict) else None


def added_context(output: Mapping[str, Any]) -> str:
    specific = output.get("hookSpecificOutput")
    found = specific.get("additionalContext") if isinstance(specific, dict) else None
    return found if isinstance(found, str) else ""


def _short(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= 200 else text[:197] + "..."


class CaseRunner:
    """Runs the cases of one policy."""

    def __init__(self, policy: Policy, *, run_handlers: bool, sandbox: str) -> None:
        self.policy = policy
        self.runners = build_runners(run_handlers=run_handlers, sandbox=sandbox, trusted_modules=None)
        self.keys = Keyspace()

    async def _history(self, engine: Engine, case: Case, request: Request) -> SessionFacts:
        """The session's state after the case's ``history``, each event decided by the policy in turn."""
        state = SessionFacts()
        for prior in case.history:
            hook_input = case.prior_input(prior)
            blocking = event_spec(prior.event).blocking
            earlier = dataclasses.replace(
                request,
                event_id=uuid.uuid4().hex,
                event=prior.event,
                payload=orjson.dumps(hook_input),
                parsed=hook_input,
                deadline_ms=request.received_ms + 60_000 if blocking else 0,
                reply_to="policy-test" if blocking else "",
            )
            evaluation = await engine.evaluate(earlier, hook_input, session=state)
            if evaluation.session is not None:
                state = apply_ops(state, evaluation.session.ops, now_ms())
        return state

    async def run(self, loaded: LoadedCase) -> CaseResult:
        """Evaluate one case and compare the answer with what it expects."""
        case = loaded.case
        result = CaseResult(case.name, loaded.source, loaded.line)
        started = time.perf_counter()
        try:
            await self._run(loaded, result)
        finally:
            result.duration_s = time.perf_counter() - started
        return result

    async def _run(self, loaded: LoadedCase, result: CaseResult) -> None:
        case = loaded.case
        try:
            hook_input, dialect, event = case.canonical_input()
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a dialect refusing the agent's input
            result.error = f"hookInput is not a {case.agent} hook input: {type(exc).__name__}: {exc}"
            return
        stubs: dict[str, Stub] = {}
        for stub in case.stubs:
            entries = find_handlers(self.policy, stub.handler, event)
            if not entries:
                result.error = f"stub {stub.handler!r}: no handler of {event} in the policy is {stub.handler!r}"
                return
            stubs.update(dict.fromkeys((e.handler_id for e in entries), stub))
        session_id = str(hook_input.get("session_id"))
        state = SessionState()
        if case.session.stop_blocks:
            await state.set(self.keys.stop_guard(case.tenant, session_id), case.session.stop_blocks)
        for name in case.session.once_fired:
            entries = find_handlers(self.policy, name)
            if not entries:
                result.error = f"onceFired {name!r}: no handler in the policy is {name!r}"
                return
            for entry in entries:
                await state.set(self.keys.once(case.tenant, session_id, entry.handler_id), b"done")
        runners = {kind: _stubbed(runner, stubs) for kind, runner in self.runners.items()}
        services = Services(Settings())
        engine = Engine(
            self.policy, cast(aioredis.Redis, state), self.keys, runners, async_handlers="skip", services=services
        )
        blocking = event_spec(event).blocking
        received_ms = now_ms()
        request = Request(
            uuid.uuid4().hex,
            event,
            case.tenant,
            orjson.dumps(hook_input),
            received_ms,
            deadline_ms=received_ms + int(self.policy.settings.deadline_for(event) * 1000) if blocking else 0,
            reply_to="policy-test" if blocking else "",
            dialect=dialect,
            context=b"[]",  # no pending context from async hooks: there is no session to take it from
        )
        try:
            facts = await self._history(engine, case, request)
            evaluation = await engine.evaluate(request, hook_input, session=facts)
        finally:
            await services.aclose()
        if evaluation.session is not None:
            result.facts = evaluation.session.facts
        merged = evaluation.merged
        result.decision = str(merged.decision)
        result.reason = merged.reason or reason_of(merged.output)
        result.output = merged.output
        by_id = {r.handler_id: r for r in evaluation.results}
        result.decided_by = [describe(self.policy, by_id[h], hook_input) for h in evaluation.decided_by if h in by_id]
        result.not_run = [
            describe(self.policy, r, hook_input)
            for r in evaluation.results
            if r.reason and r.reason.startswith("not replayed") and r.handler_id not in stubs
        ]
        result.failures = compare(loaded, result)


def compare(loaded: LoadedCase, result: CaseResult) -> list[str]:
    """What differs from what the case expects, one sentence each."""
    expect, failures = loaded.case.expect, []
    if expect.decision is not None and expect.decision != result.decision:
        failures.append(f"expected decision {expect.decision}, got {result.decision}")
    if expect.reason is not None:
        texts = [result.reason, *_reasons(result.output)]
        if not any(expect.reason in text for text in texts):
            got = f"{result.reason!r}" if result.reason else "no reason"
            failures.append(f"expected a reason containing {expect.reason!r}, got {got}")
    if expect.updated_input is not None:
        got_input = updated_input(result.output)
        if got_input != expect.updated_input:
            got = "no updatedInput" if got_input is None else _short(got_input)
            failures.append(f"expected updatedInput {_short(expect.updated_input)}, got {got}")
    if expect.facts is not None and sorted(expect.facts) != sorted(result.facts):
        failures.append(f"expected session facts {sorted(expect.facts)}, got {sorted(result.facts)}")
    if expect.context is not None:
        context = added_context(result.output)
        if expect.context not in context:
            got = f"{context[:200]!r}" if context else "no added context"
            failures.append(f"expected added context containing {expect.context!r}, got {got}")
    return failures


def _reasons(output: Mapping[str, Any]) -> list[str]:
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision = specific.get("decision")
    values = [
        specific.get("permissionDecisionReason"),
        decision.get("message") if isinstance(decision, dict) else None,
        output.get("reason"),
        output.get("stopReason"),
        output.get("systemMessage"),
    ]
    return [value for value in values if isinstance(value, str)]


__all__ = ["CaseResult", "CaseRunner", "added_context", "compare", "find_handlers", "handler_labels", "updated_input"]
