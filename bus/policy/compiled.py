"""A policy compiled for deciding: what depends only on the policy, worked out once, when it loads.

Deciding an event starts with choosing the handlers that run on it: those of the event in
policy order whose ``agents`` name the agent, whose group matcher accepts the event's matcher
value and whose ``if`` matches the call. :class:`CompiledPolicy` keeps, per event, every
handler with its matcher compiled, its ``if`` parsed (an ``if`` on an event that never reads
one drops the handler here, an unparsable one is no condition) and its timeout resolved, and
remembers, per matcher value and agent, which handlers pass: tool names and agents are few,
so choosing is one dict lookup and the ``if`` conditions that remain.

:func:`compiled` gives the compiled form of a :class:`~bus.policy.loading.Policy` (compiled by
:func:`~bus.policy.loading.merge_policy` as it builds one). It decides exactly as
:func:`selected`, which is kept as the reference.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Mapping
from typing import Any, Final, Protocol, TypeVar

from bus.dialects.mcpnames import TOOL_NAME_READINGS, tool_name_readings
from bus.hooks.events import IF_EVENTS, default_timeout_s
from bus.hooks.matching import Matcher, compile_matcher, matcher_value
from bus.policy.entries import HandlerEntry
from bus.policy.rulelists import RuleList, compile_rules
from bus.policy.schema import Handler, PlatformSettings, RuleHandler
from bus.rules.limits import Limits, current_limits
from bus.rules.paths import agent_home
from bus.rules.permissions import PermissionRule, parse_rule, rule_matches

#: How many (matcher value, agent) choices each event remembers; past it, it starts again.
CHOICES_PER_EVENT: Final = 1024
#: Matcher values longer than this are chosen for each time, never remembered.
CHOICE_VALUE_CHARS: Final = 256


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class CompiledHandler:
    """One handler of an event with everything about it that does not depend on the event."""

    entry: HandlerEntry
    handler: Handler
    handler_id: str
    handler_type: str
    matcher: Matcher
    agents: frozenset[str] | None
    #: The parsed ``if``; ``None`` when there is none or it cannot be parsed (the hook runs).
    condition: PermissionRule | None
    timeout_s: float
    run_async: bool
    #: A ``rule`` handler's lists, compiled, and its ``reason``.
    rules: tuple[RuleList, ...] | None
    reason: str | None
    #: A ``rule`` handler without ``once``: the engine decides it in its own call.
    inline: bool = False
    #: ``failMode: closed``.
    fail_closed: bool = False
    #: What is added to the reason of its answers: the session facts its ``when:`` held on, on
    #: the copy a session's judge keeps (``workers.engine.sessions``); empty otherwise.
    note: str = ""


def _condition(text: str) -> PermissionRule | None:
    try:
        return parse_rule(text)
    except ValueError:
        return None


def _compile_handler(entry: HandlerEntry, event: str) -> CompiledHandler | None:
    handler = entry.handler
    if handler.if_ is not None and event not in IF_EVENTS:
        return None  # an `if` on an event that has none: the handler never runs
    return CompiledHandler(
        entry=entry,
        handler=handler,
        handler_id=entry.handler_id,
        handler_type=handler.type,
        matcher=compile_matcher(entry.matcher, event),
        agents=None if handler.agents is None else frozenset(handler.agents),
        condition=None if handler.if_ is None else _condition(handler.if_),
        timeout_s=handler.timeout or default_timeout_s(handler.type, event),
        run_async=bool(handler.async_),
        rules=compile_rules(handler) if isinstance(handler, RuleHandler) else None,
        reason=handler.reason if isinstance(handler, RuleHandler) else None,
        inline=isinstance(handler, RuleHandler) and not handler.once,
        fail_closed=handler.fail_mode == "closed",
    )


class CompiledEvent:
    """The handlers of one event, and which of them pass per matcher value and agent."""

    def __init__(self, event: str, entries: tuple[HandlerEntry, ...], limits: Limits) -> None:
        self.event = event
        self.handlers = tuple(h for h in (_compile_handler(e, event) for e in entries) if h is not None)
        self._limits = limits
        self._choices: dict[tuple[str | None, str], tuple[tuple[CompiledHandler, ...], bool]] = {}

    def select(self, hook_input: Mapping[str, Any], agent: str) -> tuple[CompiledHandler, ...]:
        """The handlers that run on this event from ``agent``, in policy order (for an MCP tool
        read several ways, those whose matcher and ``if`` match any reading)."""
        if not self.handlers:
            return ()
        value = matcher_value(self.event, hook_input)
        chosen, conditional = self._chosen(value, agent)
        tool_name = str(hook_input.get("tool_name", ""))
        # tool_name_readings reads only that field: without it, there are none.
        others = tool_name_readings(hook_input) if TOOL_NAME_READINGS in hook_input and value == tool_name else ()
        if others:
            picked = {id(h) for name in (value, *others) for h in self._chosen(name, agent)[0]}
            chosen = tuple(h for h in self.handlers if id(h) in picked)
            conditional = any(h.condition is not None for h in chosen)
        if not conditional:
            return chosen
        tool_input = hook_input.get("tool_input")
        cwd = hook_input.get("cwd")
        arguments = tool_input if isinstance(tool_input, dict) else {}
        where = cwd if isinstance(cwd, str) else None
        home = agent_home(hook_input)
        return tuple(
            h
            for h in chosen
            if h.condition is None
            or any(rule_matches(h.condition, name, arguments, where, home=home) for name in (tool_name, *others))
        )

    def _chosen(self, value: str | None, agent: str) -> tuple[tuple[CompiledHandler, ...], bool]:
        """The handlers whose agents and matcher pass, and whether one of them has an ``if``."""
        key = (value, agent)
        found = self._choices.get(key)
        if found is None:
            chosen = self._choose(value, agent)
            found = chosen, any(h.condition is not None for h in chosen)
            if value is None or len(value) <= CHOICE_VALUE_CHARS:
                if len(self._choices) >= CHOICES_PER_EVENT:
                    self._choices.clear()
                self._choices[key] = found
        return found

    def _choose(self, value: str | None, agent: str) -> tuple[CompiledHandler, ...]:
        # A matcher value over hookbus.limits.stringBytes cannot be judged: the handler runs.
        too_long = value is not None and self._limits.string_too_long(value)
        return tuple(
            h
            for h in self.handlers
            if (h.agents is None or agent in h.agents) and (too_long or h.matcher.matches(value))
        )


class Policy(Protocol):
    """What compiling reads of a :class:`bus.policy.loading.Policy`."""

    @property
    def settings(self) -> PlatformSettings: ...
    @property
    def by_event(self) -> Mapping[str, tuple[HandlerEntry, ...]]: ...


class CompiledPolicy:
    """Every event's :class:`CompiledEvent`."""

    def __init__(self, policy: Policy) -> None:
        limits = policy.settings.limits
        self.events = {event: CompiledEvent(event, entries, limits) for event, entries in policy.by_event.items()}

    def select(self, event: str, hook_input: Mapping[str, Any], agent: str) -> tuple[CompiledHandler, ...]:
        """The handlers that run on ``event`` from ``agent``, in policy order."""
        found = self.events.get(event)
        return () if found is None else found.select(hook_input, agent)


_COMPILED: Final[weakref.WeakKeyDictionary[Policy, CompiledPolicy]] = weakref.WeakKeyDictionary()


def compiled(policy: Policy) -> CompiledPolicy:
    """The compiled form of ``policy`` (compiled now if it was not yet)."""
    found = _COMPILED.get(policy)
    if found is None:
        found = _COMPILED[policy] = CompiledPolicy(policy)
    return found


P = TypeVar("P", bound=Policy)


def compile_policy(policy: P) -> P:
    """Compile ``policy`` now, as it loads; returns it."""
    compiled(policy)
    return policy


@functools.lru_cache(maxsize=4096)
def _if_rule(text: str) -> PermissionRule | None:
    return _condition(text)


def selected(entry: HandlerEntry, event: str, hook_input: Mapping[str, Any], agent: str) -> bool:
    """Does ``entry`` run on this event from ``agent`` (its ``agents``, group matcher, then ``if``)?

    The reference for :meth:`CompiledEvent.select`, one handler at a time and nothing kept.
    A matcher value over ``hookbus.limits.stringBytes`` cannot be judged: the handler runs."""
    if entry.handler.agents is not None and agent not in entry.handler.agents:
        return False
    value = matcher_value(event, hook_input)
    too_long = value is not None and current_limits().string_too_long(value)
    tool_name = str(hook_input.get("tool_name", ""))
    names = (tool_name, *tool_name_readings(hook_input))  # an MCP tool read several ways: any reading
    matched = names if value == tool_name else (value,)
    if not too_long and not any(compile_matcher(entry.matcher, event).matches(name) for name in matched):
        return False
    condition = entry.handler.if_
    if condition is None:
        return True
    if event not in IF_EVENTS:
        return False
    rule = _if_rule(condition)
    if rule is None:
        return True  # an `if` that cannot be parsed fails open: the hook runs
    tool_input = hook_input.get("tool_input")
    cwd = hook_input.get("cwd")
    arguments = tool_input if isinstance(tool_input, dict) else {}
    where = cwd if isinstance(cwd, str) else None
    home = agent_home(hook_input)
    return any(rule_matches(rule, name, arguments, where, home=home) for name in names)


__all__ = [
    "CHOICES_PER_EVENT",
    "CompiledEvent",
    "CompiledHandler",
    "CompiledPolicy",
    "compile_policy",
    "compiled",
    "selected",
]
