"""The event catalogue: Claude Code's 33 hook events plus four agent-loop events.

The agent-loop events (``Start``, ``PreSampling``, ``PostSampling``, ``Error``; source
``"seed"``) come from in-process LocalHooks-style engines whose callbacks answer
``continue`` / ``block`` / ``modify``.

For every event the catalogue says whether an agent waits for a decision (``blocking``),
which input field its group ``matcher`` is tested against, which handler types Claude Code
allows there, and which output fields mean something on it. Unknown event names are
accepted everywhere as non-blocking, with no matcher and no event-specific output.
"""

from __future__ import annotations

import dataclasses
from typing import Final

#: Every handler type a policy may declare, in the order error messages list them.
HANDLER_TYPES: Final = ("command", "http", "prompt", "agent", "mcp_tool", "rule", "function")
ALL_HANDLER_TYPES: Final = frozenset(HANDLER_TYPES)
_NO_LLM: Final = frozenset({"command", "http", "mcp_tool", "rule", "function"})
_NO_AGENT: Final = ALL_HANDLER_TYPES - {"agent"}
_COMMAND_ONLY: Final = frozenset({"command", "mcp_tool", "rule", "function"})

#: Events whose ``if`` field is evaluated; on any other event a handler with ``if`` never runs.
IF_EVENTS: Final = frozenset(
    {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"}
)


@dataclasses.dataclass(frozen=True)
class EventSpec:
    """What hookbus knows about one lifecycle event."""

    name: str
    blocking: bool
    matcher_field: str | None = None
    handler_types: frozenset[str] = ALL_HANDLER_TYPES
    specific_fields: frozenset[str] = frozenset()
    top_level_decision: bool = False
    context_stdout: bool = False
    sources: frozenset[str] = frozenset({"claude", "peri"})


def _spec(
    name: str,
    blocking: bool,
    matcher_field: str | None = None,
    handler_types: frozenset[str] = ALL_HANDLER_TYPES,
    specific: tuple[str, ...] = (),
    top_level_decision: bool = False,
    context_stdout: bool = False,
    sources: tuple[str, ...] = ("claude", "peri"),
) -> EventSpec:
    return EventSpec(
        name=name,
        blocking=blocking,
        matcher_field=matcher_field,
        handler_types=handler_types,
        specific_fields=frozenset(specific),
        top_level_decision=top_level_decision,
        context_stdout=context_stdout,
        sources=frozenset(sources),
    )


_CATALOGUE: Final = (
    # Claude Code (33). "peri" marks the 28 that Peri's hook system also fires.
    _spec(
        "SessionStart",
        True,
        "source",
        _COMMAND_ONLY,
        ("additionalContext", "initialUserMessage", "sessionTitle", "watchPaths", "reloadSkills"),
        context_stdout=True,
    ),
    _spec("Setup", False, "trigger", _COMMAND_ONLY),
    _spec("InstructionsLoaded", False, "load_reason", _NO_LLM),
    _spec(
        "UserPromptSubmit",
        True,
        None,
        ALL_HANDLER_TYPES,
        ("additionalContext", "sessionTitle", "suppressOriginalPrompt"),
        top_level_decision=True,
        context_stdout=True,
    ),
    _spec(
        "UserPromptExpansion",
        True,
        "command_name",
        ALL_HANDLER_TYPES,
        ("additionalContext",),
        top_level_decision=True,
        context_stdout=True,
        sources=("claude",),
    ),
    _spec("MessageDisplay", True, None, _NO_LLM, ("displayContent",), sources=("claude",)),
    _spec(
        "PreToolUse",
        True,
        "tool_name",
        ALL_HANDLER_TYPES,
        ("permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"),
    ),
    _spec("PermissionRequest", True, "tool_name", _NO_AGENT, ("decision",)),
    _spec("PermissionDenied", True, "tool_name", ALL_HANDLER_TYPES, ("retry",)),
    _spec(
        "PostToolUse",
        True,
        "tool_name",
        ALL_HANDLER_TYPES,
        ("additionalContext", "classifierContext", "updatedToolOutput", "updatedMCPToolOutput"),
        top_level_decision=True,
    ),
    _spec("PostToolUseFailure", True, "tool_name", ALL_HANDLER_TYPES, ("additionalContext",), top_level_decision=True),
    _spec("PostToolBatch", True, None, ALL_HANDLER_TYPES, ("additionalContext",), top_level_decision=True),
    _spec("Notification", False, "notification_type", _NO_LLM),
    _spec("SubagentStart", True, "agent_type", _NO_LLM, ("additionalContext",)),
    _spec("SubagentStop", True, "agent_type", ALL_HANDLER_TYPES, ("additionalContext",), top_level_decision=True),
    _spec("TaskCreated", True, None, ALL_HANDLER_TYPES, (), top_level_decision=True),
    _spec("TaskCompleted", True, None, ALL_HANDLER_TYPES, (), top_level_decision=True),
    _spec("Stop", True, None, ALL_HANDLER_TYPES, ("additionalContext",), top_level_decision=True),
    _spec("StopFailure", False, "error", _NO_LLM),
    _spec("TeammateIdle", True, None, ALL_HANDLER_TYPES, (), top_level_decision=True),
    _spec("ConfigChange", True, "source", _NO_LLM, (), top_level_decision=True),
    _spec("CwdChanged", True, None, _NO_LLM, ("watchPaths",)),
    _spec("DirectoryAdded", False, "source", _NO_LLM, sources=("claude",)),
    _spec("FileChanged", True, "file_path", _NO_LLM, ("watchPaths",)),
    _spec("WorktreeCreate", True, None, _NO_LLM, ("worktreePath",)),
    _spec("WorktreeRemove", True, None, _NO_LLM),
    _spec("PreCompact", True, "trigger", _NO_LLM, (), top_level_decision=True),
    _spec("PostCompact", False, "trigger", _NO_LLM),
    _spec(
        "PreModelSwitch",
        True,
        "to_model",
        _NO_LLM,
        ("permissionDecision", "permissionDecisionReason"),
        top_level_decision=True,
        sources=("claude",),
    ),
    _spec(
        "PostModelSwitch", True, "to_model", _NO_LLM, ("additionalContext",), context_stdout=True, sources=("claude",)
    ),
    _spec("Elicitation", True, "mcp_server_name", _NO_LLM, ("action", "content")),
    _spec("ElicitationResult", True, "mcp_server_name", _NO_LLM, ("action", "content")),
    _spec("SessionEnd", False, "reason", _NO_LLM),
    # Agent-loop events of LocalHooks-style engines (source "seed"): continue / block / modify.
    _spec("Start", True, None, ALL_HANDLER_TYPES, ("additionalContext",), top_level_decision=True, sources=("seed",)),
    _spec(
        "PreSampling",
        True,
        None,
        ALL_HANDLER_TYPES,
        ("updatedMessages", "additionalContext"),
        top_level_decision=True,
        sources=("seed",),
    ),
    _spec("PostSampling", False, None, ALL_HANDLER_TYPES, sources=("seed",)),
    _spec("Error", False, None, ALL_HANDLER_TYPES, sources=("seed",)),
)

EVENTS: Final[dict[str, EventSpec]] = {spec.name: spec for spec in _CATALOGUE}
CLAUDE_EVENTS: Final = tuple(spec.name for spec in _CATALOGUE if "claude" in spec.sources)
PERI_EVENTS: Final = tuple(spec.name for spec in _CATALOGUE if "peri" in spec.sources)
SEED_EVENTS: Final = tuple(spec.name for spec in _CATALOGUE if spec.sources == {"seed"})

#: Events on which a plain-text ``http`` hook is not supported by Claude Code.
NO_HTTP_EVENTS: Final = frozenset({"SessionStart", "Setup"})

#: Events whose matcher takes the narrower exact set (letters, digits, ``_``, ``|``).
NARROW_MATCHER_EVENTS: Final = frozenset({"FileChanged", "StopFailure"})

#: Events whose consecutive blocks are counted by the Stop guard.
STOP_EVENTS: Final = frozenset({"Stop", "SubagentStop"})


def event_spec(name: str) -> EventSpec:
    """The spec of ``name``; unknown names get a non-blocking spec with no matcher."""
    spec = EVENTS.get(name)
    if spec is None:
        return EventSpec(name=name, blocking=False, sources=frozenset())
    return spec


def is_known(name: str) -> bool:
    return name in EVENTS


#: Claude Code's default handler timeouts, in seconds.
DEFAULT_TIMEOUT_S = {
    "command": 600.0,
    "http": 600.0,
    "mcp_tool": 600.0,
    "prompt": 30.0,
    "agent": 60.0,
    "rule": 5.0,
    "function": 30.0,
}
_SHORT_EVENTS_S = {"UserPromptSubmit": 30.0, "PreModelSwitch": 30.0, "PostModelSwitch": 30.0, "MessageDisplay": 10.0}


def default_timeout_s(handler_type: str, event: str) -> float:
    """Claude Code's default timeout for ``handler_type`` on ``event``."""
    base = DEFAULT_TIMEOUT_S.get(handler_type, 600.0)
    if handler_type in ("command", "http", "mcp_tool"):
        return min(base, _SHORT_EVENTS_S.get(event, base))
    return base


__all__ = [
    "ALL_HANDLER_TYPES",
    "CLAUDE_EVENTS",
    "DEFAULT_TIMEOUT_S",
    "EVENTS",
    "IF_EVENTS",
    "NARROW_MATCHER_EVENTS",
    "NO_HTTP_EVENTS",
    "PERI_EVENTS",
    "SEED_EVENTS",
    "STOP_EVENTS",
    "EventSpec",
    "default_timeout_s",
    "event_spec",
    "is_known",
]
