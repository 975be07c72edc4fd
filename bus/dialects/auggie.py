"""Augment Code's Auggie CLI dialect (``auggie``; command hooks through the shim).

Built from Augment's hooks documentation only (docs.augmentcode.com/cli/hooks and its
examples): Auggie talks only to Augment's own service, so no real client runs in the test
suite.

Input. Auggie's hook input is Claude Code's in shape: ``hook_event_name`` (PreToolUse,
PostToolUse, Stop, SessionStart, SessionEnd, Notification: Claude Code's names, kept as
they are), ``tool_name`` and ``tool_input``; every field is kept. The documentation names no
session field, so ``session_id`` is taken from ``session_id``, ``conversation_id`` or
``conversationId`` when present, else ``auggie:<cwd>``. Tools become Claude Code's, the
original kept as ``agent_tool_name``: ``launch-process`` -> Bash, ``save-file`` -> Write
(``file_content`` -> ``content``), ``str-replace-editor`` -> Edit (``old_str_1`` /
``new_str_1``, or ``old_str`` / ``new_str``, -> ``old_string`` / ``new_string``), ``view`` ->
Read, ``web-fetch`` -> WebFetch, ``web-search`` -> WebSearch; for the file tools ``path``
also fills ``file_path``, made absolute against ``cwd``. ``remove-files``,
``codebase-retrieval``, ``apply_patch`` and MCP tools keep their names.

Output. What Auggie documents, and nothing it might misread:

* PreToolUse: Auggie blocks a tool on exit 2 with the reason on stderr; JSON decision
  fields are not documented, so a deny is the shim's exit-code form
  (:func:`bus.dialects.windsurf.command_answer`): exit 2 with the reason. An ask blocks the
  same way (a hook cannot ask Auggie for a confirmation), and so does ``continue: false``.
  allow and no decision -> ``{}`` (Auggie's own permissions still decide); ``updatedInput``
  is dropped.
* Stop: ``decision: "block"`` + ``reason`` as Claude Code's (Auggie keeps working); Claude
  Code's Stop ``additionalContext`` continues the turn the same way, so alone it becomes
  such a block with the context as reason.
* SessionStart and PostToolUse: ``hookSpecificOutput.additionalContext``, in Claude Code's
  form (undocumented for Auggie: it may be ignored, which loses nothing but the context).
* Every other event: ``{}``; PostToolUse cannot block.
"""

from __future__ import annotations

from typing import Any, Final

from bus.dialects.base import AGENT_TOOL_NAME, Dialect, no, partial, yes
from bus.dialects.windsurf import command_answer, pre_tool_block
from bus.rules.paths import agent_home, agent_path

AUGGIE: Final = "auggie"
#: Auggie's built-in tool names -> Claude Code's.
AUGGIE_TOOLS: Final[dict[str, str]] = {
    "launch-process": "Bash",
    "save-file": "Write",
    "str-replace-editor": "Edit",
    "view": "Read",
    "web-fetch": "WebFetch",
    "web-search": "WebSearch",
}
#: Per Auggie tool: its parameter name -> Claude Code's, where they differ.
RENAMED_PARAMS: Final[dict[str, dict[str, str]]] = {
    "save-file": {"path": "file_path", "file_content": "content"},
    "str-replace-editor": {"path": "file_path", "old_str_1": "old_string", "new_str_1": "new_string"},
    "view": {"path": "file_path"},
}
_CONTEXT_EVENTS: Final = frozenset({"SessionStart", "PostToolUse"})


def canonical_tool_input(
    agent_tool: str, tool_input: dict[str, Any], cwd: Any, home: str | None = None
) -> dict[str, Any]:
    """Auggie tool ``agent_tool``'s arguments with Claude Code's names added (a new dict; the others kept)."""
    out = dict(tool_input)
    for agent, claude in RENAMED_PARAMS.get(agent_tool, {}).items():
        if agent in out and claude not in out:
            out[claude] = out[agent]
    if agent_tool == "str-replace-editor":
        for agent, claude in (("old_str", "old_string"), ("new_str", "new_string")):
            if agent in out and claude not in out:
                out[claude] = out[agent]
    path = out.get("file_path")
    if agent_tool in RENAMED_PARAMS and isinstance(path, str) and path and isinstance(cwd, str) and cwd:
        out["file_path"] = agent_path(path, cwd, home)
    return out


def auggie_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """An Auggie hook input in Claude Code's shape (a new dict; every field kept)."""
    out = dict(hook_input)
    if "session_id" not in out:
        for key in ("conversation_id", "conversationId"):
            if isinstance(out.get(key), str) and out[key]:
                out["session_id"] = out[key]
                break
        else:
            out["session_id"] = f"auggie:{out.get('cwd') or '?'}"
    tool = out.get("tool_name")
    if isinstance(tool, str):
        out[AGENT_TOOL_NAME] = tool
        out["tool_name"] = AUGGIE_TOOLS.get(tool, tool)
        if isinstance(out.get("tool_input"), dict):
            out["tool_input"] = canonical_tool_input(tool, out["tool_input"], out.get("cwd"), agent_home(out))
    if out.get("hook_event_name") == "Stop":
        out.setdefault("stop_hook_active", False)
    return out


def auggie_output(event: str, output: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output for ``event`` as Auggie reads it (see the module docstring)."""
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    context = specific.get("additionalContext")
    if event == "PreToolUse":
        reason = pre_tool_block(output, "Auggie")
        return command_answer(2, reason) if reason is not None else {}
    if event == "Stop":
        if output.get("decision") == "block":
            return {"decision": "block", "reason": str(output.get("reason") or "Keep working (hookbus policy)")}
        if isinstance(context, str) and context:
            return {"decision": "block", "reason": context}
        return {}
    if event in _CONTEXT_EVENTS and isinstance(context, str) and context:
        return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}
    return {}


class Auggie(Dialect):
    """Augment Code's Auggie CLI hook format (see the module docstring)."""

    name = AUGGIE
    title = "Augment Auggie"
    capabilities = {
        "deny": yes("exit 2 with the reason on stderr (the shim's exit-code form), as Augment documents"),
        "ask": no("Auggie documents no confirmation a hook can ask for: an ask blocks like a deny (exit 2)"),
        "allow": no("no documented allow: Auggie's own tool permissions still decide"),
        "rewrite_input": no("no documented rewrite field: the rewrite is dropped"),
        "stop_block": yes('`decision: "block"` + `reason` on Stop'),
        "add_context": partial(
            "sent in Claude Code's form on SessionStart and PostToolUse, which Augment does not document"
        ),
        "fail_closed": partial("`hookbus hook --fail-closed` exits 2 with the reason on stderr: PreToolUse blocks"),
    }
    tools = AUGGIE_TOOLS
    transport = "command"
    verified = (
        "documentation only: Augment's Auggie CLI hooks pages (docs.augmentcode.com/cli/hooks, /cli/hooks-examples)"
    )

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return auggie_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return auggie_output(event, output)


__all__ = [
    "AUGGIE",
    "AUGGIE_TOOLS",
    "RENAMED_PARAMS",
    "Auggie",
    "auggie_input",
    "auggie_output",
    "canonical_tool_input",
]
