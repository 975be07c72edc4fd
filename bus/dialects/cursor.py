"""Cursor's dialect (``cursor``; the IDE agent and ``cursor-agent``, command hooks through the shim).

Built from documentation only: Cursor's hooks page (as mirrored by careful third-party
adapters: Cupcake, agent-hooks-bridge, failproofai): Cursor is not on npm and talks only
to its own backend, so no real client runs in the test suite.

Input. Every hook gets ``conversation_id`` (it becomes ``session_id``), ``generation_id``,
``hook_event_name``, ``workspace_roots`` (the first fills ``cwd`` when the event has none),
``model``, ``cursor_version``, ``user_email`` and sometimes ``transcript_path``; every field
is kept. Events become Claude Code's, the original kept as ``agent_event_name``:

* ``preToolUse`` / ``postToolUse`` / ``postToolUseFailure`` -> PreToolUse / PostToolUse /
  PostToolUseFailure, with Cursor's ``tool_name`` and ``tool_input``.
* ``beforeShellExecution`` / ``afterShellExecution`` -> PreToolUse / PostToolUse on Bash
  (``command`` -> ``tool_input.command``; ``output`` and ``duration`` -> ``tool_response``).
* ``beforeMCPExecution`` / ``afterMCPExecution`` -> PreToolUse / PostToolUse on
  ``mcp__<server>__<tool>``: Cursor names no server, so it is ``server_name`` when sent,
  else ``cursor`` (a rule on ``mcp__*`` or ``mcp__cursor__*`` meets it). ``tool_input``
  (a JSON string in some versions) is parsed; ``result_json`` -> ``tool_response``.
* ``beforeReadFile`` -> PreToolUse on Read (``file_path``); ``afterFileEdit`` -> PostToolUse
  on Edit (``file_path``, ``edits``).
* ``beforeSubmitPrompt`` -> UserPromptSubmit; ``stop`` -> Stop (``loop_count`` above 0 is
  ``stop_hook_active``); ``subagentStart`` / ``subagentStop``, ``sessionStart`` /
  ``sessionEnd`` and ``preCompact`` -> their Claude Code names. ``afterAgentResponse``,
  ``afterAgentThought`` and the Tab hooks pass through under their own names.

Tools (``preToolUse``) become Claude Code's, the original kept as ``agent_tool_name``:
``Shell`` -> Bash, ``StrReplace`` -> Edit, ``Read`` / ``Write`` / ``Edit`` / ``Grep`` /
``Glob`` / ``LS`` / ``Task`` as they are; ``path`` also fills ``file_path`` for the file tools.

Output, only the fields each Cursor event reads:

* PreToolUse (``preToolUse``, ``beforeShellExecution``, ``beforeMCPExecution``):
  ``permission`` with ``user_message`` and ``agent_message``. deny -> ``deny``; allow ->
  ``allow``; ask -> ``deny`` with the reason (Cursor's ``ask`` has been unreliable since
  2.4.21, and 3.x runs the tool, so an ask is never sent as one); ``continue: false`` ->
  ``deny``. ``updatedInput`` -> ``updated_input`` on ``preToolUse`` only, under Cursor's
  names. ``beforeReadFile`` takes ``permission`` alone.
* UserPromptSubmit: block or ``continue: false`` -> ``continue: false`` + ``user_message``;
  context has no place (Cursor injects none) and is dropped.
* Stop / SubagentStop: a block's reason (or Claude Code's ``additionalContext``) ->
  ``followup_message``, which Cursor submits as the next prompt (at most 5 times in a row).
* PostToolUse / PostToolUseFailure (``postToolUse*`` only) and SessionStart:
  ``additionalContext`` -> ``additional_context``; a PostToolUse block's reason goes there too.
* Every other event: ``{}`` (observe only).
"""

from __future__ import annotations

import json
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.windsurf import pre_tool_block, prompt_block

CURSOR: Final = "cursor"
#: Cursor's hook events -> Claude Code's.
CURSOR_EVENTS: Final[dict[str, str]] = {
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "beforeShellExecution": "PreToolUse",
    "afterShellExecution": "PostToolUse",
    "beforeMCPExecution": "PreToolUse",
    "afterMCPExecution": "PostToolUse",
    "beforeReadFile": "PreToolUse",
    "afterFileEdit": "PostToolUse",
    "beforeSubmitPrompt": "UserPromptSubmit",
    "stop": "Stop",
    "subagentStart": "SubagentStart",
    "subagentStop": "SubagentStop",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
    "preCompact": "PreCompact",
}
#: Cursor's tool names -> Claude Code's.
CURSOR_TOOLS: Final[dict[str, str]] = {"Shell": "Bash", "StrReplace": "Edit"}
#: The tool each single-purpose Cursor event is about.
EVENT_TOOLS: Final[dict[str, str]] = {
    "beforeShellExecution": "Bash",
    "afterShellExecution": "Bash",
    "beforeReadFile": "Read",
    "afterFileEdit": "Edit",
}
_FILE_TOOLS: Final = frozenset({"Read", "Write", "Edit"})
_PERMISSION_EVENTS: Final = frozenset({"preToolUse", "beforeShellExecution", "beforeMCPExecution", "beforeReadFile"})


def _arguments(raw: Any) -> dict[str, Any]:
    """Cursor's ``tool_input``, which some versions send as a JSON string, as an object."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {"raw": raw}
    return raw if isinstance(raw, dict) else {}


def cursor_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Cursor hook input in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    event = out.get("hook_event_name")
    if isinstance(event, str) and event in CURSOR_EVENTS:
        out["hook_event_name"] = CURSOR_EVENTS[event]
        out[AGENT_EVENT_NAME] = event
    if "session_id" not in out and isinstance(out.get("conversation_id"), str):
        out["session_id"] = out["conversation_id"]
    roots = out.get("workspace_roots")
    if "cwd" not in out and isinstance(roots, list) and roots and isinstance(roots[0], str):
        out["cwd"] = roots[0]
    if event in ("beforeShellExecution", "afterShellExecution"):
        out[AGENT_TOOL_NAME] = "Shell"
        out["tool_name"] = "Bash"
        out["tool_input"] = {"command": out.get("command", "")}
        if event == "afterShellExecution":
            out["tool_response"] = {"output": out.get("output", ""), "duration": out.get("duration")}
    elif event in ("beforeMCPExecution", "afterMCPExecution"):
        tool = str(out.get("tool_name") or "")
        server = out.get("server_name") if isinstance(out.get("server_name"), str) else "cursor"
        out[AGENT_TOOL_NAME] = tool
        out["tool_name"] = tool if tool.startswith("mcp__") else f"mcp__{server}__{tool}"
        out["tool_input"] = _arguments(out.get("tool_input"))
        if "result_json" in out:
            out["tool_response"] = _arguments(out["result_json"])
    elif event in ("beforeReadFile", "afterFileEdit"):
        out[AGENT_TOOL_NAME] = "Read" if event == "beforeReadFile" else "Edit"
        out["tool_name"] = EVENT_TOOLS[event]
        tool_input: dict[str, Any] = {"file_path": out.get("file_path", "")}
        if event == "afterFileEdit":
            tool_input["edits"] = out.get("edits")
        out["tool_input"] = tool_input
    elif isinstance(out.get("tool_name"), str):
        tool = out["tool_name"]
        out[AGENT_TOOL_NAME] = tool
        out["tool_name"] = CURSOR_TOOLS.get(tool, tool)
        arguments = dict(_arguments(out.get("tool_input")))
        if out["tool_name"] in _FILE_TOOLS and "file_path" not in arguments and "path" in arguments:
            arguments["file_path"] = arguments["path"]
        out["tool_input"] = arguments
    if event == "stop":
        count = out.get("loop_count")
        out.setdefault("stop_hook_active", isinstance(count, int) and count > 0)
    return out


def _updated_input(updated: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A canonical rewrite under Cursor's parameter names (``file_path`` back to ``path`` when Cursor sent that)."""
    raw = _arguments(agent_input.get("tool_input"))
    if "path" in raw and "file_path" not in raw and "file_path" in updated:
        path = updated["file_path"]
        updated = {key: value for key, value in updated.items() if key not in ("path", "file_path")}
        updated["path"] = path
    return updated


def cursor_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Cursor reads it (see the module docstring)."""
    agent_event = agent_input.get("hook_event_name")
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext")
    if event == "PreToolUse":
        if agent_event not in _PERMISSION_EVENTS:
            return {}
        reason = pre_tool_block(output, "Cursor")
        decision = specific.get("permissionDecision")
        if decision is None and output.get("decision") == "approve":
            decision = "allow"
        if reason is not None:
            out: dict[str, Any] = {"permission": "deny"}
        elif decision == "allow":
            out = {"permission": "allow"}
            reason = specific.get("permissionDecisionReason") or output.get("reason")
        else:
            out = {}
        if agent_event == "beforeReadFile":
            return out
        if reason:
            out["user_message"] = out["agent_message"] = str(reason)
        updated = specific.get("updatedInput")
        if agent_event == "preToolUse" and out.get("permission") != "deny" and isinstance(updated, dict):
            out["updated_input"] = _updated_input(updated, agent_input)
        return out
    if event == "UserPromptSubmit":
        reason = prompt_block(output)
        return {"continue": False, "user_message": reason} if reason is not None else {}
    if event in ("Stop", "SubagentStop"):
        if output.get("decision") == "block":
            return {"followup_message": str(output.get("reason") or "Keep working (hookbus policy)")}
        if isinstance(context, str) and context:
            return {"followup_message": context}
        return {}
    if event in ("PostToolUse", "PostToolUseFailure") and agent_event in ("postToolUse", "postToolUseFailure"):
        parts = [str(output["reason"])] if output.get("decision") == "block" and output.get("reason") else []
        if isinstance(context, str) and context:
            parts.append(context)
        return {"additional_context": "\n\n".join(parts)} if parts else {}
    if event == "SessionStart" and isinstance(context, str) and context:
        return {"additional_context": context}
    return {}


class Cursor(Dialect):
    """Cursor's hook format (see the module docstring)."""

    name = CURSOR
    title = "Cursor"
    capabilities = {
        "deny": yes("`permission: deny` with `user_message` and `agent_message`"),
        "ask": no(
            "Cursor's `ask` is unreliable (since 2.4.21; 3.x runs the tool): an ask is sent as "
            "`permission: deny` with the reason"
        ),
        "allow": yes("`permission: allow`"),
        "rewrite_input": partial("`updated_input` on preToolUse only (beforeShellExecution cannot rewrite)"),
        "stop_block": partial(
            "`followup_message` on stop and subagentStop: submitted as the next prompt (at most 5 in a row; "
            "Cloud Agents run no stop hooks)"
        ),
        "add_context": partial("`additional_context` on postToolUse, postToolUseFailure and sessionStart only"),
        "fail_closed": yes("`hookbus hook --fail-closed` exits 2, which Cursor reads as a deny"),
    }
    events = CURSOR_EVENTS
    tools = CURSOR_TOOLS
    transport = "command"
    verified = (
        "documentation only: Cursor's hooks page (cursor.com/docs/agent/hooks) as mirrored by the "
        "Cupcake, agent-hooks-bridge and failproofai adapters"
    )

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return cursor_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return cursor_output(event, output, agent_input)


__all__ = ["CURSOR", "CURSOR_EVENTS", "CURSOR_TOOLS", "EVENT_TOOLS", "Cursor", "cursor_input", "cursor_output"]
