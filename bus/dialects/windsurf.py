"""Windsurf (Cascade)'s dialect (``windsurf``; command hooks through the shim).

Built from Windsurf's Cascade Hooks documentation only: Windsurf is an IDE with no headless
CLI and no model base URL, so no real client runs in the test suite.

Input. Every hook gets ``agent_action_name`` (the event), ``trajectory_id`` (the
conversation: it becomes ``session_id``), ``execution_id`` (one agent turn), an ISO 8601
``timestamp`` and an event-specific ``tool_info`` object; all of them are kept. The event
becomes Claude Code's ``hook_event_name`` and the original is kept as ``agent_event_name``:

* ``pre_run_command`` / ``post_run_command`` -> PreToolUse / PostToolUse on Bash:
  ``tool_info.command_line`` -> ``tool_input.command``, ``tool_info.cwd`` -> ``cwd``.
* ``pre_read_code`` / ``post_read_code`` -> PreToolUse / PostToolUse on Read:
  ``tool_info.file_path`` -> ``tool_input.file_path`` (it may be a folder read recursively).
* ``pre_write_code`` / ``post_write_code`` -> PreToolUse / PostToolUse on Edit:
  ``file_path`` and ``edits`` as sent; with exactly one edit also its ``old_string`` and
  ``new_string`` (Claude Code's Edit input).
* ``pre_mcp_tool_use`` / ``post_mcp_tool_use`` -> PreToolUse / PostToolUse on
  ``mcp__<mcp_server_name>__<mcp_tool_name>`` with ``mcp_tool_arguments`` as ``tool_input``
  (``mcp_result`` -> ``tool_response``).
* ``pre_user_prompt`` -> UserPromptSubmit (``tool_info.user_prompt`` -> ``prompt``).
* ``post_cascade_response`` (and ``post_cascade_response_with_transcript``) -> Stop
  (``tool_info.response`` -> ``last_assistant_message``): recorded, never blocking.
* ``post_setup_worktree`` has no Claude Code equivalent and passes through under its name.

The agent's tool name is kept in ``agent_tool_name``: ``run_command``, ``read_code``,
``write_code`` or the MCP tool's own name.

Output. Windsurf reads no JSON at all: only the exit code, and stderr, which Cascade shows
to the agent. So the answer is the shim's exit-code form (:func:`command_answer`):
``{"exit_code": 2, "stderr": REASON}`` makes ``hookbus hook --agent windsurf`` write the
reason on stderr and exit 2, which blocks a pre-hook; anything else is ``{}`` (exit 0,
nothing printed). Event by event:

* PreToolUse: deny -> exit 2 with the reason. ask -> exit 2 too, the reason saying that the
  policy asks for a confirmation Windsurf cannot show (never a silent allow). allow and no
  decision -> exit 0 (Windsurf then applies its own settings). ``continue: false`` -> exit 2
  with the stop reason. ``updatedInput`` and ``additionalContext`` have no place and are dropped.
* UserPromptSubmit: ``decision: "block"`` or ``continue: false`` -> exit 2 (the prompt is not
  sent); context is dropped.
* Every other event: ``{}``; post-hooks cannot block, and a Stop block is dropped (Cascade
  has no way to keep working).
"""

from __future__ import annotations

from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes

WINDSURF: Final = "windsurf"
#: The shim's exit-code form: the field holding the exit code, and the text for stderr / stdout.
EXIT_CODE: Final = "exit_code"
STDERR: Final = "stderr"
STDOUT: Final = "stdout"
#: Windsurf's hook events -> Claude Code's.
WINDSURF_EVENTS: Final[dict[str, str]] = {
    "pre_run_command": "PreToolUse",
    "post_run_command": "PostToolUse",
    "pre_read_code": "PreToolUse",
    "post_read_code": "PostToolUse",
    "pre_write_code": "PreToolUse",
    "post_write_code": "PostToolUse",
    "pre_mcp_tool_use": "PreToolUse",
    "post_mcp_tool_use": "PostToolUse",
    "pre_user_prompt": "UserPromptSubmit",
    "post_cascade_response": "Stop",
    "post_cascade_response_with_transcript": "Stop",
}
#: Windsurf's actions (the event name without ``pre_`` / ``post_``) -> Claude Code's tool.
WINDSURF_TOOLS: Final[dict[str, str]] = {"run_command": "Bash", "read_code": "Read", "write_code": "Edit"}


def command_answer(exit_code: int = 0, stderr: str = "", stdout: str = "") -> dict[str, Any]:
    """An answer in the shim's exit-code form (``{}`` for a plain exit 0 with nothing printed)."""
    out: dict[str, Any] = {}
    if exit_code:
        out[EXIT_CODE] = exit_code
    if stderr:
        out[STDERR] = stderr
    if stdout:
        out[STDOUT] = stdout
    return out


def pre_tool_block(output: dict[str, Any], agent: str) -> str | None:
    """The reason to block a PreToolUse with, when the canonical ``output`` denies, asks or stops."""
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision = specific.get("permissionDecision")
    if decision is None and output.get("decision") == "block":
        decision = "deny"
    reason = specific.get("permissionDecisionReason") or output.get("reason")
    if decision == "deny":
        return str(reason or "Denied by hookbus policy")
    if decision == "ask":
        why = f": {reason}" if reason else ""
        return f"hookbus policy asks for a confirmation, which {agent} cannot show, so the tool is blocked{why}"
    if output.get("continue") is False:
        return str(output.get("stopReason") or reason or "Stopped by hookbus policy")
    return None


def prompt_block(output: dict[str, Any]) -> str | None:
    """The reason to refuse a prompt with, when the canonical UserPromptSubmit ``output`` blocks."""
    if output.get("decision") == "block":
        return str(output.get("reason") or "Blocked by hookbus policy")
    if output.get("continue") is False:
        return str(output.get("stopReason") or output.get("reason") or "Stopped by hookbus policy")
    return None


def windsurf_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Windsurf hook input in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    action = out.get("agent_action_name")
    if not isinstance(action, str):
        raise ValueError("agent_action_name is missing")
    out[AGENT_EVENT_NAME] = action
    out["hook_event_name"] = WINDSURF_EVENTS.get(action, action)
    if "session_id" not in out and isinstance(out.get("trajectory_id"), str):
        out["session_id"] = out["trajectory_id"]
    info = out.get("tool_info")
    info = info if isinstance(info, dict) else {}
    if isinstance(info.get("cwd"), str):
        out.setdefault("cwd", info["cwd"])
    _, _, kind = action.partition("_")
    if kind == "run_command":
        out["tool_input"] = {"command": info.get("command_line", "")}
    elif kind == "read_code":
        out["tool_input"] = {"file_path": info.get("file_path", "")}
    elif kind == "write_code":
        edits = info.get("edits")
        tool_input: dict[str, Any] = {"file_path": info.get("file_path", ""), "edits": edits}
        if isinstance(edits, list) and len(edits) == 1 and isinstance(edits[0], dict):
            tool_input["old_string"] = edits[0].get("old_string", "")
            tool_input["new_string"] = edits[0].get("new_string", "")
        out["tool_input"] = tool_input
    elif kind == "mcp_tool_use":
        server, tool = info.get("mcp_server_name"), info.get("mcp_tool_name")
        arguments = info.get("mcp_tool_arguments")
        out["tool_input"] = arguments if isinstance(arguments, dict) else {}
        out[AGENT_TOOL_NAME] = str(tool or "")
        out["tool_name"] = f"mcp__{server}__{tool}"
        if "mcp_result" in info:
            out["tool_response"] = info["mcp_result"]
        return out
    elif action == "pre_user_prompt":
        out["prompt"] = info.get("user_prompt", "")
        return out
    elif out["hook_event_name"] == "Stop":
        out.setdefault("stop_hook_active", False)
        if isinstance(info.get("response"), str):
            out["last_assistant_message"] = info["response"]
        return out
    if kind in WINDSURF_TOOLS:
        out[AGENT_TOOL_NAME] = kind
        out["tool_name"] = WINDSURF_TOOLS[kind]
    return out


def windsurf_output(event: str, output: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` in the shim's exit-code form (see the module docstring)."""
    if event == "PreToolUse":
        reason = pre_tool_block(output, "Windsurf")
    elif event == "UserPromptSubmit":
        reason = prompt_block(output)
    else:
        reason = None
    return command_answer(2, reason) if reason is not None else {}


class Windsurf(Dialect):
    """Windsurf (Cascade)'s hook format (see the module docstring)."""

    name = WINDSURF
    title = "Windsurf (Cascade)"
    capabilities = {
        "deny": yes("exit 2 with the reason on stderr (the shim's exit-code form); Cascade shows it to the agent"),
        "ask": no("Windsurf has no confirmation a hook can ask for: an ask blocks like a deny (exit 2)"),
        "allow": no("exit 0 only: Windsurf's own settings still decide"),
        "rewrite_input": no("Windsurf reads no hook output but the exit code: the rewrite is dropped"),
        "stop_block": no("post_cascade_response is observe-only: the block is dropped"),
        "add_context": no("Windsurf reads no hook output but the exit code: the context is dropped"),
        "fail_closed": partial(
            "`hookbus hook --fail-closed` exits 2 with the reason on stderr: pre-hooks and "
            "pre_user_prompt block, post-hooks cannot"
        ),
    }
    events = WINDSURF_EVENTS
    tools = WINDSURF_TOOLS
    transport = "command"
    verified = "documentation only: Windsurf's Cascade Hooks page (docs.windsurf.com/windsurf/cascade/hooks)"

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return windsurf_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return windsurf_output(event, output)


__all__ = [
    "EXIT_CODE",
    "STDERR",
    "STDOUT",
    "WINDSURF",
    "WINDSURF_EVENTS",
    "WINDSURF_TOOLS",
    "Windsurf",
    "command_answer",
    "pre_tool_block",
    "prompt_block",
    "windsurf_input",
    "windsurf_output",
]
