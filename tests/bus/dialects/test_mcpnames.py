"""MCP tool names that do not say where the server's name ends are split as the policy names its servers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bus.dialects.copilot import canonical_tool
from bus.dialects.gemini import canonical_tool_name
from bus.dialects.mcpnames import claude_mcp_name, naming_servers, policy_servers
from bus.policy.agents import mcp_servers
from bus.policy.loading import policy_from_text

POLICY = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: "mcp__my_server__.*|mcp__(context7|docs-site)__.*"
      hooks:
        - type: rule
          deny: ["mcp__my_server__delete_repo", "mcp__context7", "mcp__docs-site__publish-page"]
          reason: "central rule"
    - matcher: Bash
      hooks:
        - {type: rule, if: "mcp__ignored_in_if__x", deny: ["Bash(rm -rf *)"]}
"""


def test_the_servers_a_policy_names_are_read_from_matchers_conditions_and_rules() -> None:
    assert policy_servers(["mcp__a_b__*", "mcp__c", "mcp__(d|e-f)__.*", "mcp__(?:g|h)__x", "Bash(ls)", "mcp__.*"]) == {
        "a_b",
        "c",
        "d",
        "e-f",
        "g",
        "h",
    }
    assert mcp_servers(policy_from_text(POLICY)) == {"my_server", "context7", "docs-site", "ignored_in_if"}


def test_the_longest_server_named_wins_else_the_dialects_own_reading() -> None:
    assert claude_mcp_name("my_server_delete_repo", "_", "first") == "mcp__my__server_delete_repo"
    assert claude_mcp_name("a-b-c", "-", "last") == "mcp__a-b__c"
    with naming_servers(frozenset({"my", "my_server", "a"})):
        assert claude_mcp_name("my_server_delete_repo", "_", "first") == "mcp__my_server__delete_repo"
        assert claude_mcp_name("my_other_tool", "_", "first") == "mcp__my__other_tool"
        assert claude_mcp_name("a-b-c", "-", "last") == "mcp__a__b-c"
        assert claude_mcp_name("my_server_", "_", "first") == "mcp__my__server_"  # no tool after the server named
    assert claude_mcp_name("nodash", "-", "last") is None and claude_mcp_name("-x", "-", "last") is None


@pytest.mark.parametrize(
    ("gemini", "claude"),
    [
        ("mcp_my_server_delete_repo", "mcp__my_server__delete_repo"),  # the server has an underscore
        ("mcp_github_delete_repo", "mcp__github__delete_repo"),  # a server the policy does not name
        ("my_server__delete_repo", "mcp__my_server__delete_repo"),  # older Gemini CLIs
        ("mcp__my_server__delete_repo", "mcp__my_server__delete_repo"),
        ("run_shell_command", "Bash"),
    ],
)
def test_gemini_names_without_mcp_context(gemini: str, claude: str) -> None:
    with naming_servers(mcp_servers(policy_from_text(POLICY))):
        assert canonical_tool_name(gemini) == claude


@pytest.mark.parametrize(
    ("copilot", "claude"),
    [
        ("context7-resolve-library-id", "mcp__context7__resolve-library-id"),  # the tool has dashes
        ("docs-site-publish-page", "mcp__docs-site__publish-page"),  # both have
        ("github-mcp-server-get_issue", "mcp__github-mcp-server__get_issue"),  # a server the policy does not name
        ("bash", "Bash"),
    ],
)
def test_copilot_dashed_names(copilot: str, claude: str) -> None:
    with naming_servers(mcp_servers(policy_from_text(POLICY))):
        assert canonical_tool(copilot) == (claude, copilot)


async def test_deny_rules_for_those_servers_hit_through_a_live_gateway(platform: Callable[..., Any]) -> None:
    gemini = {
        "hook_event_name": "BeforeTool",
        "session_id": "s-gemini",
        "cwd": "/work",
        "tool_name": "mcp_my_server_delete_repo",  # no mcp_context
        "tool_input": {"repo": "acme/prod"},
    }
    copilot = {
        "hook_event_name": "PreToolUse",
        "session_id": "s-copilot",
        "cwd": "/work",
        "tool_name": "context7-resolve-library-id",
        "tool_input": {"libraryName": "x"},
    }
    publish = {**copilot, "tool_name": "docs-site-publish-page"}
    other = {**copilot, "tool_name": "docs-site-read-page"}
    async with platform(POLICY) as p:
        by_gemini = await p.post(gemini, headers={"X-Hookbus-Dialect": "gemini"})
        by_copilot = [await p.post(body, headers={"X-Hookbus-Dialect": "copilot"}) for body in (copilot, publish)]
        allowed = await p.post(other, headers={"X-Hookbus-Dialect": "copilot"})
    assert by_gemini.json()["decision"] == "deny" and "central rule" in by_gemini.json()["reason"]
    for response in by_copilot:
        assert response.json()["permissionDecision"] == "deny", response.text
    assert allowed.json() == {}
