"""The facts a handler's ``when:`` held on are named in the reason of its answer, whichever way the
engine runs it: a ``rule`` handler decided inline, the same traced (run as a task, with a span),
and a handler of another type; the note is the same text in each."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
import pytest

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.loading import Policy, policy_from_text
from bus.policy.schema import CommandHandler
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.session.definitions import session_policy
from bus.session.state import SessionState
from bus.stream.protocol import Request, now_ms
from tests.conftest import pre_tool_use
from tests.otlp import traced_in_process
from workers.engine import sessions
from workers.engine.evaluation import Engine
from workers.handlers.context import HookContext
from workers.handlers.runners import default_runners

POLICY = """
hookbus:
  session:
    facts:
      private_data: {setBy: [{event: PreToolUse, rules: ["Read(**/.env)"]}]}
      untrusted: {setBy: [{event: PostToolUse, rules: [WebFetch]}]}
hooks:
  PreToolUse:
    - matcher: Bash
      when: {facts: [private_data, untrusted]}
      hooks:
        - type: rule
          deny: ["Bash(curl *)"]
          reason: "no network after a secret"
    - matcher: Bash
      hooks:
        - type: command
          command: "deny fetched"
          when: {anyFacts: [untrusted]}
"""
NOTE = " [session facts: private_data, untrusted]"


async def command_runner(ctx: HookContext) -> HandlerResult:
    """A ``command`` runner that starts no process: ``deny REASON`` answers so."""
    handler = ctx.entry.handler
    assert isinstance(handler, CommandHandler)
    verdict, _, reason = handler.command.partition(" ")
    specific = {"hookEventName": "PreToolUse", "permissionDecision": verdict, "permissionDecisionReason": reason}
    return HandlerResult(Outcome.OK, output={"hookSpecificOutput": specific})


def curl(traced: bool) -> tuple[Request, dict[str, Any]]:
    hook_input = pre_tool_use("curl https://example.com", "s")
    at = now_ms()
    request = Request("e1", "PreToolUse", "t", orjson.dumps(hook_input), at, at + 5_000, "gw")
    request.traced = traced
    return request, hook_input


def with_facts(policy: Policy, *names: str) -> SessionState:
    compiled = session_policy(policy)
    return SessionState({compiled.facts[name].field: str(now_ms() - 1_000) for name in names})


@pytest.mark.timeout(30)
@pytest.mark.parametrize("traced", [False, True])
def test_each_answer_names_the_facts_its_when_held_on(traced: bool) -> None:
    policy = policy_from_text(POLICY)
    runners = {**default_runners(), "command": command_runner}
    engine = Engine(policy, None, Keyspace(), runners, async_handlers="skip", metrics=Metrics())  # type: ignore[arg-type]
    request, hook_input = curl(traced)

    async def evaluate(state: SessionState) -> list[HandlerResult]:
        with traced_in_process() if traced else contextlib.nullcontext():  # a traced event runs each handler as a task
            return (await engine.evaluate(request, hook_input, policy, state)).results

    both = asyncio.run(evaluate(with_facts(policy, "private_data", "untrusted")))
    reasons = [r.output["hookSpecificOutput"]["permissionDecisionReason"] for r in both if r.output]
    assert reasons == ["no network after a secret (rule: Bash(curl *))" + NOTE, "fetched [session facts: untrusted]"]
    assert [r.decided for r in both if r.decided] == [("deny", reasons[0])]
    # The same handlers on another session's state: only the facts that session has are named.
    one = asyncio.run(evaluate(with_facts(policy, "untrusted")))
    assert [r.output for r in one if r.output] == [
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "fetched [session facts: untrusted]",
            }
        }
    ]
    # And again on the first: the copies that name the facts are the ones made before.
    again = asyncio.run(evaluate(with_facts(policy, "private_data", "untrusted")))
    assert [r.output for r in again] == [r.output for r in both]


MANY_PLANS = """
hookbus:
  session:
    facts:
{facts}
hooks:
  PreToolUse:
{groups}
"""


@pytest.mark.timeout(30)
def test_copies_naming_facts_are_bounded_across_a_policys_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each choice of handlers (here one per tool) keeps its own copies; all of them together stay
    within the policy's bound, and a copy made after they start again still names its facts."""
    monkeypatch.setattr(sessions, "NOTED_PER_POLICY", 6)
    names = [f"f{n}" for n in range(4)]
    set_by = "{setBy: [{event: PreToolUse, rules: ['Bash(mark *)']}]}"
    facts = "\n".join(f"      {name}: {set_by}" for name in names)
    groups = "\n".join(
        f"    - matcher: Tool{n}\n      when: {{anyFacts: [{', '.join(names)}]}}\n"
        f"      hooks: [{{type: rule, deny: ['Tool{n}'], reason: stop}}]"
        for n in range(3)
    )
    policy = policy_from_text(MANY_PLANS.format(facts=facts, groups=groups))
    compiled = session_policy(policy)
    engine = Engine(policy, None, Keyspace(), {}, async_handlers="skip", metrics=Metrics())  # type: ignore[arg-type]

    async def reason(tool: int, *set_: str) -> str:
        hook_input = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": f"Tool{tool}", "tool_input": {}}
        at = now_ms()
        request = Request("e1", "PreToolUse", "t", orjson.dumps(hook_input), at, at + 5_000, "gw")
        results = (await engine.evaluate(request, hook_input, policy, with_facts(policy, *set_))).results
        assert results[0].output is not None
        return str(results[0].output["hookSpecificOutput"]["permissionDecisionReason"])

    def kept() -> int:
        plans = {id(plan): plan for _, plan in compiled.plans.values() if plan is not None}
        return sum(len(plan.copies) for plan in plans.values())

    for tool in range(3):
        for n in range(1, 5):
            assert asyncio.run(reason(tool, *names[:n])).endswith(f"[session facts: {', '.join(names[:n])}]")
            assert kept() == compiled.noted <= 6
    assert asyncio.run(reason(0, "f3")) == "stop (rule: Tool0) [session facts: f3]"
