"""What the agents a policy names can carry out: the warnings of ``hookbus policy check``.

A policy names agents in two places: ``hookbus.agents``, the fleet it serves, and a
handler's ``agents``, the agents that handler runs for. For every handler this module works
out which kinds of decision (:data:`bus.dialects.base.CAPABILITIES`) it makes, or may make,
and looks each one up in the declaration of every agent the handler runs for: where the
dialect declares ``no`` or ``partial``, a warning carries the dialect's own note. The
declarations are read when the check runs, so the warnings follow the dialects.

What a handler decides is known for ``rule`` handlers (their lists), for ``prompt`` and
``agent`` handlers (deny, or block a Stop), for any handler on Stop or SubagentStop (block it)
and for ``failMode: closed``; a ``command``, ``http``, ``mcp_tool`` or ``function`` handler
*may* give any answer its event takes. ``shadow`` handlers decide nothing, and ``async`` ones
can only leave context for the next turn.

:func:`serves` tells the gateway whether any handler for an event runs for the agent that
sent it (else the event is only recorded: nothing would answer), and :func:`mcp_servers` which
MCP servers the policy names (its dialects split agents' MCP tool names by them:
:mod:`bus.dialects.mcpnames`).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping
from typing import Final

from bus.dialects import DIALECTS
from bus.dialects.base import CAPABILITIES, CAPABILITY_TITLES, Dialect, Support
from bus.dialects.mcpnames import policy_servers
from bus.hooks.events import STOP_EVENTS, event_spec
from bus.policy.loading import HandlerEntry, Policy
from bus.policy.schema import Handler, RuleHandler

_SERVED: weakref.WeakKeyDictionary[Policy, frozenset[tuple[str, str]]] = weakref.WeakKeyDictionary()
_MCP_SERVERS: weakref.WeakKeyDictionary[Policy, frozenset[str]] = weakref.WeakKeyDictionary()


def serves(policy: Policy, event: str, agent: str) -> bool:
    """Whether any handler of ``policy`` for ``event`` runs for ``agent`` (one set lookup once built);
    a ``PreToolUse`` is served by a session budget or loop gate too (``hookbus.session``)."""
    served = _SERVED.get(policy)
    if served is None:
        served = _SERVED[policy] = frozenset(
            (name, dialect)
            for name, entries in policy.by_event.items()
            for dialect in DIALECTS
            if any(e.handler.agents is None or dialect in e.handler.agents for e in entries)
        ) | frozenset(
            ("PreToolUse", dialect)
            for dialect in DIALECTS
            if policy.settings.session.budgets or policy.settings.session.loop_gate
        )
    return (event, agent) in served


def mcp_servers(policy: Policy) -> frozenset[str]:
    """The MCP servers ``policy`` names in its matchers, ``if`` conditions and rules (found once per policy)."""
    found = _MCP_SERVERS.get(policy)
    if found is None:
        texts: list[str] = []
        for entries in policy.by_event.values():
            for entry in entries:
                texts += [entry.matcher or "", entry.handler.if_ or ""]
                if isinstance(entry.handler, RuleHandler):
                    texts += [*entry.handler.deny, *entry.handler.ask, *entry.handler.allow]
        found = _MCP_SERVERS[policy] = policy_servers(texts)
    return found


#: Handler types whose answer is whatever their program returns: any decision the event takes.
OPEN_ANSWER_TYPES: Final = frozenset({"command", "http", "mcp_tool", "function"})
#: The decisions an open answer may carry, by event (context is added where the event takes it).
_OPEN_DECISIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "PreToolUse": ("deny", "ask", "allow", "rewrite_input"),
    "PermissionRequest": ("deny", "allow", "rewrite_input"),
}
#: What each list of a ``rule`` handler decides, by event (``ask`` gives none on PermissionRequest).
_RULE_DECISIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "PreToolUse": ("deny", "ask", "allow"),
    "PermissionRequest": ("deny", "allow"),
}


@dataclasses.dataclass(frozen=True)
class Use:
    """One handler's part in a decision: where it is, and why it counts."""

    source: str
    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path} ({self.why})"


@dataclasses.dataclass(frozen=True)
class AgentWarning:
    """A kind of decision the policy makes that one agent does not (fully) carry out."""

    agent: str
    capability: str
    support: Support
    note: str
    uses: tuple[Use, ...]

    def __str__(self) -> str:
        title = CAPABILITY_TITLES[self.capability]
        can = f"cannot {title}" if self.support is Support.NO else f"can {title} only in part"
        note = f": {self.note}" if self.note else ""
        return f"{self.agent} {can} ({self.support.value}{note}); used by {', '.join(str(u) for u in self.uses)}"


def named_agents(policy: Policy) -> tuple[str, ...]:
    """The agents ``policy`` names: its fleet (``hookbus.agents``) and every handler's ``agents``."""
    named = set(policy.settings.agents or ())
    for event in policy.events():
        for entry in policy.entries(event):
            named.update(entry.handler.agents or ())
    return tuple(name for name in DIALECTS if name in named)


def decisions(event: str, handler: Handler) -> dict[str, str]:
    """The capabilities ``handler`` on ``event`` makes use of, each with why ("if it answers so" when it only might)."""
    if handler.shadow:
        return {}
    found: dict[str, str] = {}
    if handler.async_:
        if handler.type in OPEN_ANSWER_TYPES:
            found["add_context"] = f"async {handler.type} handler, if it leaves context"
        return found
    if isinstance(handler, RuleHandler):
        for kind in _RULE_DECISIONS.get(event, ()):
            if getattr(handler, kind):
                found[kind] = f"{kind} rules"
    elif event in STOP_EVENTS:
        found["stop_block"] = f"{handler.type} handler on {event}"
    elif handler.type in OPEN_ANSWER_TYPES:
        for capability in _OPEN_DECISIONS.get(event, ()):
            found[capability] = f"{handler.type} handler, if it answers so"
    elif event == "PreToolUse":  # prompt, agent: not ok is a deny
        found["deny"] = f"{handler.type} handler"
    spec = event_spec(event)
    takes_context = "additionalContext" in spec.specific_fields or spec.context_stdout
    if handler.type in OPEN_ANSWER_TYPES and takes_context:
        found["add_context"] = f"{handler.type} handler, if it answers so"
    if handler.fail_mode == "closed":
        found["fail_closed"] = "failMode: closed"
    return found


def _path(entry: HandlerEntry) -> str:
    return f"hooks.{entry.event}[{entry.group_index}].hooks[{entry.handler_index}]"


def agent_warnings(policy: Policy, dialects: Mapping[str, Dialect] = DIALECTS) -> list[AgentWarning]:
    """Every decision of ``policy`` that an agent it names cannot (fully) carry out, by agent and
    capability in declaration order; none when the policy names no agent or is all shadow."""
    named = named_agents(policy)
    if not named or policy.settings.shadow:
        return []
    uses: dict[tuple[str, str], list[Use]] = {}
    for event in sorted(policy.events()):
        for entry in policy.entries(event):
            runs_for = entry.handler.agents or named
            for capability, why in decisions(event, entry.handler).items():
                for agent in runs_for:
                    dialect = dialects.get(agent)
                    if dialect is not None and dialect.capabilities[capability].support is not Support.YES:
                        uses.setdefault((agent, capability), []).append(Use(entry.source, _path(entry), why))
    out = []
    for agent in dialects:
        for capability in CAPABILITIES:
            if found := uses.get((agent, capability)):
                declared = dialects[agent].capabilities[capability]
                out.append(AgentWarning(agent, capability, declared.support, declared.note, tuple(found)))
    return out


__all__ = [
    "OPEN_ANSWER_TYPES",
    "AgentWarning",
    "Use",
    "agent_warnings",
    "decisions",
    "mcp_servers",
    "named_agents",
    "serves",
]
