"""Gemini CLI's dialect (``gemini``, Google's ``@google/gemini-cli``; command hooks through the shim).

Input. Gemini CLI sends snake_case JSON close to Claude Code's (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, plus an ISO 8601 ``timestamp`` that is
kept). Event names become Claude Code's and the original is kept as ``agent_event_name``:
``BeforeTool`` -> PreToolUse, ``AfterTool`` -> PostToolUse (PostToolUseFailure when its
``tool_response`` carries an ``error``, whose ``message`` fills ``error``, or, for
``run_shell_command``, when its ``llmContent`` ends with a non-zero ``Exit Code: N`` line: Gemini
reports a command's exit only so, and ``Exit Code: N`` fills ``error``), ``BeforeAgent`` ->
UserPromptSubmit (``prompt`` as is), ``AfterAgent`` -> Stop (``prompt_response`` also fills
``last_assistant_message``; ``stop_hook_active`` as is), ``PreCompress`` -> PreCompact;
SessionStart, SessionEnd and Notification keep their names (``notification_type``
``ToolPermission`` becomes ``permission_prompt``, the original kept as
``agent_notification_type``). BeforeModel, AfterModel and BeforeToolSelection have no Claude
Code equivalent and pass through under their own names (recorded, never decided).

Tools become Claude Code's, the original kept as ``agent_tool_name``: ``run_shell_command``
-> Bash (``is_background`` -> ``run_in_background``), ``write_file`` -> Write, ``replace`` ->
Edit (``allow_multiple`` -> ``replace_all``), ``read_file`` -> Read, ``glob`` -> Glob and
``grep_search`` -> Grep (``dir_path`` -> ``path``, ``include_pattern`` -> ``glob``),
``list_directory`` -> LS (``dir_path`` -> ``path``), ``web_fetch`` -> WebFetch (the first URL
of its ``prompt`` also fills ``url``), ``google_web_search`` -> WebSearch, ``write_todos`` ->
TodoWrite, ``ask_user`` -> AskUserQuestion, ``enter_plan_mode`` / ``exit_plan_mode`` ->
EnterPlanMode / ExitPlanMode, ``invoke_agent`` -> Task. A relative ``file_path`` is made
absolute against ``cwd`` (Gemini accepts workspace-relative paths; a rule such as
``Write(/etc/**)`` must see where the file really is), ``~`` against the agent's home
(:func:`bus.rules.paths.agent_home`, never the gateway's). MCP tools ``mcp_<server>_<tool>``
become ``mcp__<server>__<tool>``, named from ``mcp_context`` when Gemini sends it; else the
name says not where the server's name ends, and it is split after the longest server the
policy names that it starts with, or at its first ``_`` after ``mcp_`` as Gemini itself reads
it (:mod:`bus.dialects.mcpnames`). Older Gemini CLIs name them ``<server>__<tool>``, which
becomes ``mcp__<server>__<tool>`` too. Every other field and parameter is kept.

Output, in the fields Gemini CLI reads: ``decision`` (``allow`` / ``deny`` / ``ask``),
``reason``, ``continue``, ``stopReason``, ``systemMessage``, ``suppressOutput`` and an
untagged ``hookSpecificOutput``; Claude Code's ``permissionDecision`` and ``hookEventName``
mean nothing to Gemini and are never sent. Event by event:

* PreToolUse: deny -> ``decision: "deny"`` + ``reason`` (the model gets "Tool execution
  blocked: <reason>"); ask -> ``decision: "ask"`` (interactive sessions show Gemini's
  confirmation; a headless run does not run the tool); allow -> ``decision: "allow"``;
  defer -> no decision. ``updatedInput`` -> ``hookSpecificOutput.tool_input`` with only the
  parameters that changed, under Gemini's names (Gemini merges it over the model's
  arguments; a parameter the tool does not take would fail its validation, so it is left
  out). ``additionalContext`` has no place on BeforeTool and is dropped.
* PostToolUse / PostToolUseFailure: ``decision: "block"`` -> ``decision: "deny"`` (the
  reason replaces the tool's result); ``additionalContext`` is appended to the result.
* UserPromptSubmit: block -> ``decision: "deny"`` (the prompt is discarded);
  ``additionalContext`` is added to the prompt.
* Stop: block -> ``decision: "deny"``: Gemini sends the reason as the next prompt and the
  agent keeps working. Claude Code's Stop ``additionalContext`` continues the turn the same
  way, so alone it becomes such a deny with the context as reason.
* SessionStart: ``additionalContext`` (prefixed to the first prompt) and ``systemMessage``.
* PreCompact, SessionEnd, Notification and the model events: ``systemMessage`` only
  (Gemini ignores decisions there: a PreCompact block cannot stop its compression).
* ``continue: false`` + ``stopReason`` stop the agent loop on the tool and agent events.
"""

from __future__ import annotations

import re
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, partial, yes
from bus.dialects.mcpnames import mcp_names, with_readings
from bus.rules.paths import agent_home, agent_path

GEMINI: Final = "gemini"
#: Gemini CLI's event names -> Claude Code's.
GEMINI_EVENTS: Final[dict[str, str]] = {
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "BeforeAgent": "UserPromptSubmit",
    "AfterAgent": "Stop",
    "PreCompress": "PreCompact",
    "SessionStart": "SessionStart",
    "SessionEnd": "SessionEnd",
    "Notification": "Notification",
}
#: Gemini CLI's built-in tool names -> Claude Code's.
GEMINI_TOOLS: Final[dict[str, str]] = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "replace": "Edit",
    "read_file": "Read",
    "glob": "Glob",
    "grep_search": "Grep",
    "list_directory": "LS",
    "web_fetch": "WebFetch",
    "google_web_search": "WebSearch",
    "write_todos": "TodoWrite",
    "ask_user": "AskUserQuestion",
    "enter_plan_mode": "EnterPlanMode",
    "exit_plan_mode": "ExitPlanMode",
    "invoke_agent": "Task",
}
#: Per Gemini tool: its parameter name -> Claude Code's, where they differ.
RENAMED_PARAMS: Final[dict[str, dict[str, str]]] = {
    "run_shell_command": {"is_background": "run_in_background"},
    "replace": {"allow_multiple": "replace_all"},
    "glob": {"dir_path": "path"},
    "grep_search": {"dir_path": "path", "include_pattern": "glob"},
    "list_directory": {"dir_path": "path"},
}
#: Per Gemini tool: the parameters it takes (a rewrite may only set these; others fail validation).
GEMINI_PARAMS: Final[dict[str, frozenset[str]]] = {
    "run_shell_command": frozenset({"command", "description", "dir_path", "is_background"}),
    "write_file": frozenset({"file_path", "content"}),
    "replace": frozenset({"file_path", "instruction", "old_string", "new_string", "allow_multiple"}),
    "read_file": frozenset({"file_path", "start_line", "end_line"}),
    "glob": frozenset({"pattern", "dir_path", "case_sensitive", "respect_git_ignore", "respect_gemini_ignore"}),
    "list_directory": frozenset({"dir_path", "ignore", "file_filtering_options"}),
    "web_fetch": frozenset({"prompt"}),
    "google_web_search": frozenset({"query"}),
}
_PATH_TOOLS: Final = frozenset({"write_file", "replace", "read_file"})
_NOTIFICATIONS: Final = {"ToolPermission": "permission_prompt"}
_URL: Final = re.compile(r"https?://[^\s<>\"')\]]+")
#: The output fields Gemini reads, per Claude Code event (beyond ``systemMessage`` / ``suppressOutput``).
_FLOW_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop"})
_CONTEXT_EVENTS: Final = frozenset({"PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "SessionStart"})
_MISSING: Final = object()
#: The lines Gemini's shell tool puts after ``Exit Code: N`` at the end of its ``llmContent``.
_AFTER_EXIT: Final = ("Signal: ", "Background PIDs: ", "Process Group PGID: ", "</untrusted_context>")
_EXIT_CODE: Final = re.compile(r"Exit Code: (-?\d+)")


def shell_exit_code(response: dict[str, Any]) -> int | None:
    """The exit code a ``run_shell_command`` result reports in its ``llmContent`` (None: zero or none).

    The tool writes ``Output: ...``, then ``Exit Code: N`` when N is not zero, then a few known
    lines; only those trailing lines are read, so no command's output hides a failure (output
    that prints such lines itself can only read as a failure).
    """
    content = response.get("llmContent")
    if not isinstance(content, str):
        return None
    for line in reversed(content[-4096:].splitlines()):
        if line.startswith(_AFTER_EXIT) or not line:
            continue
        match = _EXIT_CODE.fullmatch(line)
        if match is None:
            return None
        return int(match.group(1)) or None
    return None


def canonical_tool_names(name: str, mcp_context: Any = None) -> tuple[str, ...]:
    """The Claude Code names Gemini's tool ``name`` may have, the likeliest first (an MCP name
    without ``mcp_context`` may have several: :mod:`bus.dialects.mcpnames`)."""
    if name in GEMINI_TOOLS:
        return (GEMINI_TOOLS[name],)
    if name.startswith("mcp_") and not name.startswith("mcp__"):
        context = mcp_context if isinstance(mcp_context, dict) else {}
        server, tool = context.get("server_name"), context.get("tool_name")
        if isinstance(server, str) and isinstance(tool, str) and server and tool:
            return (f"mcp__{server}__{tool}",)
        return mcp_names(name[4:], "_", "first") or (name,)
    if "__" in name and not name.startswith(("_", "mcp__")):  # older Gemini CLIs: <server>__<tool>
        return mcp_names(name, "__", "first") or (name,)
    return (name,)


def canonical_tool_name(name: str, mcp_context: Any = None) -> str:
    """The Claude Code name of Gemini's tool ``name`` (``mcp_<server>_<tool>`` -> ``mcp__server__tool``)."""
    return canonical_tool_names(name, mcp_context)[0]


def canonical_tool_input(
    agent_tool: str, tool_input: dict[str, Any], cwd: Any, home: str | None = None
) -> dict[str, Any]:
    """Gemini tool ``agent_tool``'s arguments under Claude Code's parameter names (a new dict)."""
    renamed = RENAMED_PARAMS.get(agent_tool, {})
    out = {renamed.get(key, key): value for key, value in tool_input.items()}
    path = out.get("file_path")
    if agent_tool in _PATH_TOOLS and isinstance(path, str) and path and isinstance(cwd, str) and cwd:
        out["file_path"] = agent_path(path, cwd, home)
    prompt = out.get("prompt")
    if agent_tool == "web_fetch" and "url" not in out and isinstance(prompt, str) and (url := _URL.search(prompt)):
        out["url"] = url.group(0).rstrip(".,;:")
    return out


def gemini_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Gemini CLI hook input in Claude Code's shape (a new dict; other fields kept)."""
    out = dict(hook_input)
    event = out.get("hook_event_name")
    if isinstance(event, str) and event in GEMINI_EVENTS:
        out["hook_event_name"] = GEMINI_EVENTS[event]
        if GEMINI_EVENTS[event] != event:
            out[AGENT_EVENT_NAME] = event
    tool = out.get("tool_name")
    if isinstance(tool, str):
        out[AGENT_TOOL_NAME] = tool
        with_readings(out, canonical_tool_names(tool, out.get("mcp_context")))
        if isinstance(out.get("tool_input"), dict):
            out["tool_input"] = canonical_tool_input(tool, out["tool_input"], out.get("cwd"), agent_home(out))
    response = out.get("tool_response")
    if event == "AfterTool" and isinstance(response, dict) and response.get("error"):
        error = response["error"]
        out["hook_event_name"] = "PostToolUseFailure"
        message = error.get("message") if isinstance(error, dict) else error
        out.setdefault("error", message if isinstance(message, str) else str(message))
    elif event == "AfterTool" and tool == "run_shell_command" and isinstance(response, dict):
        if (code := shell_exit_code(response)) is not None:
            out["hook_event_name"] = "PostToolUseFailure"
            out.setdefault("error", f"Exit Code: {code}")
    if event == "AfterAgent" and isinstance(out.get("prompt_response"), str):
        out.setdefault("last_assistant_message", out["prompt_response"])
    kind = out.get("notification_type")
    if event == "Notification" and isinstance(kind, str) and kind in _NOTIFICATIONS:
        out["agent_notification_type"] = kind
        out["notification_type"] = _NOTIFICATIONS[kind]
    return out


def gemini_tool_input(updated: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """The part of a rewritten (canonical) tool input Gemini must merge over its arguments.

    Only parameters that differ from what the model sent, under Gemini's names, and only those
    the tool takes when hookbus knows its parameters.
    """
    tool = agent_input.get("tool_name")
    tool = tool if isinstance(tool, str) else ""
    raw = agent_input.get("tool_input")
    home = agent_home(agent_input)
    before = canonical_tool_input(tool, raw, agent_input.get("cwd"), home) if isinstance(raw, dict) else {}
    back = {claude: agent for agent, claude in RENAMED_PARAMS.get(tool, {}).items()}
    known = GEMINI_PARAMS.get(tool)
    changed: dict[str, Any] = {}
    for key, value in updated.items():
        if before.get(key, _MISSING) == value:
            continue
        name = back.get(key, key)
        if known is None or name in known:
            changed[name] = value
    return changed


def gemini_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Gemini CLI reads it (see the module docstring)."""
    out: dict[str, Any] = {}
    if isinstance(output.get("systemMessage"), str):
        out["systemMessage"] = output["systemMessage"]
    if output.get("suppressOutput") is True:
        out["suppressOutput"] = True
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    if event not in _FLOW_EVENTS:
        context = specific.get("additionalContext")
        if event in _CONTEXT_EVENTS and isinstance(context, str) and context:
            out["hookSpecificOutput"] = {"additionalContext": context}
        return out
    if output.get("continue") is False:
        out["continue"] = False
        out["stopReason"] = output.get("stopReason") or output.get("reason") or "Stopped by hookbus policy"
    extra: dict[str, Any] = {}
    if event == "PreToolUse":
        decision = specific.get("permissionDecision")
        if decision is None and output.get("decision") in ("block", "approve"):
            decision = "deny" if output["decision"] == "block" else "allow"
        reason = specific.get("permissionDecisionReason") or output.get("reason")
        if decision == "deny":
            out["decision"], out["reason"] = "deny", reason or "Denied by hookbus policy"
        elif decision == "ask":
            out["decision"], out["reason"] = "ask", reason or "hookbus policy asks for confirmation"
        elif decision == "allow":
            out["decision"] = "allow"
            if reason:
                out["reason"] = reason
        updated = specific.get("updatedInput")
        if decision not in ("deny", "defer") and isinstance(updated, dict):
            rewrite = gemini_tool_input(updated, agent_input)
            if rewrite:
                extra["tool_input"] = rewrite
    else:
        context = specific.get("additionalContext")
        if output.get("decision") == "block":
            out["decision"] = "deny"
            out["reason"] = output.get("reason") or "Blocked by hookbus policy"
        elif event == "Stop" and isinstance(context, str) and context:
            out["decision"], out["reason"] = "deny", context
        elif event in _CONTEXT_EVENTS and isinstance(context, str) and context:
            extra["additionalContext"] = context
    if extra:
        out["hookSpecificOutput"] = extra
    return out


class GeminiCli(Dialect):
    """Gemini CLI's hook format (see the module docstring)."""

    name = GEMINI
    title = "Gemini CLI"
    capabilities = {
        "deny": yes('`decision: "deny"` + `reason`; the model reads "Tool execution blocked: <reason>"'),
        "ask": partial(
            '`decision: "ask"`: an interactive session shows Gemini\'s confirmation; a headless run '
            "(`gemini -p`) does not run the tool and ends the turn"
        ),
        "allow": partial('`decision: "allow"`, but Gemini\'s own approval mode and policy engine still apply'),
        "rewrite_input": partial(
            "`hookSpecificOutput.tool_input` with the changed parameters, under Gemini's names, merged over "
            "the model's arguments: a parameter can be changed or added, not removed"
        ),
        "stop_block": yes('AfterAgent `decision: "deny"`: the reason is sent as the next prompt'),
        "add_context": partial(
            "SessionStart, UserPromptSubmit (BeforeAgent) and PostToolUse (AfterTool); "
            "PreToolUse context is dropped (BeforeTool has no context field)"
        ),
        "fail_closed": yes(
            "`hookbus hook --fail-closed` exits 2 with the reason on stderr and nothing on stdout: "
            "BeforeTool, BeforeAgent and AfterAgent block"
        ),
    }
    events = GEMINI_EVENTS
    tools = GEMINI_TOOLS
    transport = "command"
    verified = "real CLI: @google/gemini-cli 0.61.0, headless, in the test suite"

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return gemini_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return gemini_output(event, output, agent_input)

    def canonical_tool(self, name: str) -> str:
        return canonical_tool_name(name)


__all__ = [
    "GEMINI",
    "GEMINI_EVENTS",
    "GEMINI_PARAMS",
    "GEMINI_TOOLS",
    "RENAMED_PARAMS",
    "GeminiCli",
    "canonical_tool_input",
    "canonical_tool_name",
    "gemini_input",
    "gemini_output",
    "gemini_tool_input",
]
