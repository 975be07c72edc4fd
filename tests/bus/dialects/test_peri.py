"""Peri's dialect: both directions as units, then Peri-shaped traffic live.

``peri_reads`` below restates how Peri's ``output_parser.rs`` turns a reply into an action
(``SyncHookResponse`` with serde: ``decision`` only ``approve``/``block``, a snake_case
``hook_specific_output`` tagged by ``hookEventName`` with three variants, unknown fields
ignored; then continue=false > decision=block > PreToolUse combination > systemMessage >
specific output). Replies are checked through it, as Peri would read them.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.dialects import DIALECTS, from_dialect, to_dialect
from bus.dialects.peri import claude_mode, peri_input, peri_output
from tests.conftest import BusProbe, async_wait_for

PERI_SPECIFIC = {
    "PreToolUse": {"permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"},
    "UserPromptSubmit": {"additionalContext"},
    "SessionStart": {"additionalContext", "initialUserMessage", "watchPaths"},
}


def peri_reads(event: str, reply: dict[str, Any]) -> tuple[str, Any]:
    """The HookAction Peri makes of ``reply`` on ``event`` (as output_parser.rs reads it)."""
    if reply.get("decision") not in (None, "approve", "block"):
        return "block", "invalid: unknown decision"  # serde fails -> invalid_output -> Block
    specific = reply.get("hook_specific_output")
    if specific is not None:
        tag = specific.get("hookEventName")
        if tag not in PERI_SPECIFIC or tag != event:
            return "block", "invalid: output event mismatch"
    if reply.get("continue") is False:
        return "prevent", reply.get("stopReason")
    if reply.get("decision") == "block":
        return "block", reply.get("reason", "Blocked by hook")
    if (
        specific
        and event == "PreToolUse"
        and (specific.get("permissionDecision") or specific.get("additionalContext") or reply.get("systemMessage"))
    ):
        return "permission", specific.get("permissionDecision", "passthrough")
    if reply.get("systemMessage"):
        return "system_message", reply["systemMessage"]
    if specific and specific.get("updatedInput") is not None:
        return "modify", specific["updatedInput"]
    if specific and specific.get("additionalContext"):
        return "context", specific["additionalContext"]
    return "allow", None


def peri_event(event: str, **fields: Any) -> dict[str, Any]:
    """A hook input as Peri's HookInput serialises it."""
    return {
        "session_id": f"peri-{event}",
        "transcript_path": "/home/u/.peri/t.json",
        "cwd": "/work",
        "hook_event_name": event,
        **fields,
    }


# -- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peri", "claude"),
    [
        ("yolo", "bypassPermissions"),
        ("YOLO", "bypassPermissions"),
        ("BypassPermissions", "bypassPermissions"),
        ("bypass", "bypassPermissions"),
        ("hitl", "default"),
        ("Default", "default"),
        ("ask", "default"),
        ("AutoMode", "auto"),
        ("auto", "auto"),
        ("AcceptEdits", "acceptEdits"),
        ("auto-edit", "acceptEdits"),
        ("DontAsk", "dontAsk"),
        ("no_ask", "dontAsk"),
        ("plan", "plan"),
        ("something-new", "default"),
    ],
)
def test_permission_modes_map_to_the_nearest_claude_mode(peri: str, claude: str) -> None:
    assert claude_mode(peri) == claude
    translated = peri_input(peri_event("PreToolUse", permission_mode=peri))
    assert translated["permission_mode"] == claude
    assert translated.get("peri_permission_mode") == (None if peri == claude else peri)


def test_peri_input_becomes_claude_input() -> None:
    raw = peri_event(
        "PostToolUse",
        permission_mode="yolo",
        tool_name="Bash",
        tool_input={"command": "ls"},
        tool_output={"stdout": "a\nb"},
        message_count=7,
        additional_data={"old_cwd": "/a", "cwd": "/x"},
    )
    translated, body = from_dialect("peri", raw, orjson.dumps(raw))
    assert translated["tool_response"] == {"stdout": "a\nb"} and "tool_output" not in translated
    assert translated["message_count"] == 7 and translated["old_cwd"] == "/a"
    assert translated["cwd"] == "/work" and translated["additional_data"] == {"old_cwd": "/a", "cwd": "/x"}
    assert json.loads(body) == translated and raw["tool_output"] == {"stdout": "a\nb"}  # input left alone
    sub = peri_input(peri_event("SubagentStop", subagent_name="reviewer", subagent_result="LGTM"))
    assert (sub["agent_type"], sub["last_assistant_message"], sub["subagent_name"]) == ("reviewer", "LGTM", "reviewer")
    claude_shaped = peri_event("Stop", permission_mode="default")
    body = orjson.dumps(claude_shaped)
    assert from_dialect("peri", claude_shaped, body)[1] is body  # nothing to translate: same bytes
    assert from_dialect("claude", raw, body) == (raw, body) and from_dialect("Claude", raw, body) == (raw, body)
    with pytest.raises(ValueError, match=re.escape(f"unknown dialect 'nope' (known dialects: {', '.join(DIALECTS)})")):
        from_dialect("nope", raw, body)
    assert from_dialect(" PERI ", raw, body)[0]["permission_mode"] == "bypassPermissions"


# -- output ---------------------------------------------------------------------------------


def pre(decision: str, **more: Any) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": f"because {decision}",
            **more,
        }
    }


def test_pretooluse_outputs() -> None:
    deny = peri_output("PreToolUse", pre("deny"))
    assert deny == {
        "decision": "block",
        "reason": "because deny",
        "hook_specific_output": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "because deny",
        },
    }
    assert peri_reads("PreToolUse", deny) == ("block", "because deny")
    allow = peri_output("PreToolUse", pre("allow", updatedInput={"command": "ls -l"}, additionalContext="ctx"))
    assert allow["decision"] == "approve" and allow["hook_specific_output"]["updatedInput"] == {"command": "ls -l"}
    assert peri_reads("PreToolUse", allow) == ("permission", "allow")
    assert peri_reads("PreToolUse", peri_output("PreToolUse", pre("ask"))) == ("permission", "ask")
    defer = peri_output("PreToolUse", pre("defer"))
    assert defer["hook_specific_output"]["permissionDecision"] == "passthrough" and "decision" not in defer
    modify = peri_output(
        "PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": {"a": 1}}}
    )
    assert peri_reads("PreToolUse", modify) == ("modify", {"a": 1})
    bare_deny = peri_output(
        "PreToolUse", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
    )
    assert bare_deny["reason"] == "Denied by hookbus policy"


def test_other_event_outputs() -> None:
    prompt = peri_output(
        "UserPromptSubmit",
        {
            "decision": "block",
            "reason": "no secrets",
            "systemMessage": "s",
            "suppressOutput": True,
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "c", "sessionTitle": "t"},
        },
    )
    assert prompt == {
        "decision": "block",
        "reason": "no secrets",
        "systemMessage": "s",
        "suppress_output": True,
        "hook_specific_output": {"hookEventName": "UserPromptSubmit", "additionalContext": "c"},
    }
    start = peri_output(
        "SessionStart",
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "fleet", "reloadSkills": True}},
    )
    assert peri_reads("SessionStart", start) == ("context", "fleet")
    assert start["hook_specific_output"] == {"hookEventName": "SessionStart", "additionalContext": "fleet"}
    stop_ctx = peri_output("Stop", {"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext": "go on"}})
    assert stop_ctx == {"decision": "block", "reason": "go on"}
    post = peri_output(
        "PostToolUse",
        {
            "decision": "block",
            "reason": "r",
            "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "dropped"},
        },
    )
    assert post == {"decision": "block", "reason": "r"}  # no variant for PostToolUse: never sent
    halt = peri_output("Notification", {"continue": False, "stopReason": "halt", "terminalSequence": "\x07"})
    assert halt == {"continue": False, "stopReason": "halt"} and peri_reads("Notification", halt)[0] == "prevent"
    denied = peri_output(
        "PermissionRequest",
        {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "no", "interrupt": True},
            }
        },
    )
    assert denied == {"decision": "block", "reason": "no", "continue": False, "stopReason": "no"}
    granted = peri_output(
        "PermissionRequest",
        {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}},
    )
    assert granted == {"decision": "approve"}
    assert peri_output("Stop", {}) == {} and to_dialect("claude", "Stop", pre("deny")) == pre("deny")


@pytest.mark.parametrize(
    "event",
    [
        "PreToolUse",
        "PostToolUse",
        "UserPromptSubmit",
        "SessionStart",
        "Stop",
        "SubagentStop",
        "PermissionRequest",
        "Notification",
        "PreCompact",
        "Unknown",
    ],
)
def test_no_reply_is_ever_invalid_for_peri(event: str) -> None:
    everything = {
        "continue": True,
        "decision": "block",
        "reason": "r",
        "systemMessage": "m",
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "ask",
            "additionalContext": "c",
            "updatedToolOutput": "x",
            "watchPaths": [],
        },
    }
    _, detail = peri_reads(event, peri_output(event, everything))
    assert not str(detail).startswith("invalid"), (event, detail)


# -- live: Peri-shaped payloads through the gateway ----------------------------------------

SECRET_CHECK = """\
import json, sys
data = json.load(sys.stdin)
if "secret" in json.dumps(data.get("tool_response")):
    print(json.dumps({"decision": "block", "reason": "output leaks a secret"}))
"""


def live_policy(tmp_path: Path) -> str:
    (tmp_path / "secret.py").write_text(SECRET_CHECK)
    return f"""
hookbus: {{deadlineSeconds: 5.0}}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {{type: rule, deny: ["Bash(rm -rf *)"], reason: "no rm -rf"}}
  PostToolUse:
    - hooks:
        - {{type: command, command: "{shlex.quote(sys.executable)} {tmp_path / "secret.py"}"}}
"""


async def test_peri_through_a_live_gateway(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> None:
    rm = peri_event(
        "PreToolUse", permission_mode="yolo", tool_name="Bash", tool_input={"command": "rm -rf /"}, tool_use_id="c1"
    )
    leak = peri_event(
        "PostToolUse",
        permission_mode="hitl",
        tool_name="Bash",
        tool_input={"command": "env"},
        tool_output="API_KEY=secret",
    )
    async with platform(live_policy(tmp_path)) as p:
        by_query = await p.client.post(f"{p.url}/v1/hooks?dialect=peri", json=rm)
        by_header = await p.post(leak, headers={"X-Hookbus-Dialect": "peri"})
        as_claude = await p.post(rm)
        clean = await p.post({**leak, "tool_output": "fine"}, headers={"X-Hookbus-Dialect": "peri"})
    assert by_query.status_code == 200 and by_query.headers["X-Hookbus-Outcome"] == "decided"
    reply = by_query.json()
    assert "hookSpecificOutput" not in reply and reply["decision"] == "block" and "no rm -rf" in reply["reason"]
    assert reply["hook_specific_output"]["permissionDecision"] == "deny"
    assert peri_reads("PreToolUse", reply)[0] == "block"
    assert by_header.json() == {"decision": "block", "reason": "output leaks a secret"}
    assert as_claude.json()["hookSpecificOutput"]["permissionDecision"] == "deny" and "decision" not in as_claude.json()
    assert clean.json() == {} and peri_reads("PostToolUse", clean.json()) == ("allow", None)
    record = await async_wait_for(lambda: bus.record(by_query.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    logged = json.loads(record.payload)
    assert (logged["permission_mode"], logged["peri_permission_mode"]) == ("bypassPermissions", "yolo")
    post = await async_wait_for(lambda: bus.record(by_header.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    # The handler saw the secret (it blocked on it); the log keeps it masked.
    assert json.loads(post.payload)["tool_response"] == "API_KEY=[REDACTED:env-secret]" and post.decision == "block"
