"""A handler limited to agents (``agents: [...]``) runs only for their events, through the full path.

Events are posted as real HTTP to a live gateway, in Claude Code's own format or with
``?dialect=codex`` (Codex CLI's input is Claude Code's shape); an in-process dispatcher
evaluates them. What ran is read from the decision log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from bus.stream.protocol import LogRecord
from tests.conftest import BusProbe, Platform, logged, policy_yaml, pre_tool_use

CODEX = {"dialect": "codex"}

HOOKS = {
    "PreToolUse": [
        {
            "matcher": "Bash",
            "hooks": [
                {"type": "rule", "deny": ["Bash(rm *)"], "reason": "codex may not rm", "agents": ["codex"]},
                {"type": "rule", "deny": ["Bash(curl *)"], "reason": "claude may not curl", "agents": ["claude"]},
                {"type": "rule", "deny": ["Bash(git push --force *)"], "reason": "nobody force-pushes"},
            ],
        }
    ]
}


def answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def ran(p: Platform, record: LogRecord) -> list[str]:
    """The handlers that ran on a recorded event, each by its ``agents`` (``*`` for every agent)."""
    agents = {e.handler_id: ",".join(e.handler.agents or ["*"]) for e in p.policy.entries("PreToolUse")}
    return [agents[hook["id"]] for hook in record.hooks]


async def test_a_handler_limited_to_codex_runs_for_codex_events_only(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(policy_yaml(HOOKS)) as p:
        from_claude = await p.post(pre_tool_use("rm -r build", "s-claude"))
        from_codex = await p.post(pre_tool_use("rm -r build", "s-codex"), params=CODEX)
        assert answer(from_claude) == {}
        assert "codex may not rm" in str(answer(from_codex))
        claude_record, codex_record = await logged(bus, from_claude), await logged(bus, from_codex)
        assert ran(p, claude_record) == ["claude", "*"]
        assert ran(p, codex_record) == ["codex", "*"]
    assert (claude_record.agent, claude_record.decision) == ("claude", "none")
    assert (codex_record.agent, codex_record.decision, codex_record.tool_name) == ("codex", "deny", "Bash")
    assert "codex may not rm" in codex_record.reason


async def test_a_handler_limited_to_claude_does_not_run_for_codex(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(policy_yaml(HOOKS)) as p:
        from_claude = await p.post(pre_tool_use("curl https://example.com", "s-claude"))
        from_codex = await p.post(pre_tool_use("curl https://example.com", "s-codex"), params=CODEX)
        assert "claude may not curl" in str(answer(from_claude))
        assert answer(from_codex) == {}
        assert (await logged(bus, from_claude)).decision == "deny"
        assert (await logged(bus, from_codex)).decision == "none"


async def test_a_handler_without_agents_runs_for_every_agent(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(policy_yaml(HOOKS)) as p:
        for params, limited in (({}, "claude"), (CODEX, "codex"), ({"dialect": "sdk"}, None)):
            response = await p.post(pre_tool_use("git push --force origin main"), params=params)
            assert "nobody force-pushes" in str(answer(response)), params
            record = await logged(bus, response)
            assert (record.agent, record.decision) == (limited or "sdk", "deny")
            assert ran(p, record) == ([limited] if limited else []) + ["*"]


async def test_an_event_whose_handlers_are_all_for_other_agents_is_recorded_without_waiting(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    only_codex = {
        "PreToolUse": [{"hooks": [{"type": "rule", "deny": ["Bash(rm *)"], "reason": "no", "agents": ["codex"]}]}]
    }
    async with platform(policy_yaml(only_codex)) as p:
        from_claude = await p.post(pre_tool_use("rm -r build", "s-claude"))
        from_codex = await p.post(pre_tool_use("rm -r build", "s-codex"), params=CODEX)
        assert (from_claude.headers["x-hookbus-outcome"], answer(from_claude)) == ("recorded", {})
        assert from_codex.headers["x-hookbus-outcome"] == "decided" and "no" in str(answer(from_codex))
        assert (await logged(bus, from_claude)).outcome == "recorded"
