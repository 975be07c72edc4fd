"""The built-in ``tokens`` counter (:mod:`bus.session.usage`): counted from what an agent's hook
input carries (Gemini CLI's last ``AfterModel`` chunk, Claude Code's subagent ``PostToolUse``),
nothing from any other event; read by ``when:`` and budgets like the other built-ins."""

from __future__ import annotations

from typing import Any

import pytest

from bus.dialects import dialect_for
from bus.policy.loading import policy_from_text
from bus.policy.sessionschema import When
from bus.session.apply import apply_ops
from bus.session.definitions import SessionPolicy, session_policy
from bus.session.effects import effects, verdicts
from bus.session.state import SessionState, SessionView
from bus.session.usage import tokens_spent

POLICY = """
hookbus:
  session:
    budgets:
      spend: {counter: tokens, limit: 1000, reason: "token budget"}
hooks:
  PreToolUse:
    - matcher: Bash
      when: {counters: {tokens: {gte: 500}}}
      hooks: [{type: rule, deny: [Bash]}]
"""


def gemini_after_model(total: int, finish: str | None) -> dict[str, Any]:
    """An ``AfterModel`` input as Gemini CLI sends it, through its dialect."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": ["hi"]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    raw = {
        "session_id": "s",
        "hook_event_name": "AfterModel",
        "cwd": "/w",
        "timestamp": "2026-01-01T00:00:00Z",
        "llm_request": {"model": "gemini-2.5-pro", "messages": []},
        "llm_response": {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": total - 10, "candidatesTokenCount": 10, "totalTokenCount": total},
        },
    }
    return dialect_for("gemini").to_canonical(raw)


def claude_subagent(total: Any, tool: str = "Agent") -> dict[str, Any]:
    response = {"status": "completed", "agentId": "a1", "content": [], "totalTokens": total, "usage": {}}
    return {"session_id": "s", "tool_name": tool, "tool_input": {"prompt": "x"}, "tool_response": response}


@pytest.fixture(scope="module")
def session() -> SessionPolicy:
    return session_policy(policy_from_text(POLICY))


def test_what_each_agent_carries_is_counted_and_nothing_else() -> None:
    chunk = gemini_after_model(300, None)
    last = gemini_after_model(420, "STOP")
    assert chunk["hook_event_name"] == "AfterModel"
    assert tokens_spent("AfterModel", chunk) == 0  # a chunk before the last: the call is counted once
    assert tokens_spent("AfterModel", last) == 420
    assert tokens_spent("PostToolUse", claude_subagent(5120)) == 5120
    assert tokens_spent("PostToolUse", claude_subagent(5120, tool="Task")) == 5120
    assert tokens_spent("PostToolUse", claude_subagent(5120, tool="mcp__x__y")) == 0  # not a subagent's
    for junk in (True, -3, 1.5, "100", None):
        assert tokens_spent("PostToolUse", claude_subagent(junk)) == 0
    qwen_stop = {"session_id": "s", "input_tokens": 9000, "context_usage": 0.1, "context_limit": 90000}
    assert tokens_spent("Stop", qwen_stop) == 0  # the context's size, not what was spent
    resume = {"session_id": "s", "source": "resume", "context_tokens": 80000, "estimated_cache_write_usd": 0.3}
    assert tokens_spent("SessionStart", resume) == 0


def test_tokens_add_up_and_feed_when_and_budgets(session: SessionPolicy) -> None:
    state = SessionState()
    steps = [
        ("AfterModel", gemini_after_model(300, None)),
        ("AfterModel", gemini_after_model(420, "STOP")),
        ("PostToolUse", claude_subagent(200)),
    ]
    for at, (event, hook_input) in enumerate(steps, 1):
        state = apply_ops(state, effects(session, event, hook_input, "none"), at)
    view = SessionView(session, state, 10)
    assert view.counter("tokens") == 620
    assert view.holds(When.model_validate({"counters": {"tokens": {"gte": 500}}}))
    ls = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert verdicts(view, "PreToolUse", session.matched("PreToolUse", ls)) == []  # 620 of 1000: not yet
    assert view.budgets_left() == {"spend": 380}
    state = apply_ops(state, effects(session, "PostToolUse", claude_subagent(380), "none"), 11)
    view = SessionView(session, state, 12)
    (over,) = verdicts(view, "PreToolUse", session.matched("PreToolUse", ls))
    assert over.decided == ("deny", "token budget (tokens: 1000 of 1000)")
    assert view.budgets_left() == {"spend": 0}


def test_a_policy_check_knows_the_built_in() -> None:
    text = "hookbus:\n  session:\n    budgets:\n      b: {counter: tokens, limit: 5}\nhooks: {}\n"
    assert session_policy(policy_from_text(text)).budgets["b"].counter == "tokens"


def test_an_absurd_count_is_none_so_the_settle_never_overflows() -> None:
    assert tokens_spent("PostToolUse", claude_subagent(10**30)) == 0
    assert tokens_spent("PostToolUse", claude_subagent(10**12 - 1)) == 10**12 - 1
