"""Factory Droid's dialect (``droid``, the ``droid`` CLI; command hooks through ``hookbus hook``).

Droid copied Claude Code's hooks: the same event names (PreToolUse, PostToolUse, Notification,
UserPromptSubmit, Stop, SubagentStop, PreCompact, SessionStart, SessionEnd), snake_case input
fields and Claude Code's output fields. It runs command hooks only, so the shim posts to the
gateway (``?dialect=droid``). What differs, and how it is mapped:

Input (every field kept as sent; only these are changed or added):

* ``tool_name``: Droid's tools become Claude Code's (:data:`DROID_TOOLS`: ``Execute`` ->
  ``Bash``, ``Create`` -> ``Write``, ``ApplyPatch`` -> ``Edit`` or ``Write``, ``FetchUrl`` ->
  ``WebFetch``, ``Task`` -> ``Agent``, ``ExitSpecMode`` -> ``ExitPlanMode``; ``Read``,
  ``Edit``, ``LS``, ``Grep``, ``Glob``, ``WebSearch``, ``TodoWrite``, ``Skill`` keep their
  names, and so do MCP tools, ``mcp__server__tool`` as in Claude Code). The agent's own name is
  kept in ``agent_tool_name``.
* ``tool_input``: Droid's field names become Claude Code's, tool by tool (:data:`DROID_FIELDS`):
  Edit's ``old_str`` / ``new_str`` / ``change_all`` -> ``old_string`` / ``new_string`` /
  ``replace_all``, LS's ``directory_path`` -> ``path``, Grep's ``glob_pattern`` -> ``glob``;
  Execute's ``timeout`` (seconds) becomes Bash's (milliseconds); Glob's ``patterns`` (a string
  or a list) is kept and its first pattern is also ``pattern``; an ApplyPatch patch is read as
  Codex's ``apply_patch`` (its files as ``file_path`` / ``file_paths``). Everything else
  (Execute's ``summary``, ``riskLevel``, ``riskLevelReason``) is kept.
* ``permission_mode``: Droid's autonomy levels become Claude Code's modes (``off`` ->
  ``default``, ``spec`` -> ``plan``, ``auto-low`` -> ``acceptEdits``, ``auto-medium`` /
  ``auto-high`` -> ``auto``), the original kept in ``droid_permission_mode``.

Output, in the fields Droid reads; everything else is dropped. Event by event:

* PreToolUse: ``permissionDecision`` ``deny`` (with a reason; Droid gives the model
  ``Error: <reason>`` as the tool result) or ``allow`` (which also skips Droid's own autonomy
  gate: the call runs even above the ``--auto`` level). ``ask`` -> a **deny** whose reason
  says so: ``droid exec`` runs the tool on ``ask``. Claude Code's legacy ``decision: block`` /
  ``approve``, which Droid ignores here, become that deny / allow. A rewrite -> ``allow`` +
  ``updatedInput`` in Droid's field names (a rewrite with ``ask`` is a deny). ``additionalContext``
  is dropped (Droid does not pass it on). ``continue: false`` + ``stopReason`` (ends the run
  before the tool) is kept.
* PostToolUse: ``additionalContext`` (the model reads it after the result). Droid ignores
  ``decision: block`` here, so its reason is added to that context.
* UserPromptSubmit: ``decision: block`` + ``reason``, ``additionalContext`` (interactive
  sessions only: ``droid exec`` does not send this event).
* Stop / SubagentStop: ``decision: block`` + ``reason`` keeps the agent working (the reason is
  the next user message); ``additionalContext`` without a block becomes that block, as it
  continues Claude Code's turn. ``continue`` is not sent.
* SessionStart: ``additionalContext``.
* Every event also takes ``systemMessage`` and ``suppressOutput``; ``hookSpecificOutput``
  carries ``hookEventName``. Notification, PreCompact, SessionEnd and events Droid does not
  have get only those.
"""

from __future__ import annotations

from typing import Any, Final

from bus.dialects.base import AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.codex import patch_input

DROID: Final = "droid"
#: Droid's tool names -> Claude Code's (others, MCP tools among them, pass through unchanged).
DROID_TOOLS: Final[dict[str, str]] = {
    "Execute": "Bash",
    "Create": "Write",
    "Edit": "Edit",
    "MultiEdit": "MultiEdit",
    "ApplyPatch": "Edit",
    "Read": "Read",
    "LS": "LS",
    "Grep": "Grep",
    "Glob": "Glob",
    "FetchUrl": "WebFetch",
    "WebSearch": "WebSearch",
    "TodoWrite": "TodoWrite",
    "Task": "Agent",
    "TaskOutput": "TaskOutput",
    "TaskStop": "TaskStop",
    "ToolSearch": "ToolSearch",
    "Skill": "Skill",
    "ExitSpecMode": "ExitPlanMode",
}
#: Per Droid tool: its input field names -> Claude Code's.
DROID_FIELDS: Final[dict[str, dict[str, str]]] = {
    "Edit": {"old_str": "old_string", "new_str": "new_string", "change_all": "replace_all"},
    "LS": {"directory_path": "path"},
    "Grep": {"glob_pattern": "glob"},
}
#: Droid's autonomy levels -> Claude Code's permission modes.
DROID_MODES: Final[dict[str, str]] = {
    "off": "default",
    "spec": "plan",
    "auto-low": "acceptEdits",
    "auto-medium": "auto",
    "auto-high": "auto",
}
DEFAULT_DENY_REASON: Final = "Denied by hookbus policy"
ASK_SUFFIX: Final = " (hookbus policy asks for confirmation, which Factory Droid cannot do here: denied instead)"
_SHELL: Final = "Execute"
_UNIVERSAL: Final = ("systemMessage", "suppressOutput")
_STOPS: Final = frozenset({"Stop", "SubagentStop"})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _first_pattern(patterns: object) -> str | None:
    if isinstance(patterns, list) and patterns:
        patterns = patterns[0]
    return patterns if isinstance(patterns, str) else None


def _seconds_to_ms(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1000) if value == int(value) else value * 1000
    return value


def _ms_to_seconds(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value / 1000) if value % 1000 == 0 else value / 1000
    return value


def tool_input_to_claude(tool: str, tool_input: dict[str, Any], cwd: object = None) -> tuple[str, dict[str, Any]]:
    """``(canonical tool, tool_input in Claude Code's field names)`` of one Droid tool call."""
    if tool == "ApplyPatch":
        patch = tool_input.get("patch")
        shaped = {**tool_input, "input": patch} if isinstance(patch, str) and "input" not in tool_input else tool_input
        canonical, out = patch_input(shaped, cwd)
        if shaped is not tool_input:
            out.pop("input", None)
        return canonical, out
    renames = DROID_FIELDS.get(tool, {})
    out = {renames.get(key, key): value for key, value in tool_input.items()}
    if tool == _SHELL and "timeout" in out:
        out["timeout"] = _seconds_to_ms(out["timeout"])
    if tool == "Glob":
        first = _first_pattern(out.get("patterns"))
        if first is not None:
            out.setdefault("pattern", first)
    return DROID_TOOLS.get(tool, tool), out


def tool_input_to_droid(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A canonical ``updatedInput`` for the Droid tool ``tool``, in Droid's field names."""
    renames = {claude: droid for droid, claude in DROID_FIELDS.get(tool, {}).items()}
    out = {renames.get(key, key): value for key, value in tool_input.items()}
    if tool == _SHELL and "timeout" in out:
        out["timeout"] = _ms_to_seconds(out["timeout"])
    if tool == "Glob" and isinstance(out.get("pattern"), str):
        pattern = out.pop("pattern")
        if pattern != _first_pattern(out.get("patterns")):
            out["patterns"] = pattern
    if tool == "ApplyPatch":
        out = {key: value for key, value in out.items() if key not in ("file_path", "file_paths")}
    return out


def droid_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Droid hook input in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    tool = out.get("tool_name")
    if isinstance(tool, str):
        out[AGENT_TOOL_NAME] = tool
        tool_input = out.get("tool_input")
        if isinstance(tool_input, dict):
            out["tool_name"], out["tool_input"] = tool_input_to_claude(tool, tool_input, out.get("cwd"))
        else:
            out["tool_name"] = DROID_TOOLS.get(tool, tool)
    mode = out.get("permission_mode")
    if isinstance(mode, str) and mode in DROID_MODES:
        out["droid_permission_mode"] = mode
        out["permission_mode"] = DROID_MODES[mode]
    return out


def _pre_tool_use(output: dict[str, Any], specific: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    decision = specific.get("permissionDecision")
    reason = _text(specific.get("permissionDecisionReason"))
    if decision not in ("allow", "deny", "ask") and output.get("decision") in ("block", "approve"):
        decision = "deny" if output["decision"] == "block" else "allow"
        reason = reason or _text(output.get("reason"))
    updated = specific.get("updatedInput")
    if decision == "ask":
        decision, reason = "deny", (reason or "") + ASK_SUFFIX
    fields: dict[str, Any] = {}
    if decision == "deny":
        fields = {"permissionDecision": "deny", "permissionDecisionReason": (reason or DEFAULT_DENY_REASON).strip()}
    elif decision == "allow" or (decision is None and isinstance(updated, dict)):
        fields = {"permissionDecision": "allow"}
        if reason:
            fields["permissionDecisionReason"] = reason
        tool = agent_input.get("tool_name")
        if isinstance(updated, dict):
            fields["updatedInput"] = tool_input_to_droid(tool, updated) if isinstance(tool, str) else dict(updated)
    out = {key: output[key] for key in _UNIVERSAL if output.get(key) is not None}
    if output.get("continue") is False:
        out["continue"] = False
        if _text(output.get("stopReason")):
            out["stopReason"] = output["stopReason"]
    if fields:
        out["hookSpecificOutput"] = {"hookEventName": "PreToolUse", **fields}
    return out


def droid_output(event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Droid reads it (see the module docstring)."""
    if event == "PreToolUse":
        return _pre_tool_use(output, _specific(output), agent_input)
    context = _text(_specific(output).get("additionalContext"))
    out: dict[str, Any] = {key: output[key] for key in _UNIVERSAL if output.get(key) is not None}
    decision, reason = output.get("decision"), _text(output.get("reason"))
    fields: dict[str, Any] = {}
    if event in _STOPS:
        if decision == "block" or context:
            out["decision"] = "block"
            out["reason"] = reason or context or "Keep working"
        return out
    if output.get("continue") is False:
        out["continue"] = False
        if _text(output.get("stopReason")):
            out["stopReason"] = output["stopReason"]
    if event == "PostToolUse":
        if decision == "block":
            told = reason or "hookbus policy flagged this tool result"
            context = f"{told}\n\n{context}" if context else told
        if context:
            fields["additionalContext"] = context
    elif event == "UserPromptSubmit":
        if decision == "block":
            out["decision"] = "block"
            out["reason"] = reason or "Blocked by hookbus policy"
        if context:
            fields["additionalContext"] = context
    elif event == "SessionStart" and context:
        fields["additionalContext"] = context
    if fields:
        out["hookSpecificOutput"] = {"hookEventName": event, **fields}
    return out


def _specific(output: dict[str, Any]) -> dict[str, Any]:
    specific = output.get("hookSpecificOutput")
    return specific if isinstance(specific, dict) else {}


class FactoryDroid(Dialect):
    """Factory Droid's hook format (see the module docstring)."""

    name = DROID
    title = "Factory Droid"
    transport = "command"
    verified = "real CLI: @factory/cli-linux-x64 0.225.2 (droid exec), headless, in the test suite"
    tools = DROID_TOOLS
    capabilities = {
        "deny": yes("`permissionDecision: deny`; the model gets `Error: <reason>` as the tool result"),
        "ask": no("`droid exec` runs the tool on `ask`: hookbus sends a deny whose reason says confirmation was asked"),
        "allow": yes("`permissionDecision: allow` also skips Droid's autonomy gate (runs above the `--auto` level)"),
        "rewrite_input": yes("`updatedInput` with the allow, in Droid's own field names (`old_str`, ...)"),
        "stop_block": yes("`decision: block` on Stop; the reason is the next user message"),
        "add_context": partial(
            "SessionStart, PostToolUse (a PostToolUse block's reason goes there too) and UserPromptSubmit "
            "(not sent by `droid exec`); Droid drops PreToolUse context; Stop context becomes a block"
        ),
        "fail_closed": yes(
            "command hooks: with `--fail-closed` the shim exits 2 on PreToolUse and UserPromptSubmit, "
            "which Droid takes as a block"
        ),
    }

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return droid_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return droid_output(event, output, agent_input)


__all__ = [
    "DROID",
    "DROID_FIELDS",
    "DROID_MODES",
    "DROID_TOOLS",
    "FactoryDroid",
    "droid_input",
    "droid_output",
    "tool_input_to_claude",
    "tool_input_to_droid",
]
