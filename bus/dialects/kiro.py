"""Kiro's dialect (``kiro``, AWS's Kiro CLI; command hooks through the shim).

Built from Kiro's documentation only (its CLI hooks pages, and the Amazon Q Developer CLI's
``docs/hooks.md``, the same contract): Kiro is not on npm and talks only to AWS's backend,
so no real client runs in the test suite.

Input. Kiro sends ``hook_event_name``, ``cwd`` and, per event, ``tool_name`` /
``tool_input`` / ``tool_response`` or ``prompt``; every field is kept. Event names, in the
agent-config form (camelCase) or the standalone-hook-file form (PascalCase), become Claude
Code's, the original kept as ``agent_event_name``: ``agentSpawn`` / ``SessionStart`` ->
SessionStart, ``userPromptSubmit`` -> UserPromptSubmit, ``preToolUse`` -> PreToolUse,
``postToolUse`` -> PostToolUse, ``stop`` -> Stop (observe only); Kiro's task and file
triggers (``PreTaskExec``, ``PostFileSave``, ...) pass through under their own names. Kiro's
documented input carries no session id: ``session_id`` is taken from ``session_id``,
``conversation_id`` or ``chat_session_id`` when Kiro sends one, else ``kiro:<cwd>`` (one
session per working folder, so the log still groups the calls).

Tools become Claude Code's, the original kept as ``agent_tool_name``: ``execute_bash`` /
``shell`` -> Bash; ``fs_read`` / ``read`` -> Read (``path`` -> ``file_path``, or the first of
its ``operations``); ``fs_write`` / ``write`` -> Write for ``command: create``
(``file_text`` -> ``content``) and Edit otherwise (``old_str`` / ``new_str`` ->
``old_string`` / ``new_string``); MCP tools ``@server/tool`` -> ``mcp__server__tool``;
``use_aws`` and the rest keep their names. Relative paths are made absolute against ``cwd``.

Output. Kiro reads no JSON decision: exit 2 blocks (PreToolUse; the standalone hook files
also UserPromptSubmit), with stderr sent to the model; on SessionStart and
UserPromptSubmit, stdout is added to the context. So the answer is the shim's exit-code form
(:func:`bus.dialects.windsurf.command_answer`), which ``hookbus hook --agent kiro`` turns into
that exit code, stderr and stdout:

* PreToolUse: deny -> exit 2 with the reason; ask -> exit 2 too (Kiro cannot ask from a
  hook; the reason says so); ``continue: false`` -> exit 2; allow or no decision -> exit 0.
  ``updatedInput`` is dropped.
* UserPromptSubmit: block -> exit 2 (an agent-config hook cannot block a prompt, so there
  it is only a warning); ``additionalContext`` -> stdout.
* SessionStart: ``additionalContext`` -> stdout.
* PostToolUse, Stop and the rest: ``{}`` (they cannot block; a Stop block is dropped).
"""

from __future__ import annotations

from typing import Any, Final

from bus.dialects.base import AGENT_EVENT_NAME, AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.windsurf import command_answer, pre_tool_block, prompt_block
from bus.rules.paths import agent_home, agent_path

KIRO: Final = "kiro"
#: Kiro's event names (agent-config camelCase and hook-file PascalCase) -> Claude Code's.
KIRO_EVENTS: Final[dict[str, str]] = {
    "agentSpawn": "SessionStart",
    "userPromptSubmit": "UserPromptSubmit",
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "stop": "Stop",
    "SessionStart": "SessionStart",
    "UserPromptSubmit": "UserPromptSubmit",
    "PreToolUse": "PreToolUse",
    "PostToolUse": "PostToolUse",
    "Stop": "Stop",
}
#: Kiro's built-in tool names -> Claude Code's (``fs_write`` is Write or Edit by its ``command``).
KIRO_TOOLS: Final[dict[str, str]] = {
    "execute_bash": "Bash",
    "shell": "Bash",
    "fs_read": "Read",
    "read": "Read",
    "fs_write": "Edit",
    "write": "Edit",
}
_CONTEXT_EVENTS: Final = frozenset({"SessionStart", "UserPromptSubmit"})


def canonical_tool_name(name: str, tool_input: Any = None) -> str:
    """The Claude Code name of Kiro's tool ``name`` (``@server/tool`` -> ``mcp__server__tool``)."""
    if name in ("fs_write", "write") and isinstance(tool_input, dict) and tool_input.get("command") == "create":
        return "Write"
    if name in KIRO_TOOLS:
        return KIRO_TOOLS[name]
    server, slash, tool = name[1:].partition("/")
    if name.startswith("@") and slash and server and tool:
        return f"mcp__{server}__{tool}"
    return name


def _absolute(path: Any, cwd: Any, home: str | None = None) -> Any:
    if isinstance(path, str) and path and isinstance(cwd, str) and cwd:
        return agent_path(path, cwd, home)
    return path


def canonical_tool_input(
    claude_tool: str, tool_input: dict[str, Any], cwd: Any, home: str | None = None
) -> dict[str, Any]:
    """Kiro's tool arguments under Claude Code's parameter names (a new dict; the others kept)."""
    out = dict(tool_input)
    if claude_tool in ("Read", "Write", "Edit"):
        path = out.get("path")
        operations = out.get("operations")
        if path is None and isinstance(operations, list) and operations and isinstance(operations[0], dict):
            path = operations[0].get("path")
        if "file_path" not in out and path is not None:
            out["file_path"] = _absolute(path, cwd, home)
    if claude_tool == "Write" and "file_text" in out:
        out.setdefault("content", out["file_text"])
    if claude_tool == "Edit":
        if "old_str" in out:
            out.setdefault("old_string", out["old_str"])
        if "new_str" in out:
            out.setdefault("new_string", out["new_str"])
    return out


def kiro_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Kiro hook input in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    event = out.get("hook_event_name")
    if isinstance(event, str) and event in KIRO_EVENTS:
        out["hook_event_name"] = KIRO_EVENTS[event]
        if KIRO_EVENTS[event] != event:
            out[AGENT_EVENT_NAME] = event
    if "session_id" not in out:
        for key in ("conversation_id", "chat_session_id"):
            if isinstance(out.get(key), str) and out[key]:
                out["session_id"] = out[key]
                break
        else:
            out["session_id"] = f"kiro:{out.get('cwd') or '?'}"
    tool = out.get("tool_name")
    if isinstance(tool, str):
        raw = out.get("tool_input")
        out[AGENT_TOOL_NAME] = tool
        out["tool_name"] = canonical_tool_name(tool, raw)
        if isinstance(raw, dict):
            out["tool_input"] = canonical_tool_input(out["tool_name"], raw, out.get("cwd"), agent_home(out))
    if out.get("hook_event_name") == "Stop":
        out.setdefault("stop_hook_active", False)
    return out


def kiro_output(event: str, output: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` in the shim's exit-code form (see the module docstring)."""
    if event == "PreToolUse":
        reason = pre_tool_block(output, "Kiro")
        return command_answer(2, reason) if reason is not None else {}
    if event == "UserPromptSubmit" and (reason := prompt_block(output)) is not None:
        return command_answer(2, reason)
    specific = output.get("hookSpecificOutput")
    context = specific.get("additionalContext") if isinstance(specific, dict) else None
    if event in _CONTEXT_EVENTS and isinstance(context, str) and context:
        return command_answer(stdout=context)
    return {}


class Kiro(Dialect):
    """Kiro CLI's hook format (see the module docstring)."""

    name = KIRO
    title = "Kiro"
    capabilities = {
        "deny": yes("exit 2 with the reason on stderr (the shim's exit-code form), which Kiro sends to the model"),
        "ask": no("Kiro has no confirmation a hook can ask for: an ask blocks like a deny (exit 2)"),
        "allow": no("exit 0 only: Kiro's own tool permissions still decide"),
        "rewrite_input": no("Kiro reads no JSON from hooks: the rewrite is dropped"),
        "stop_block": no("Kiro's stop hook cannot block: the block is dropped"),
        "add_context": partial("SessionStart (agentSpawn) and UserPromptSubmit, as the hook's stdout"),
        "fail_closed": partial(
            "`hookbus hook --fail-closed` exits 2 with the reason on stderr: PreToolUse blocks "
            "(and UserPromptSubmit in standalone hook files); other events only warn"
        ),
    }
    events = KIRO_EVENTS
    tools = KIRO_TOOLS
    transport = "command"
    verified = (
        "documentation only: Kiro's CLI hooks pages (kiro.dev/docs/cli/hooks, /cli/v3/hooks) and "
        "aws/amazon-q-developer-cli docs/hooks.md"
    )

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return kiro_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return kiro_output(event, output)

    def canonical_tool(self, name: str) -> str:
        return canonical_tool_name(name)


__all__ = [
    "KIRO",
    "KIRO_EVENTS",
    "KIRO_TOOLS",
    "Kiro",
    "canonical_tool_input",
    "canonical_tool_name",
    "kiro_input",
    "kiro_output",
]
