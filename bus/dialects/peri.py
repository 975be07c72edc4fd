"""Peri's dialect (``peri``, the Rust agent ``KonghaYao/peri``).

Input: ``tool_output`` becomes ``tool_response``. Peri's permission modes become the
nearest Claude Code mode and the original is kept as ``peri_permission_mode``: ``yolo`` /
``bypass`` -> ``bypassPermissions``, ``hitl`` / ``ask`` / ``manual`` -> ``default``,
``auto`` / ``AutoMode`` -> ``auto``, ``acceptEdits`` / ``auto-edit`` -> ``acceptEdits``,
``dontAsk`` / ``no-ask`` / ``deny`` -> ``dontAsk``, ``plan`` -> ``plan``; names are compared
case-insensitively without ``-``/``_``/spaces (Peri also sends its enum's Debug form, e.g.
``BypassPermissions``), and anything else maps to ``default``, the strictest interactive
mode. ``subagent_name`` also fills ``agent_type`` and ``subagent_result`` fills
``last_assistant_message`` when those are absent; the keys of ``additional_data`` are
copied to the top level where free. Every other field is kept as sent.

Output, in the form Peri's ``SyncHookResponse`` deserialises: top-level ``continue``,
``stopReason``, ``systemMessage``, ``decision`` (only ``block`` / ``approve``: any other
value fails Peri's parse) and ``reason``; ``suppressOutput`` as ``suppress_output``; and
``hook_specific_output`` (snake_case key, ``hookEventName``-tagged content in camelCase)
only for PreToolUse, UserPromptSubmit and SessionStart, the three variants Peri knows (any
other tag makes Peri reject the whole reply and block). Event by event:

* PreToolUse: ``permissionDecision`` (``defer``, unknown to Peri, becomes ``passthrough``),
  ``permissionDecisionReason``, ``updatedInput``, ``additionalContext``. A deny is *also*
  ``decision: "block"`` + ``reason`` (Peri checks ``decision`` before the specific output,
  so it blocks either way); an allow is also ``decision: "approve"``.
* UserPromptSubmit: ``additionalContext``. SessionStart: ``additionalContext``,
  ``initialUserMessage``, ``watchPaths``.
* PermissionRequest: ``behavior: "deny"`` -> ``decision: "block"`` + ``reason`` (its
  ``message``), with ``interrupt`` also ``continue: false``; ``allow`` -> ``approve``.
* Stop / SubagentStop: Claude Code's ``additionalContext`` continues the turn like a block
  does, so without a block it becomes ``decision: "block"`` with the context as ``reason``.
* Other events: the universal fields only; their event-specific fields (e.g. PostToolUse
  ``additionalContext``) have no place in Peri's reply and are dropped.
"""

from __future__ import annotations

from typing import Any, Final

from bus.dialects.base import Dialect, no, partial, yes

PERI: Final = "peri"
#: Peri permission mode (normalised: lower case, no ``-``/``_``/spaces) -> Claude Code mode.
PERI_MODES: Final[dict[str, str]] = {
    "default": "default",
    "hitl": "default",
    "ask": "default",
    "manual": "default",
    "normal": "default",
    "auto": "auto",
    "automode": "auto",
    "acceptedits": "acceptEdits",
    "autoedit": "acceptEdits",
    "autoedits": "acceptEdits",
    "edit": "acceptEdits",
    "dontask": "dontAsk",
    "noask": "dontAsk",
    "deny": "dontAsk",
    "plan": "plan",
    "planmode": "plan",
    "readonly": "plan",
    "yolo": "bypassPermissions",
    "bypass": "bypassPermissions",
    "bypassall": "bypassPermissions",
    "bypasspermissions": "bypassPermissions",
}
_PERI_SPECIFIC: Final[dict[str, tuple[str, ...]]] = {
    "PreToolUse": ("permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"),
    "UserPromptSubmit": ("additionalContext",),
    "SessionStart": ("additionalContext", "initialUserMessage", "watchPaths"),
}
_UNIVERSAL: Final = ("continue", "stopReason", "systemMessage", "reason")


def claude_mode(mode: str) -> str:
    """The Claude Code permission mode nearest to Peri's ``mode``."""
    return PERI_MODES.get("".join(c for c in mode.lower() if c not in "-_ "), "default")


def peri_input(hook_input: dict[str, Any]) -> dict[str, Any]:
    """A Peri hook input in Claude Code's shape (a new dict; extra fields kept)."""
    out = dict(hook_input)
    if "tool_output" in out:
        output = out.pop("tool_output")
        out.setdefault("tool_response", output)
    mode = out.get("permission_mode")
    if isinstance(mode, str) and claude_mode(mode) != mode:
        out["peri_permission_mode"] = mode
        out["permission_mode"] = claude_mode(mode)
    if isinstance(out.get("subagent_name"), str):
        out.setdefault("agent_type", out["subagent_name"])
    if isinstance(out.get("subagent_result"), str):
        out.setdefault("last_assistant_message", out["subagent_result"])
    extra = out.get("additional_data")
    if isinstance(extra, dict):
        for key, value in extra.items():
            out.setdefault(key, value)
    return out


def peri_output(event: str, output: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook output in the form Peri reads (see the module docstring)."""
    out: dict[str, Any] = {key: output[key] for key in _UNIVERSAL if output.get(key) is not None}
    if output.get("suppressOutput") is not None:
        out["suppress_output"] = output["suppressOutput"]
    if output.get("decision") in ("block", "approve"):
        out["decision"] = output["decision"]
    specific = output.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    fields = {key: specific[key] for key in _PERI_SPECIFIC.get(event, ()) if specific.get(key) is not None}
    if event == "PreToolUse":
        if fields.get("permissionDecision") == "defer":
            fields["permissionDecision"] = "passthrough"
        if fields.get("permissionDecision") == "deny":
            out["decision"] = "block"
            out.setdefault("reason", fields.get("permissionDecisionReason") or "Denied by hookbus policy")
        elif fields.get("permissionDecision") == "allow":
            out.setdefault("decision", "approve")
    elif event == "PermissionRequest" and isinstance(specific.get("decision"), dict):
        request = specific["decision"]
        if request.get("behavior") == "deny":
            out["decision"] = "block"
            out.setdefault("reason", request.get("message") or "Denied by hookbus policy")
            if request.get("interrupt") is True:
                out["continue"] = False
                out.setdefault("stopReason", out["reason"])
        elif request.get("behavior") == "allow":
            out.setdefault("decision", "approve")
    elif event in ("Stop", "SubagentStop") and specific.get("additionalContext") and out.get("decision") != "block":
        out["decision"] = "block"
        out["reason"] = specific["additionalContext"]
    if fields:
        out["hook_specific_output"] = {"hookEventName": event, **fields}
    return out


class Peri(Dialect):
    """Peri's hook format (see the module docstring)."""

    name = PERI
    title = "Peri"
    verified = "Peri's reply parser, restated in the tests from its source (no CLI run)"
    capabilities = {
        "deny": yes("`decision: block` as well as the specific output"),
        "ask": yes(),
        "allow": yes("also `decision: approve`"),
        "rewrite_input": yes(),
        "stop_block": yes(),
        "add_context": partial("PreToolUse, UserPromptSubmit and SessionStart only (other events' context is dropped)"),
        "fail_closed": no("Peri posts directly: an unreachable gateway lets the tool run"),
    }

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        return peri_input(hook_input)

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        return peri_output(event, output)


__all__ = ["PERI", "PERI_MODES", "Peri", "claude_mode", "peri_input", "peri_output"]
