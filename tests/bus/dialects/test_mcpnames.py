"""MCP tool names that do not say where the server's name ends are split as the policy names its servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.dialects import dialect_for
from bus.dialects.copilot import canonical_tools
from bus.dialects.gemini import canonical_tool_name
from bus.dialects.mcpnames import (
    MAX_READINGS,
    TOOL_NAME_READINGS,
    claude_mcp_name,
    mcp_names,
    naming_servers,
    policy_servers,
    tool_name_readings,
)
from bus.policy.agents import mcp_servers
from bus.policy.loading import policy_from_text
from bus.redis.keys import Keyspace
from bus.stream.protocol import Request
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners

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
        assert canonical_tools(copilot)[0][0] == claude and canonical_tools(copilot)[1] == copilot


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


# -- every reading of an ambiguous name ----------------------------------------------------------

AMBIGUOUS = """
hookbus: {deadlineSeconds: 5.0}
hooks:
  PreToolUse:
    - matcher: "mcp__my__.*"
      hooks:
        - {type: rule, deny: ["mcp__my"], reason: "the my server"}
    - matcher: "mcp__.*"
      hooks:
        - type: rule
          deny: ["mcp__fs__delete-file"]
          allow: ["mcp__my_db", "mcp__fs-delete", "mcp__ctx"]
"""


def judged(dialect: str, hook_input: dict[str, Any], text: str = AMBIGUOUS) -> tuple[str, str | None]:
    policy = policy_from_text(text)
    with naming_servers(mcp_servers(policy)):
        canonical = dialect_for(dialect).to_canonical(hook_input)
    engine = Engine(policy, None, Keyspace(), default_runners(), async_handlers="skip")  # type: ignore[arg-type]
    payload = orjson.dumps(canonical)
    request = Request(event_id="e", event="PreToolUse", tenant="t", payload=payload, received_ms=0)
    merged = asyncio.run(engine.evaluate(request, canonical, policy)).merged
    return str(merged.decision), merged.reason


def gemini_call(name: str, **more: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "BeforeTool",
        "session_id": "s",
        "cwd": "/w",
        "tool_name": name,
        "tool_input": {},
        **more,
    }


def copilot_call(name: str) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": "s", "cwd": "/w", "tool_name": name, "tool_input": {}}


def test_every_split_after_a_named_server_is_a_reading() -> None:
    with naming_servers(frozenset({"my", "my_db", "other"})):
        assert mcp_names("my_db_drop_table", "_", "first") == ("mcp__my_db__drop_table", "mcp__my__db_drop_table")
        assert mcp_names("your_db_x", "_", "first") == ("mcp__your__db_x",)
    with naming_servers(frozenset({"fs", "fs-delete"})):
        assert mcp_names("fs-delete-file", "-", "last") == ("mcp__fs-delete__file", "mcp__fs__delete-file")
    assert mcp_names("nodash", "-", "last") == ()


def test_a_deny_on_any_reading_holds_whichever_server_is_longest() -> None:
    # my_db is named too (in an allow): the longest split alone would leave mcp__my's deny behind.
    assert judged("gemini", gemini_call("mcp_my_db_drop_table")) == ("deny", "the my server (rule: mcp__my)")
    # Copilot's fs-delete-file: server fs-delete (allowed) or fs, whose tool delete-file is denied.
    decision, reason = judged("copilot", copilot_call("fs-delete-file"))
    assert decision == "deny" and "mcp__fs__delete-file" in str(reason)


def test_an_allow_needs_every_reading() -> None:
    # my_db_query: server my_db (allowed) or my (denied): denied; a name only one server can begin: allowed.
    assert judged("gemini", gemini_call("mcp_my_db_query"))[0] == "deny"
    assert judged("gemini", gemini_call("mcp_ctx_lookup"))[0] == "allow"
    # The agent says where the server's name ends: one reading, and the allow holds.
    context = {"server_name": "my_db", "tool_name": "query"}
    assert judged("gemini", gemini_call("mcp_my_db_query", mcp_context=context))[0] == "allow"
    lone = AMBIGUOUS.replace('deny: ["mcp__my"]', 'deny: ["mcp__nothing"]')
    # Without the deny: the allow of my_db still does not hold, as the server may be my.
    assert judged("gemini", gemini_call("mcp_my_db_query"), lone)[0] == "none"


def test_readings_are_kept_for_the_log_and_bounded_when_read() -> None:
    with naming_servers(frozenset({"my", "my_db"})):
        out = dialect_for("gemini").to_canonical(gemini_call("mcp_my_db_drop"))
    assert out["tool_name"] == "mcp__my_db__drop"
    assert out[TOOL_NAME_READINGS] == ["mcp__my_db__drop", "mcp__my__db_drop"]
    assert tool_name_readings(out) == ("mcp__my__db_drop",)
    many = {"tool_name": "mcp__a__b", TOOL_NAME_READINGS: [f"mcp__a{i}__b" for i in range(100)] + [3, "Bash"]}
    assert tool_name_readings(many) == tuple(f"mcp__a{i}__b" for i in range(MAX_READINGS))  # the first ones only
    assert tool_name_readings({"tool_name": "Bash", TOOL_NAME_READINGS: ["mcp__x__y"]}) == ()


def test_opencode_underscored_names_are_read_every_way_too() -> None:
    body = {"event": "tool.execute.before", "sessionID": "s", "directory": "/w", "tool": "my_db_drop_table", "args": {}}
    assert judged("opencode", body) == ("deny", "the my server (rule: mcp__my)")
    assert judged("opencode", {**body, "tool": "ctx_lookup"})[0] == "allow"
    # A server with an underscore: its first-underscore split alone named another server.
    text = AMBIGUOUS.replace('deny: ["mcp__my"]', 'deny: ["mcp__my_db"]')
    assert judged("opencode", body, text) == ("deny", "the my server (rule: mcp__my_db)")
