"""OpenCode's dialect (``opencode``, the ``opencode-ai`` CLI).

OpenCode has no external hooks, only in-process JavaScript plugins. ``hookbus install
opencode`` writes hookbus's plugin (``hookbus/install/opencode_plugin.js``) into a plugin
folder; the plugin posts what it sees to ``URL/v1/hooks?dialect=opencode`` and carries out
the answer. This module defines both JSON shapes on that wire.

Input, as the plugin posts it (one object per hook call; unknown fields are kept as sent):

* ``event``: the OpenCode hook or bus event, ``sessionID``, ``directory`` and ``worktree``
  (the plugin context's), ``time`` (epoch milliseconds, ``Date.now()``).
* Tool hooks add ``tool`` (OpenCode's tool id), ``callID`` and ``args`` (the tool's arguments,
  camelCase); ``tool.execute.after`` adds ``result {title, output, metadata}``.
* ``chat.message`` adds ``prompt`` (the text parts of the user message), ``messageID``,
  ``agent`` and ``model``; bus events add their ``properties``, and ``session.idle`` also
  ``lastAssistantMessage`` (the text of the session's last assistant message, read with the
  plugin context's SDK client) and ``sessionUsage`` ``{tokens, costUsd}`` (the session's
  assistant messages' tokens and cost as OpenCode recorded them, added up; kept as sent, it
  feeds the session's ``tokens`` and ``cost_usd`` counters, :mod:`bus.session.usage`).

Mapped to Claude Code's shape: ``session_id`` <- ``sessionID``, ``cwd`` <- ``directory``,
``tool_use_id`` <- ``callID``, ``tool_input`` <- ``args``, ``tool_response`` <- ``result``,
``last_assistant_message`` <- ``lastAssistantMessage``, ``timestamp`` (ISO 8601) <- ``time``;
the OpenCode event in ``agent_event_name`` and the tool id in ``agent_tool_name``. Event by
event:

* ``tool.execute.before`` -> PreToolUse; ``tool.execute.after`` -> PostToolUse.
* ``chat.message`` -> UserPromptSubmit (``prompt``).
* ``session.created`` -> SessionStart (``source: "startup"``); ``session.idle`` -> Stop
  (``stop_hook_active: false``); ``session.error`` -> StopFailure; ``session.deleted`` ->
  SessionEnd; ``experimental.session.compacting`` -> PreCompact (``trigger: "auto"``);
  ``session.compacted`` -> PostCompact. Other names pass through unchanged.

Tools (:data:`OPENCODE_TOOLS`) and their arguments: ``bash`` -> Bash (``command``,
``description``, ``timeout`` in ms as in Claude Code); ``read`` -> Read, ``write`` -> Write,
``edit`` -> Edit, ``multiedit`` -> MultiEdit (``filePath`` -> ``file_path``, ``oldString`` /
``newString`` / ``replaceAll`` -> ``old_string`` / ``new_string`` / ``replace_all``);
``apply_patch`` / ``patch`` -> Edit with ``file_path`` the patch's first file and
``file_paths`` all of them (Write with the added lines as ``content`` when the patch only adds
files); ``glob`` -> Glob, ``grep`` -> Grep (``include`` -> ``glob``), ``list`` -> LS,
``webfetch`` -> WebFetch, ``websearch`` -> WebSearch, ``todowrite`` -> TodoWrite, ``task`` ->
Agent, ``skill`` -> Skill (``name`` -> ``skill``), ``question`` -> AskUserQuestion, ``lsp`` ->
LSP. Any other id with an underscore is an MCP tool, which OpenCode names
``<server>_<tool>``: it becomes ``mcp__<server>__<tool>``, split after the longest server the
policy names that it starts with, else at the first underscore; when several servers the policy
names could begin it, every reading is judged (:mod:`bus.dialects.mcpnames`).

Output, only what the plugin reads (``decision``, ``reason``, ``args``, ``context``,
``output``; nothing else is sent), event by event:

* PreToolUse: a deny is ``decision: "deny"`` + ``reason``: the plugin throws an Error with
  the reason, so OpenCode skips the tool and the model gets the reason as the tool's error.
  ``ask`` (a plugin cannot show a prompt) and ``defer`` become a deny whose reason says so;
  ``continue: false`` too. ``updatedInput`` (with an allow or no decision) becomes ``args``,
  in OpenCode's argument names: the plugin replaces the call's arguments with it. An allow
  is sent as nothing: OpenCode's own ``permission`` rules still apply.
* PostToolUse: ``additionalContext`` and a ``decision: block`` reason become ``context``,
  which the plugin appends to the tool's output (what the model reads); a string
  ``updatedToolOutput`` / ``updatedMCPToolOutput`` becomes ``output``, which replaces it.
* UserPromptSubmit: ``additionalContext`` becomes ``context``, appended to the user message
  before it is sent; ``decision: block`` (or ``continue: false``) becomes a deny: the plugin
  throws and OpenCode does not send the prompt (``opencode run`` 1.18.33 then ends with a
  generic "Unexpected server error"; the reason is only in the decision log).
* PreCompact: ``additionalContext`` becomes ``context`` (added to the compaction prompt).
* Every other event (SessionStart, Stop, ...): the plugin only reports them; nothing is sent
  back (OpenCode offers no way to block a Stop or add context there).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.mcpnames import mcp_names, with_readings

OPENCODE: Final = "opencode"
#: OpenCode's hook and bus event names -> Claude Code's.
OPENCODE_EVENTS: Final[dict[str, str]] = {
    "tool.execute.before": "PreToolUse",
    "tool.execute.after": "PostToolUse",
    "chat.message": "UserPromptSubmit",
    "session.created": "SessionStart",
    "session.idle": "Stop",
    "session.error": "StopFailure",
    "session.deleted": "SessionEnd",
    "experimental.session.compacting": "PreCompact",
    "session.compacted": "PostCompact",
}
#: OpenCode's built-in tool ids -> Claude Code's tool names.
OPENCODE_TOOLS: Final[dict[str, str]] = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "multiedit": "MultiEdit",
    "apply_patch": "Edit",
    "patch": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "list": "LS",
    "webfetch": "WebFetch",
    "websearch": "WebSearch",
    "todowrite": "TodoWrite",
    "todoread": "TodoRead",
    "task": "Agent",
    "skill": "Skill",
    "question": "AskUserQuestion",
    "lsp": "LSP",
}
_FILE_ARGS: Final = {"filePath": "file_path", "oldString": "old_string", "newString": "new_string"}
#: OpenCode's argument names -> Claude Code's, per OpenCode tool id.
ARGUMENTS: Final[dict[str, dict[str, str]]] = {
    "read": {"filePath": "file_path"},
    "write": {"filePath": "file_path"},
    "edit": {**_FILE_ARGS, "replaceAll": "replace_all"},
    "multiedit": {"filePath": "file_path"},
    "grep": {"include": "glob"},
    "skill": {"name": "skill"},
    "apply_patch": {"patchText": "patch_text"},
    "patch": {"patchText": "patch_text"},
}
_EDIT_ARGS: Final = {"oldString": "old_string", "newString": "new_string", "replaceAll": "replace_all"}
_PATCH_FILE: Final = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
#: The fields of a reply the plugin reads.
REPLY_FIELDS: Final = ("decision", "reason", "args", "context", "output")
ASK_REFUSAL: Final = "hookbus policy asks for confirmation, which OpenCode cannot show a plugin's user; denied"


def canonical_tools(tool: str) -> tuple[str, ...]:
    """Claude Code's names for OpenCode's tool id, the likeliest first (an MCP tool as ``mcp__server__tool``)."""
    if tool in OPENCODE_TOOLS:
        return (OPENCODE_TOOLS[tool],)
    return mcp_names(tool, "_", "first") or (tool,)


def canonical_tool(tool: str) -> str:
    """Claude Code's name for OpenCode's tool id (an MCP tool as ``mcp__server__tool``)."""
    return canonical_tools(tool)[0]


def _renamed(values: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    return {names.get(key, key): value for key, value in values.items()}


def _patch_input(args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A patch call as Claude Code's Edit (or Write, when it only adds files)."""
    text = args.get("patchText")
    tool_input = _renamed(args, ARGUMENTS["apply_patch"])
    found = _PATCH_FILE.findall(text) if isinstance(text, str) else []
    if not found:
        return "Edit", tool_input
    tool_input.setdefault("file_path", found[0][1])
    tool_input.setdefault("file_paths", [path for _, path in found])
    if all(kind == "Add" for kind, _ in found) and isinstance(text, str):
        added = [line[1:] for line in text.splitlines() if line.startswith("+")]
        tool_input.setdefault("content", "\n".join(added) + ("\n" if added else ""))
        return "Write", tool_input
    return "Edit", tool_input


def tool_input(tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """OpenCode's tool id and arguments as Claude Code's tool name and input (new dicts)."""
    if tool in ("apply_patch", "patch"):
        return _patch_input(args)
    converted = _renamed(args, ARGUMENTS.get(tool, {}))
    if tool == "multiedit" and isinstance(converted.get("edits"), list):
        converted["edits"] = [_renamed(e, _EDIT_ARGS) if isinstance(e, dict) else e for e in converted["edits"]]
    return canonical_tool(tool), converted


def agent_args(tool: str, updated: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's ``updatedInput`` for OpenCode's ``tool`` in OpenCode's argument names."""
    names = {claude: agent for agent, claude in ARGUMENTS.get(tool, {}).items()}
    args = _renamed(updated, names)
    if tool in ("apply_patch", "patch"):
        for derived in ("file_path", "file_paths", "content"):
            args.pop(derived, None)
    if tool == "multiedit" and isinstance(args.get("edits"), list):
        back = {claude: agent for agent, claude in _EDIT_ARGS.items()}
        args["edits"] = [_renamed(e, back) if isinstance(e, dict) else e for e in args["edits"]]
    return args


def _iso(epoch_ms: Any) -> str | None:
    if not isinstance(epoch_ms, int | float) or isinstance(epoch_ms, bool):
        return None
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def opencode_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """What hookbus's OpenCode plugin posted, in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    event = out.get("event")
    if isinstance(event, str):
        out[AGENT_EVENT_NAME] = event
        out["hook_event_name"] = OPENCODE_EVENTS.get(event, event)
    for ours, theirs in (("sessionID", "session_id"), ("directory", "cwd"), ("callID", "tool_use_id")):
        if ours in out:
            out.setdefault(theirs, out[ours])
    if (stamp := _iso(out.get("time"))) is not None:
        out.setdefault("timestamp", stamp)
    tool = out.get("tool")
    if isinstance(tool, str):
        args = out.get("args")
        name, converted = tool_input(tool, args if isinstance(args, dict) else {})
        out[AGENT_TOOL_NAME] = tool
        readings = canonical_tools(tool)
        with_readings(out, readings if readings[0] == name else (name,))
        out["tool_input"] = converted
    if isinstance(out.get("lastAssistantMessage"), str):
        out.setdefault("last_assistant_message", out["lastAssistantMessage"])
    if "result" in out:
        out.setdefault("tool_response", out["result"])
    canonical = out.get("hook_event_name")
    if canonical == "SessionStart":
        out.setdefault("source", "startup")
    elif canonical == "Stop":
        out.setdefault("stop_hook_active", False)
    elif canonical == "PreCompact":
        out.setdefault("trigger", "auto")
    return out


def _deny_reason(decision: Any, reason: Any) -> str:
    told = reason if isinstance(reason, str) and reason else ""
    if decision == "ask":
        return f"{ASK_REFUSAL}: {told}" if told else ASK_REFUSAL
    if decision == "defer":
        return f"hookbus policy deferred the decision, which OpenCode cannot; denied{': ' + told if told else ''}"
    return told or "Denied by hookbus policy"


def _pre_tool_use(output: dict[str, Any], specific: dict[str, Any], tool: Any) -> dict[str, Any]:
    decision = specific.get("permissionDecision")
    reason = specific.get("permissionDecisionReason")
    if decision is None and output.get("decision") in ("block", "deny"):
        decision, reason = "deny", output.get("reason")
    if decision in ("deny", "ask", "defer"):
        return {"decision": "deny", "reason": _deny_reason(decision, reason)}
    if output.get("continue") is False:
        return {"decision": "deny", "reason": _deny_reason(None, output.get("stopReason"))}
    updated = specific.get("updatedInput")
    if isinstance(updated, dict) and isinstance(tool, str):
        return {"args": agent_args(tool, updated)}
    return {}


def _post_tool_use(output: dict[str, Any], specific: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    parts = []
    if output.get("decision") == "block":
        reason = output.get("reason")
        parts.append(reason if isinstance(reason, str) and reason else "hookbus policy flagged this tool result")
    if isinstance(specific.get("additionalContext"), str) and specific["additionalContext"]:
        parts.append(specific["additionalContext"])
    if parts:
        out["context"] = "\n\n".join(parts)
    for key in ("updatedToolOutput", "updatedMCPToolOutput"):
        if isinstance(specific.get(key), str):
            out["output"] = specific[key]
            break
    return out


def opencode_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as hookbus's OpenCode plugin reads it (see the module docstring)."""
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext")
    if event == "PreToolUse":
        return _pre_tool_use(output, specific, agent_input.get("tool"))
    if event == "PostToolUse":
        return _post_tool_use(output, specific)
    if event == "UserPromptSubmit":
        if output.get("decision") in ("block", "deny") or output.get("continue") is False:
            reason = output.get("reason") or output.get("stopReason")
            return {
                "decision": "deny",
                "reason": reason if isinstance(reason, str) and reason else "Blocked by hookbus",
            }
        return {"context": context} if isinstance(context, str) and context else {}
    if event == "PreCompact" and isinstance(context, str) and context:
        return {"context": context}
    return {}


class OpenCode(Dialect):
    """OpenCode's format, as hookbus's OpenCode plugin posts and reads it (see the module docstring)."""

    name = OPENCODE
    title = "OpenCode"
    transport = "plugin"
    verified = "real CLI: opencode-linux-x64 1.18.33 (npm opencode-ai), headless, in the test suite"
    events = OPENCODE_EVENTS
    tools = OPENCODE_TOOLS
    capabilities = {
        "deny": yes("the plugin throws with the reason; OpenCode skips the tool and the model gets it as the error"),
        "ask": no("a plugin cannot show a prompt: `ask` is sent as a deny whose reason says confirmation was asked"),
        "allow": no(
            "an allow lets the call go on but skips nothing: OpenCode's own `permission` rules still apply "
            "(1.18.33 calls no plugin for its permission prompts)"
        ),
        "rewrite_input": yes("`updatedInput`, in OpenCode's argument names, replaces the call's `args`"),
        "stop_block": no("OpenCode has no Stop decision: `session.idle` is reported as Stop and a block is dropped"),
        "add_context": partial(
            "UserPromptSubmit (appended to the user message), PostToolUse (appended to the tool output) and "
            "PreCompact; none on SessionStart, PreToolUse or Stop"
        ),
        "fail_closed": yes(
            "`hookbus install opencode --fail-closed` bakes it into the plugin: tool calls and prompts "
            "are refused when the gateway cannot answer"
        ),
    }

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return opencode_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return opencode_output(event, output, agent_input)

    def canonical_tool(self, name: str) -> str:
        return canonical_tool(name)


__all__ = [
    "ARGUMENTS",
    "ASK_REFUSAL",
    "OPENCODE",
    "OPENCODE_EVENTS",
    "OPENCODE_TOOLS",
    "REPLY_FIELDS",
    "OpenCode",
    "agent_args",
    "canonical_tool",
    "opencode_input",
    "opencode_output",
    "tool_input",
]
