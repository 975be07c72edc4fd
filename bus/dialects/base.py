"""What a dialect is: an agent's hook format, translated at the edge to Claude Code's.

Inside hookbus every event is canonical: Claude Code's event names, input fields and tool
names. A :class:`Dialect` maps one agent's hook input to that form on the way in
(:meth:`Dialect.to_canonical`) and a canonical hook output back to exactly what the agent
accepts on the way out (:meth:`Dialect.to_agent`). Each dialect also declares what its agent
can enforce (:attr:`Dialect.capabilities`): ``docs/agents.md`` and ``hookbus policy check``
are built from those declarations, so the documentation cannot drift from the code.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

#: The field a translated input keeps the agent's own tool name in (handlers and the log see it).
AGENT_TOOL_NAME: Final = "agent_tool_name"
#: The field a translated input keeps the agent's own event name in, when it differs.
AGENT_EVENT_NAME: Final = "agent_event_name"

#: What a policy can ask of an agent, in the order the capability table shows them.
CAPABILITIES: Final = ("deny", "ask", "allow", "rewrite_input", "stop_block", "add_context", "fail_closed")
#: A short heading for each capability in the table.
CAPABILITY_TITLES: Final = {
    "deny": "deny a tool",
    "ask": "ask the user",
    "allow": "allow (skip the agent's own prompt)",
    "rewrite_input": "rewrite tool input",
    "stop_block": "block a Stop (keep working)",
    "add_context": "add context",
    "fail_closed": "fail closed",
}


class Support(enum.StrEnum):
    """How far an agent carries out one kind of decision."""

    YES = "yes"
    #: Carried out in a different form (the note says which).
    PARTIAL = "partial"
    #: Not carried out; the note says what hookbus sends instead.
    NO = "no"


@dataclass(frozen=True)
class Capability:
    """One capability of one agent: how far it is supported, and how hookbus maps it."""

    support: Support
    note: str = ""


def yes(note: str = "") -> Capability:
    return Capability(Support.YES, note)


def partial(note: str) -> Capability:
    return Capability(Support.PARTIAL, note)


def no(note: str) -> Capability:
    return Capability(Support.NO, note)


class Dialect:
    """One agent's hook format. Subclasses set the class attributes and override the two
    translations; the base class is Claude Code's own format (both translations are identity)."""

    #: The name clients ask for (``?dialect=NAME``) and the decision log records as ``agent``.
    name: ClassVar[str] = "claude"
    #: The agent's product name, for documentation and messages.
    title: ClassVar[str] = "Claude Code"
    #: Every name in :data:`CAPABILITIES`, declared (a test checks that none is missing).
    capabilities: ClassVar[Mapping[str, Capability]] = {
        "deny": yes(),
        "ask": yes(),
        "allow": yes(),
        "rewrite_input": yes(),
        "stop_block": yes(),
        "add_context": yes(),
        "fail_closed": yes("with `--shim --fail-closed` the shim exits 2 when the gateway cannot answer"),
    }
    #: The agent's event names -> Claude Code's (names not listed pass through unchanged).
    events: ClassVar[Mapping[str, str]] = {}
    #: The agent's tool names -> Claude Code's (names not listed pass through unchanged).
    tools: ClassVar[Mapping[str, str]] = {}
    #: How the agent connects: ``"http"`` (its own http hooks), ``"command"`` (the shim) or
    #: ``"plugin"`` (an in-process plugin hookbus installs, which posts to the gateway).
    transport: ClassVar[str] = "http"
    #: How the dialect was proven: the real CLI it was run against (package and version), or
    #: ``"documentation only"`` (with what it was built from) when the CLI cannot run here.
    verified: ClassVar[str] = "real CLI: @anthropic-ai/claude-code 2.1.332, headless, in the test suite"

    def to_canonical(self, hook_input: dict[str, Any]) -> dict[str, Any]:
        """The agent's hook input in Claude Code's shape (a new dict when anything changed;
        the agent's own tool and event names kept in :data:`AGENT_TOOL_NAME` /
        :data:`AGENT_EVENT_NAME`)."""
        return hook_input

    def to_agent(self, event: str, output: dict[str, Any], agent_input: dict[str, Any]) -> dict[str, Any]:
        """A canonical hook output for ``event`` (Claude Code's name) as the agent reads it.

        ``agent_input`` is the input as the agent sent it. The result never holds a field
        the agent would reject: an agent that fails a hook on an unknown field runs the tool.
        """
        return output

    def canonical_event(self, name: str) -> str:
        return self.events.get(name, name)

    def canonical_tool(self, name: str) -> str:
        return self.tools.get(name, name)


__all__ = [
    "AGENT_EVENT_NAME",
    "AGENT_TOOL_NAME",
    "CAPABILITIES",
    "CAPABILITY_TITLES",
    "Capability",
    "Dialect",
    "Support",
    "no",
    "partial",
    "yes",
]
