"""Logged inputs judged again as live: the policy's limits, the split budget, a report's time budget."""

from __future__ import annotations

from typing import Any

import orjson

from bus.policy.loading import policy_from_text
from bus.policy.rulelists import evaluate_rules
from bus.policy.schema import RuleHandler
from bus.stream.protocol import LogRecord
from hookbus.replay.judging import UNJUDGED_EXAMPLES, Budget, Unjudged, judge_logged
from tests.conftest import pre_tool_use

POLICY = policy_from_text(
    """
hookbus:
  limits: {commandBytes: 1024, nestingDepth: 16}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(rm -rf *)"], allow: ["Bash(echo *)"]}
"""
)


def rule_handler() -> RuleHandler:
    handler = POLICY.entries("PreToolUse")[0].handler
    assert isinstance(handler, RuleHandler)
    return handler


RULES = rule_handler()


def logged(payload: Any) -> LogRecord:
    return LogRecord(
        event_id="ev-1",
        event="PreToolUse",
        tenant="acme",
        session_id="s",
        tool_name="Bash",
        outcome="decided",
        decision="none",
        output={},
        payload=payload if isinstance(payload, bytes) else orjson.dumps(payload),
        received_ms=0,
        decided_ms=0,
    )


async def test_a_command_over_the_policys_limit_meets_the_deny_rules_and_never_an_allow() -> None:
    judged = await judge_logged(logged(pre_tool_use("echo " + "x" * 2000)), POLICY.settings)
    assert judged is not None and judged.evaluable
    assert judged.unjudged is not None and "over the limit of 1024 (hookbus.limits.commandBytes)" in judged.unjudged
    with judged.judged():
        assert evaluate_rules(RULES, judged.hook_input) == ("deny", "Bash(rm -rf *)")
    # The same input within the limit is judged on what it says.
    small = await judge_logged(logged(pre_tool_use("echo hi")), POLICY.settings)
    assert small is not None and small.unjudged is None
    with small.judged():
        assert evaluate_rules(RULES, small.hook_input) == ("allow", "Bash(echo *)")


async def test_an_input_nested_past_the_limit_is_not_evaluated_and_one_not_an_object_is_none() -> None:
    deep: Any = "x"
    for _ in range(20):
        deep = [deep]
    judged = await judge_logged(logged({**pre_tool_use("rm -rf /"), "extra": deep}), POLICY.settings)
    assert judged is not None and not judged.evaluable and judged.hook_input == {}
    assert judged.unjudged is not None and "over the limit of 16 (hookbus.limits.nestingDepth)" in judged.unjudged
    assert await judge_logged(logged([1, 2]), POLICY.settings) is None
    assert await judge_logged(logged(b"{not json"), POLICY.settings) is None


def test_a_budget_runs_out_and_none_never_does() -> None:
    assert Budget.start(0.0).spent()
    assert not Budget.start(None).spent() and not Budget.start(3600.0).spent()
    assert "budget of 2.5 s ran out after 7 records" in Budget.start(2.5).stopped(7)


def test_every_unjudged_record_is_counted_and_the_first_few_listed() -> None:
    tally = Unjudged()
    for i in range(UNJUDGED_EXAMPLES + 5):
        tally.add(f"{i}-0", logged({}), f"reason {i}")
    assert tally.to_json()["events"] == UNJUDGED_EXAMPLES + 5
    assert [e["reason"] for e in tally.examples] == [f"reason {i}" for i in range(UNJUDGED_EXAMPLES)]
