"""Qwen Code's dialect (``qwen``, the ``@qwen-code/qwen-code`` CLI).

Qwen Code forked Gemini CLI and rebuilt its hooks on Claude Code's contract: the same event
names, snake_case input fields and output fields. It posts to the gateway with its own
``type: "http"`` hooks (``?dialect=qwen``). What differs, and how it is mapped:

Input (every field kept as sent; only these are changed or added):

* ``tool_name``: Qwen's runtime ids become Claude Code's tools (:data:`QWEN_TOOLS`:
  ``run_shell_command`` -> ``Bash``, ``write_file`` -> ``Write``, ``edit`` / ``replace`` ->
  ``Edit``, ``read_file`` -> ``Read``, ``grep_search`` -> ``Grep``, ``glob`` -> ``Glob``,
  ``list_directory`` -> ``LS``, ``web_fetch`` -> ``WebFetch``, ...); MCP tools are already
  ``mcp__server__tool``. The agent's own name is kept in ``agent_tool_name``. Tool inputs
  already use Claude Code's names (``command``, ``file_path``, ``content``, ``old_string``,
  ``new_string``, ``path``, ``pattern``, ``url``); the shell's ``is_background`` is copied to
  ``run_in_background`` and an older ``absolute_path`` to ``file_path``. ``PostToolBatch``'s
  ``tool_calls`` get the same treatment, call by call.
* ``permission_mode``: ``default`` / ``plan`` / ``auto`` stay, ``auto_edit`` ->
  ``acceptEdits``, ``yolo`` -> ``bypassPermissions`` (the original in
  ``qwen_permission_mode``).
* Events: Claude Code's names, but ``TodoCreated`` / ``TodoCompleted`` -> ``TaskCreated`` /
  ``TaskCompleted`` (``todo_id`` also as ``task_id``, ``todo_content`` as ``task_subject``;
  the agent's name in ``agent_event_name``). ``SessionDelete`` has no Claude Code
  counterpart and passes through under its own name. ``timestamp`` (ISO 8601) is kept.

Output, in the fields Qwen's ``createHookOutput`` reads (``continue``, ``stopReason``,
``suppressOutput``, ``systemMessage``, ``decision``, ``reason``, ``hookSpecificOutput``);
everything else is dropped, and ``hookSpecificOutput.hookEventName`` is the agent's name:

* PreToolUse: ``permissionDecision`` allow / deny / ask with its reason, and
  ``additionalContext`` (sent, though Qwen 0.24.4 does not pass it to the model). Qwen runs
  PreToolUse after its own approval step, so an allow lets the call go on but skips no
  prompt. ``ask`` shows Qwen's confirmation in its terminal UI; headless (``-p``) and in
  background subagents Qwen itself turns it into a deny. ``defer`` is dropped (Qwen's own
  permission flow decides). ``updatedInput`` is not applied by Qwen at PreToolUse, so a
  rewrite becomes a **deny** whose reason gives the model the rewritten input to call the
  tool with instead (never the original call).
* PostToolUse / PostToolUseFailure: ``additionalContext``. Qwen ignores PostToolUse's
  ``decision: block``, so its reason is added to the context the model sees with the result.
  ``updatedToolOutput`` / ``updatedMCPToolOutput`` have no place in Qwen and are dropped.
* UserPromptSubmit, UserPromptExpansion, PostToolBatch: ``decision`` block / deny with
  ``reason``, ``additionalContext``.
* Stop / SubagentStop: ``decision: block`` + ``reason`` keeps the agent working (the reason
  is the next user message). Claude Code's ``additionalContext`` there continues the turn
  too, so it becomes a block with the context as reason. ``continue: false`` is dropped:
  Qwen reads it on Stop as "keep working", the opposite of Claude Code's "stop now".
* PermissionRequest: ``hookSpecificOutput.decision`` (``behavior``, ``updatedInput``,
  ``updatedPermissions``, ``message``, ``interrupt``) as Claude Code's.
* TaskCreated / TaskCompleted (Qwen's todo events): ``decision: block`` + ``reason``; a
  ``continue: false`` also becomes a block (Qwen has no other way to refuse the todo).
* SessionStart, SubagentStart, Notification, PreCompact: ``additionalContext`` only.
* Other events (SessionEnd, PostCompact, StopFailure, MessageDisplay, PermissionDenied,
  InstructionsLoaded, ...): Qwen ignores their output; only ``systemMessage`` and
  ``suppressOutput`` are passed.
"""

from __future__ import annotations

import json
from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes

QWEN: Final = "qwen"
#: Qwen Code's runtime tool ids -> Claude Code's tool names (others pass through unchanged).
QWEN_TOOLS: Final[dict[str, str]] = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "edit": "Edit",
    "replace": "Edit",
    "read_file": "Read",
    "grep_search": "Grep",
    "search_file_content": "Grep",
    "glob": "Glob",
    "list_directory": "LS",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
    "agent": "Agent",
    "task": "Agent",
    "todo_write": "TodoWrite",
    "notebook_edit": "NotebookEdit",
    "skill": "Skill",
    "exit_plan_mode": "ExitPlanMode",
    "enter_plan_mode": "EnterPlanMode",
    "ask_user_question": "AskUserQuestion",
    "task_create": "TaskCreate",
    "task_update": "TaskUpdate",
    "task_list": "TaskList",
    "task_stop": "TaskStop",
    "monitor": "Monitor",
    "lsp": "LSP",
    "cron_create": "CronCreate",
    "cron_list": "CronList",
    "cron_delete": "CronDelete",
    "enter_worktree": "EnterWorktree",
    "exit_worktree": "ExitWorktree",
    "tool_search": "ToolSearch",
    "send_message": "SendMessage",
    "team_create": "TeamCreate",
    "team_delete": "TeamDelete",
}
#: Qwen Code's event names that differ from Claude Code's.
QWEN_EVENTS: Final[dict[str, str]] = {"TodoCreated": "TaskCreated", "TodoCompleted": "TaskCompleted"}
#: Qwen Code's approval modes -> Claude Code's permission modes.
QWEN_MODES: Final[dict[str, str]] = {
    "default": "default",
    "plan": "plan",
    "auto": "auto",
    "auto_edit": "acceptEdits",
    "yolo": "bypassPermissions",
}
#: The top-level fields Qwen Code reads on every event.
_UNIVERSAL: Final = ("continue", "stopReason", "suppressOutput", "systemMessage")
_CONTEXT_ONLY: Final = frozenset({"SessionStart", "SubagentStart", "Notification", "PreCompact", "PostToolUseFailure"})
_DECIDING: Final = frozenset({"UserPromptSubmit", "UserPromptExpansion", "PostToolBatch"})
_STOPS: Final = frozenset({"Stop", "SubagentStop"})
_TODOS: Final = frozenset({"TaskCreated", "TaskCompleted"})
_PERMISSION_FIELDS: Final = ("behavior", "updatedInput", "updatedPermissions", "message", "interrupt")


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """One tool call (``tool_name`` + ``tool_input``) in Claude Code's names (a new dict)."""
    out = dict(call)
    name = out.get("tool_name")
    if isinstance(name, str):
        out[AGENT_TOOL_NAME] = name
        out["tool_name"] = QWEN_TOOLS.get(name, name)
    tool_input = out.get("tool_input")
    if isinstance(tool_input, dict):
        tool_input = dict(tool_input)
        if "is_background" in tool_input:
            tool_input.setdefault("run_in_background", tool_input["is_background"])
        if isinstance(tool_input.get("absolute_path"), str):
            tool_input.setdefault("file_path", tool_input["absolute_path"])
        out["tool_input"] = tool_input
    return out


def qwen_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Qwen Code hook input in Claude Code's shape (a new dict; every field kept)."""
    out = _tool_call(hook_input)
    event = out.get("hook_event_name")
    if isinstance(event, str) and event in QWEN_EVENTS:
        out[AGENT_EVENT_NAME] = event
        out["hook_event_name"] = QWEN_EVENTS[event]
        if "todo_id" in out:
            out.setdefault("task_id", out["todo_id"])
        if "todo_content" in out:
            out.setdefault("task_subject", out["todo_content"])
    mode = out.get("permission_mode")
    if isinstance(mode, str) and QWEN_MODES.get(mode, mode) != mode:
        out["qwen_permission_mode"] = mode
        out["permission_mode"] = QWEN_MODES[mode]
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_tool_call(c) if isinstance(c, dict) else c for c in calls]
    return out


def rewrite_refusal(updated_input: Any, reason: str | None) -> str:
    """The deny reason that stands in for an input rewrite Qwen Code cannot apply."""
    because = f" ({reason})" if reason else ""
    wanted = json.dumps(updated_input, ensure_ascii=False, sort_keys=True)
    return (
        f"hookbus policy rewrote this tool call{because}, and Qwen Code cannot run a rewritten "
        f"call, so it was not run; call the tool again with this input instead: {wanted}"
    )


def _pre_tool_use(specific: dict[str, Any], fields: dict[str, Any]) -> None:
    decision = specific.get("permissionDecision")
    reason = specific.get("permissionDecisionReason")
    if specific.get("updatedInput") is not None and decision in (None, "allow", "ask"):
        fields["permissionDecision"] = "deny"
        fields["permissionDecisionReason"] = rewrite_refusal(specific["updatedInput"], reason)
    elif decision in ("allow", "deny", "ask"):
        fields["permissionDecision"] = decision
        if isinstance(reason, str):
            fields["permissionDecisionReason"] = reason
        elif decision == "deny":
            fields["permissionDecisionReason"] = "Denied by hookbus policy"
    if isinstance(specific.get("additionalContext"), str):
        fields["additionalContext"] = specific["additionalContext"]


def qwen_output(event: str, output: dict[str, Any], agent_event: str | None = None) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Qwen Code reads it (see the module docstring).

    ``agent_event`` is the event's name as Qwen sent it (default: ``event``).
    """
    out: dict[str, Any] = {key: output[key] for key in _UNIVERSAL if output.get(key) is not None}
    decision, reason = output.get("decision"), output.get("reason")
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext") if isinstance(specific.get("additionalContext"), str) else None
    fields: dict[str, Any] = {}
    if event == "PreToolUse":
        _pre_tool_use(specific, fields)
        if decision in ("approve", "block") and "permissionDecision" not in fields:
            out["decision"] = decision
            if isinstance(reason, str):
                out["reason"] = reason
    elif event == "PostToolUse":
        if decision == "block":
            told = reason if isinstance(reason, str) and reason else "hookbus policy flagged this tool result"
            context = f"{told}\n\n{context}" if context else told
        if context is not None:
            fields["additionalContext"] = context
    elif event in _DECIDING:
        if decision in ("block", "deny"):
            out["decision"] = "block"
            out["reason"] = reason if isinstance(reason, str) else "Blocked by hookbus policy"
        if context is not None:
            fields["additionalContext"] = context
    elif event in _STOPS:
        out.pop("continue", None)
        out.pop("stopReason", None)
        if decision == "block":
            out["decision"] = "block"
            out["reason"] = reason if isinstance(reason, str) and reason else (context or "Keep working")
        elif context:
            out["decision"] = "block"
            out["reason"] = context
    elif event == "PermissionRequest":
        request = specific.get("decision")
        if isinstance(request, dict):
            fields["decision"] = {key: request[key] for key in _PERMISSION_FIELDS if key in request}
    elif event in _TODOS:
        stopped = out.pop("continue", None) is False
        stop_reason = out.pop("stopReason", None)
        if decision == "block" or stopped:
            out["decision"] = "block"
            out["reason"] = reason if isinstance(reason, str) else (stop_reason or "Blocked by hookbus policy")
    elif event in _CONTEXT_ONLY:
        if context is not None:
            fields["additionalContext"] = context
    else:
        out = {key: out[key] for key in ("systemMessage", "suppressOutput") if key in out}
    if fields:
        out["hookSpecificOutput"] = {"hookEventName": agent_event or event, **fields}
    return out


class QwenCode(Dialect):
    """Qwen Code's hook format (see the module docstring)."""

    name = QWEN
    title = "Qwen Code"
    transport = "http"
    verified = "real CLI: @qwen-code/qwen-code 0.24.4, headless, in the test suite"
    events = QWEN_EVENTS
    tools = QWEN_TOOLS
    capabilities = {
        "deny": yes("`permissionDecision: deny`; the model gets the reason as the tool's error"),
        "ask": partial(
            "Qwen's own confirmation in its terminal UI; headless (`-p`) and background "
            "subagents turn `ask` into a deny with the reason"
        ),
        "allow": partial(
            "Qwen asks for approval (headless: refuses) before PreToolUse runs, so a PreToolUse allow "
            "skips nothing; a PermissionRequest allow (`behavior: allow`) answers Qwen's approval dialog"
        ),
        "rewrite_input": no(
            "Qwen ignores `updatedInput` at PreToolUse: a rewrite is sent as a deny whose "
            "reason gives the model the rewritten input to call the tool with"
        ),
        "stop_block": yes("`decision: block` on Stop; the reason is the next user message"),
        "add_context": partial(
            "SessionStart, UserPromptSubmit, PostToolUse (appended to the tool result), PostToolUseFailure, "
            "SubagentStart; Qwen drops PreToolUse context; Stop context becomes a block with it as reason"
        ),
        "fail_closed": partial(
            "an http hook fails open (Qwen runs the tool when the gateway cannot answer); "
            "`hookbus install qwen --fail-closed` installs the shim, which exits 2"
        ),
    }

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return qwen_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        agent_event = agent_input.get("hook_event_name")
        return qwen_output(event, output, agent_event if isinstance(agent_event, str) else None)


__all__ = [
    "QWEN",
    "QWEN_EVENTS",
    "QWEN_MODES",
    "QWEN_TOOLS",
    "QwenCode",
    "qwen_input",
    "qwen_output",
    "rewrite_refusal",
]
