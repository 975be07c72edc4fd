"""GitHub Copilot CLI's dialect (``copilot``).

Copilot CLI picks its payload by the casing of the event names in its hook files. With
PascalCase names (``PreToolUse``, ``Stop``, what ``hookbus install copilot`` writes) it sends
Claude Code's snake_case fields and Claude Code's tool *names*, but its own tool *arguments*;
with camelCase names (``preToolUse``, ``agentStop``) it sends camelCase fields, its own tool
names and no event name at all. ``PermissionRequest`` arrives camelCase either way, named by
``hookName``. Both forms are read.

Input, to Claude Code's shape (unknown fields kept as sent):

* Event: ``hook_event_name``, else ``hookName``, else (camelCase files name no event, nor
  does SubagentStart in a PascalCase file) the event its fields show: ``toolResult``
  PostToolUse, ``toolArgs`` PreToolUse, ``stopReason`` Stop (SubagentStop with an agent id),
  ``agentName`` SubagentStart, ``initialPrompt``/``source`` SessionStart, ``prompt``
  UserPromptSubmit, ``error`` StopFailure, ``reason`` SessionEnd. Copilot's names map as
  ``preToolUse`` / ``preMcpToolCall`` -> PreToolUse, ``postToolUse`` -> PostToolUse,
  ``postToolUseFailure`` -> PostToolUseFailure, ``userPromptSubmitted`` -> UserPromptSubmit,
  ``agentStop`` -> Stop, ``subagentStart`` / ``subagentStop`` -> SubagentStart / SubagentStop,
  ``sessionStart`` / ``sessionEnd`` -> SessionStart / SessionEnd, ``preCompact`` -> PreCompact,
  ``notification`` -> Notification, ``permissionRequest`` -> PermissionRequest and
  ``errorOccurred`` / ``ErrorOccurred`` -> StopFailure; the name Copilot used is kept in
  ``agent_event_name`` when it differs.
* Fields: ``sessionId`` -> ``session_id``, ``transcriptPath`` -> ``transcript_path``,
  ``toolName`` -> ``tool_name``, ``toolArgs`` / ``toolInput`` -> ``tool_input``,
  ``toolResult {resultType, textResultForLlm}`` -> ``tool_result {result_type,
  text_result_for_llm}``, ``response`` -> ``last_assistant_message``, ``stopReason``,
  ``initialPrompt``, ``agentId``, ``agentType``, ``agentName``, ``parentAgentId``,
  ``permissionSuggestions`` likewise; an epoch-millisecond ``timestamp``
  becomes ISO 8601 (as the PascalCase form sends it). ``tool_result`` also fills
  ``tool_response`` when that is absent. ``toolArgs`` as GitHub documents it, a JSON *string*,
  is decoded (one that is not JSON is not a Copilot input: it cannot be judged). An input
  with no session id (GitHub's camelCase examples show none) gets :func:`fallback_session`:
  ``copilot:<cwd>``, the same for every call in one folder.
* Tools: ``bash`` -> Bash, ``powershell`` -> PowerShell, ``view`` -> Read, ``create`` ->
  Write, ``edit`` / ``str_replace_editor`` / ``apply_patch`` -> Edit, ``glob`` -> Glob,
  ``grep`` / ``rg`` -> Grep, ``web_fetch`` -> WebFetch, ``web_search`` -> WebSearch,
  ``ask_user`` -> AskUserQuestion, ``update_todo`` -> TodoWrite, ``task`` -> Agent, ``write_bash``
  -> Bash, the lines its keys (``input``) type (:mod:`bus.dialects.shellinput`); an MCP tool,
  ``<server>-<tool>`` in both forms (Copilot's own tools have no dash), -> ``mcp__<server>__<tool>``
  read at every dash a server the policy names ends at (:mod:`bus.dialects.mcpnames`), else at
  the last dash. The agent's own name is kept in ``agent_tool_name`` (in PascalCase mode, where Copilot already sends
  Claude's name, it is the agent name that name stands for). Arguments follow the tool:
  ``path`` -> ``file_path`` (Read, Write, Edit), ``file_text`` -> ``content`` (Write),
  ``old_str`` / ``new_str`` -> ``old_string`` / ``new_string`` (Edit), ``view_range
  [first, last]`` -> ``offset`` / ``limit`` (Read), one ``paths`` entry -> ``path`` (Glob,
  Grep), ``agent_type`` -> ``subagent_type`` (Agent).

Output, only the top-level fields Copilot reads (it ignores Claude's ``hookSpecificOutput``
on PermissionRequest and its ``additionalContext`` on SessionStart, and never carries out
``continue: false``), event by event:

* PreToolUse: ``permissionDecision`` ``allow`` / ``deny`` / ``ask``, ``permissionDecisionReason``,
  ``additionalContext``, and ``updatedInput`` as ``modifiedArgs`` in Copilot's argument names.
  ``defer`` (Copilot has none), ``continue: false`` and a rewrite of keys become a deny saying so.
* PermissionRequest: the ``decision`` object's ``behavior``, ``message`` and ``interrupt`` at
  the top level; ``continue: false`` is a deny with ``interrupt``. An allow that rewrites the
  input is not sent (Copilot cannot rewrite there): its own permission flow decides.
* PostToolUse / PostToolUseFailure: ``additionalContext``; ``decision: block`` + ``reason``
  (Copilot then replaces the tool result with the reason); ``continue: false`` blocks too.
  PostToolUse's ``updatedToolOutput`` (or ``updatedMCPToolOutput``) becomes ``modifiedResult
  {textResultForLlm, resultType}``: its text (a string, MCP text blocks, Bash's ``stdout`` /
  ``stderr``, else its JSON) and the result type Copilot sent.
* UserPromptSubmit: ``additionalContext``, ``decision: block`` + ``reason`` (the prompt is not
  sent); ``continue: false`` blocks. SessionStart / SubagentStart: ``additionalContext``.
* Stop / SubagentStop: ``decision: block`` + ``reason`` (the reason becomes the next prompt);
  Claude Code's ``additionalContext`` there continues the turn like a block, so it becomes one.
* Other events: nothing (Copilot acts on no output there).
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Final

import orjson

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, partial, yes
from bus.dialects.mcpnames import mcp_names, with_readings
from bus.dialects.shellinput import keystrokes_input

COPILOT: Final = "copilot"
#: Copilot's tool that types into a running shell session (``input``).
STDIN_TOOL: Final = "write_bash"
#: Copilot's event names (camelCase files, and its own PascalCase extras) -> Claude Code's.
COPILOT_EVENTS: Final[dict[str, str]] = {
    "preToolUse": "PreToolUse",
    "preMcpToolCall": "PreToolUse",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "userPromptSubmitted": "UserPromptSubmit",
    "agentStop": "Stop",
    "subagentStart": "SubagentStart",
    "subagentStop": "SubagentStop",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
    "preCompact": "PreCompact",
    "notification": "Notification",
    "permissionRequest": "PermissionRequest",
    "errorOccurred": "StopFailure",
    "ErrorOccurred": "StopFailure",
    "PreMcpToolCall": "PreToolUse",
}
#: Copilot's tool names -> Claude Code's.
COPILOT_TOOLS: Final[dict[str, str]] = {
    "bash": "Bash",
    "powershell": "PowerShell",
    "view": "Read",
    "create": "Write",
    "edit": "Edit",
    "str_replace_editor": "Edit",
    "apply_patch": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "rg": "Grep",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
    "ask_user": "AskUserQuestion",
    "update_todo": "TodoWrite",
    "task": "Agent",
    STDIN_TOOL: "Bash",
}
#: Claude Code's tool names -> the Copilot tool each stands for in PascalCase mode.
AGENT_TOOLS: Final[dict[str, str]] = {
    "Bash": "bash",
    "PowerShell": "powershell",
    "Read": "view",
    "Write": "create",
    "Edit": "edit",
    "Glob": "glob",
    "Grep": "grep",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
    "AskUserQuestion": "ask_user",
    "TodoWrite": "update_todo",
    "Agent": "task",
}
#: Copilot's argument names -> Claude Code's, per Claude Code tool.
ARGUMENTS: Final[dict[str, dict[str, str]]] = {
    "Read": {"path": "file_path"},
    "Write": {"path": "file_path", "file_text": "content"},
    "Edit": {"path": "file_path", "old_str": "old_string", "new_str": "new_string"},
    "Agent": {"agent_type": "subagent_type"},
}
_FIELDS: Final = {
    "sessionId": "session_id",
    "transcriptPath": "transcript_path",
    "toolName": "tool_name",
    "toolArgs": "tool_input",
    "toolInput": "tool_input",
    "toolResult": "tool_result",
    "stopReason": "stop_reason",
    "initialPrompt": "initial_prompt",
    "agentId": "agent_id",
    "agentType": "agent_type",
    "parentAgentId": "parent_agent_id",
    "permissionSuggestions": "permission_suggestions",
    "lastAssistantMessage": "last_assistant_message",
    "response": "last_assistant_message",
    "agentName": "agent_name",
}
#: Which field shows the event in a camelCase input (which names none), first match wins.
_SHAPES: Final = (
    ("toolResult", "PostToolUse"),
    ("toolArgs", "PreToolUse"),
    ("stopReason", "Stop"),
    ("agentName", "SubagentStart"),
    ("initialPrompt", "SessionStart"),
    ("source", "SessionStart"),
    ("prompt", "UserPromptSubmit"),
    ("error", "StopFailure"),
    ("reason", "SessionEnd"),
)
_CONTEXT_EVENTS: Final = ("PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "SessionStart", "SubagentStart")
_BLOCK_EVENTS: Final = ("PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SubagentStop")


def _iso(epoch_ms: float) -> str | float:
    """``epoch_ms`` as ISO 8601 (as the PascalCase form sends it); a value no date has stays as sent."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return epoch_ms
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _event_of(raw: dict[str, Any]) -> str | None:
    for key in ("hook_event_name", "hookName"):
        if isinstance(raw.get(key), str) and raw[key]:
            return str(raw[key])
    for field, event in _SHAPES:
        if field in raw:
            subagent = "agentId" in raw or "agent_id" in raw
            return "SubagentStop" if event == "Stop" and subagent else event
    return None


def fallback_session(cwd: Any) -> str:
    """The session id of an input that names none: ``copilot:<cwd>`` (``copilot`` with no cwd)."""
    return f"copilot:{cwd}" if isinstance(cwd, str) and cwd else "copilot"


def decoded_arguments(text: str) -> Any:
    """``toolArgs`` sent as a JSON string, decoded (ValueError when it is not JSON, nested too deep included)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"toolArgs is a string that is not JSON: {exc}") from exc


def canonical_tool_input(tool: str, args: Any) -> Any:
    """Copilot's arguments for the Claude Code tool ``tool`` in Claude Code's names (a new dict)."""
    if not isinstance(args, dict):
        return args
    out = dict(args)
    for theirs, ours in ARGUMENTS.get(tool, {}).items():
        if theirs in out and ours not in out:
            out[ours] = out.pop(theirs)
    if tool == "Read" and isinstance(out.get("view_range"), list) and len(out["view_range"]) == 2:
        first, last = out.pop("view_range")
        if isinstance(first, int) and isinstance(last, int):
            out.setdefault("offset", first)
            if last >= first:
                out.setdefault("limit", last - first + 1)
    if tool in ("Glob", "Grep") and "path" not in out:
        paths = out.get("paths")
        if isinstance(paths, list) and len(paths) == 1:
            paths = paths[0]
        if isinstance(paths, str):
            out["path"] = paths
            del out["paths"]
    return out


def agent_tool_input(tool: str, args: Any) -> Any:
    """Claude Code's arguments for ``tool`` back in Copilot's names (what ``modifiedArgs`` takes)."""
    if not isinstance(args, dict):
        return args
    out = dict(args)
    for theirs, ours in ARGUMENTS.get(tool, {}).items():
        if ours in out:
            out[theirs] = out.pop(ours)
    if tool == "Read" and isinstance(out.get("offset"), int):
        first = out.pop("offset")
        limit = out.pop("limit", None)
        out["view_range"] = [first, first + limit - 1 if isinstance(limit, int) and limit > 0 else -1]
    if tool in ("Glob", "Grep") and "path" in out:
        out["paths"] = out.pop("path")
    return out


def canonical_tools(name: str) -> tuple[tuple[str, ...], str]:
    """``(the Claude Code names it may have, the likeliest first; Copilot's name)`` of the tool ``name``."""
    if name in COPILOT_TOOLS:
        return (COPILOT_TOOLS[name],), name
    if name in AGENT_TOOLS or name.startswith("mcp__"):
        return (name,), AGENT_TOOLS.get(name, name)
    return mcp_names(name, "-", "last") or (name,), name  # Copilot's own tools have no dash: ``<server>-<tool>``


def copilot_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Copilot hook input (either form) in Claude Code's shape (a new dict; extra fields kept)."""
    out = dict(hook_input)
    agent_event = _event_of(hook_input)
    for theirs, ours in _FIELDS.items():
        if theirs in out:
            value = out.pop(theirs)
            if theirs == "toolArgs" and isinstance(value, str):
                value = decoded_arguments(value)
            out.setdefault(ours, value)
    out.pop("hookName", None)
    if out.get("session_id") is None:
        out["session_id"] = fallback_session(out.get("cwd"))
    if isinstance(out.get("timestamp"), int | float) and not isinstance(out["timestamp"], bool):
        out["timestamp"] = _iso(out["timestamp"])
    if agent_event is not None:
        event = COPILOT_EVENTS.get(agent_event, agent_event)
        out["hook_event_name"] = event
        if event != agent_event:
            out[AGENT_EVENT_NAME] = agent_event
    result = out.get("tool_result")
    if isinstance(result, dict):
        renamed = {"resultType": "result_type", "textResultForLlm": "text_result_for_llm"}
        out["tool_result"] = {renamed.get(key, key): value for key, value in result.items()}
        out.setdefault("tool_response", out["tool_result"])
    name = out.get("tool_name")
    if isinstance(name, str) and name:
        names, agent_tool = canonical_tools(name)
        tool = names[0]
        with_readings(out, names)
        out[AGENT_TOOL_NAME] = agent_tool
        if "tool_input" in out:
            out["tool_input"] = canonical_tool_input(tool, out["tool_input"])
        if agent_tool == STDIN_TOOL:
            out["tool_input"] = keystrokes_input(out.get("tool_input"), "input", named_keys=True)
    return out


def _specific(output: dict[str, Any]) -> dict[str, Any]:
    specific = output.get("hookSpecificOutput")
    return specific if isinstance(specific, dict) else {}


def _pre_tool_use(output: dict[str, Any], specific: dict[str, Any], tool: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    decision = specific.get("permissionDecision")
    reason = specific.get("permissionDecisionReason")
    if output.get("continue") is False:
        decision, reason = "deny", output.get("stopReason") or reason or "hookbus stopped the agent"
    elif decision == "defer":
        decision = "deny"
        reason = f"{reason or 'hookbus deferred this call'} (Copilot cannot defer a tool call, so it is denied)"
    elif output.get("decision") in ("block", "approve") and decision is None:  # Claude's older form
        decision = "deny" if output["decision"] == "block" else "allow"
        reason = output.get("reason")
    if decision in ("allow", "deny", "ask"):
        out["permissionDecision"] = decision
        if reason:
            out["permissionDecisionReason"] = str(reason)
        elif decision == "deny":
            out["permissionDecisionReason"] = "Denied by hookbus policy"
    if decision != "deny" and isinstance(specific.get("updatedInput"), dict):
        if tool == STDIN_TOOL:
            return {"permissionDecision": "deny", "permissionDecisionReason": "hookbus rewrote keys: denied"}
        out["modifiedArgs"] = agent_tool_input(tool, specific["updatedInput"])
    if specific.get("additionalContext"):
        out["additionalContext"] = str(specific["additionalContext"])
    return out


def _permission_request(output: dict[str, Any], specific: dict[str, Any]) -> dict[str, Any]:
    request = specific.get("decision")
    request = request if isinstance(request, dict) else {}
    if output.get("continue") is False:
        message = output.get("stopReason") or request.get("message") or "hookbus stopped the agent"
        return {"behavior": "deny", "message": str(message), "interrupt": True}
    if request.get("behavior") == "deny":
        out: dict[str, Any] = {"behavior": "deny", "message": str(request.get("message") or "Denied by hookbus policy")}
        if request.get("interrupt") is True:
            out["interrupt"] = True
        return out
    if request.get("behavior") == "allow" and request.get("updatedInput") is None:
        return {"behavior": "allow"}
    return {}


def _result_text(value: Any) -> str:
    """The text the model should read for a replaced tool output (Claude Code's shapes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # MCP content blocks
        return "\n".join(str(b.get("text", "")) for b in value if isinstance(b, dict) and b.get("type") == "text")
    if isinstance(value, dict):
        for key in ("text_result_for_llm", "textResultForLlm", "content"):
            if key in value:
                return _result_text(value[key])
        if "stdout" in value or "stderr" in value:
            return "\n".join(str(value[k]) for k in ("stdout", "stderr") if value.get(k))
    return json.dumps(value, ensure_ascii=False)


def _modified_result(specific: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any] | None:
    replaced = specific.get("updatedToolOutput", specific.get("updatedMCPToolOutput"))
    if replaced is None:
        return None
    sent = agent_input.get("tool_result") or agent_input.get("toolResult")
    sent = sent if isinstance(sent, dict) else {}
    kind = sent.get("result_type") or sent.get("resultType") or "success"
    return {"textResultForLlm": _result_text(replaced), "resultType": kind}


def copilot_output(
    event: str, output: dict[str, Any], tool: str = "", agent_input: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` in the form Copilot reads (see the module docstring)."""
    specific = _specific(output)
    if event == "PreToolUse":
        return _pre_tool_use(output, specific, tool)
    if event == "PermissionRequest":
        return _permission_request(output, specific)
    out: dict[str, Any] = {}
    if event == "PostToolUse" and (replaced := _modified_result(specific, agent_input or {})) is not None:
        out["modifiedResult"] = replaced
    if event in _CONTEXT_EVENTS and specific.get("additionalContext"):
        out["additionalContext"] = str(specific["additionalContext"])
    if event in _BLOCK_EVENTS:
        if output.get("decision") == "block":
            out["decision"] = "block"
            out["reason"] = str(output.get("reason") or "Blocked by hookbus policy")
        elif output.get("continue") is False and event not in ("Stop", "SubagentStop"):
            out["decision"] = "block"
            out["reason"] = str(output.get("stopReason") or "hookbus stopped the agent")
        elif event in ("Stop", "SubagentStop") and specific.get("additionalContext"):
            out["decision"] = "block"
            out["reason"] = str(specific["additionalContext"])
    return out


class CopilotCli(Dialect):
    """GitHub Copilot CLI's hook format (see the module docstring)."""

    name = COPILOT
    title = "GitHub Copilot CLI"
    capabilities = {
        "deny": yes("top-level `permissionDecision: deny`; PermissionRequest `behavior: deny`"),
        "ask": partial("`permissionDecision: ask`; where Copilot cannot ask (`-p`, `--no-ask-user`) it denies"),
        "allow": yes("top-level `permissionDecision: allow` (skips Copilot's own prompt)"),
        "rewrite_input": yes("`updatedInput` becomes `modifiedArgs` in Copilot's argument names (PreToolUse only)"),
        "stop_block": yes("`decision: block` + `reason` on Stop: the reason becomes the next prompt"),
        "add_context": partial(
            "top-level `additionalContext` on SessionStart, UserPromptSubmit, PreToolUse, PostToolUse(Failure) "
            "and SubagentStart; on Stop it becomes a block with the context as reason"
        ),
        "fail_closed": partial(
            "the default shim fails open; `--fail-closed` makes it exit 2 (a deny) before Copilot's timeout; "
            "with `--http`, an http PreToolUse or PermissionRequest hook that gets an error (gateway down, 401, "
            "5xx) is a deny, but a timeout lets the call run; other events go on"
        ),
    }
    events = COPILOT_EVENTS
    tools = COPILOT_TOOLS
    transport = "command"  # the shim by default (fails open); `install copilot --http` writes native http hooks
    verified = "real CLI: @github/copilot 1.0.102, headless, in the test suite"

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return copilot_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        name = agent_input.get("tool_name") or agent_input.get("toolName")
        tool = canonical_tools(name)[0][0] if isinstance(name, str) else ""
        return copilot_output(event, output, STDIN_TOOL if name == STDIN_TOOL else tool, agent_input)


__all__ = [
    "AGENT_TOOLS",
    "ARGUMENTS",
    "COPILOT",
    "COPILOT_EVENTS",
    "COPILOT_TOOLS",
    "STDIN_TOOL",
    "CopilotCli",
    "agent_tool_input",
    "canonical_tool_input",
    "canonical_tools",
    "copilot_input",
    "copilot_output",
    "decoded_arguments",
    "fallback_session",
]
