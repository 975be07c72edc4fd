"""``hookbus.session`` compiled once per policy: fields, rules, and what each event changes.

Each fact and counter has a field in the session's state named after it and a digest of its
definition (``f:private_data:3fa2c1``): a reload that leaves a definition as it was finds its
state where it was, and one that changes it starts it afresh. A windowed counter is a ring of
:data:`BUCKETS` + 1 buckets (``c:pushes:9b1e04:7`` holds ``<bucket index>:<count>``), so its state is
bounded whatever the session's length; it counts the events of the last window to window plus
a tenth (the safe side for a limit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Mapping
from typing import Any, Final, Protocol

from bus.policy.entries import HandlerEntry
from bus.policy.schema import PlatformSettings
from bus.policy.sessionschema import CounterDef, EventRules, FactDef, SessionSettings, duration_seconds
from bus.rules.paths import agent_home
from bus.rules.permissions import PermissionRule, parse_rule, rule_matches

#: Buckets of a windowed counter's window (one more is kept: the one filling now).
BUCKETS: Final = 10
#: Built-in fields of every session's state.
VERSION_FIELD: Final = "v"
FIRST_SEEN_FIELD: Final = "t0"
CALLS_FIELD: Final = "n:calls"
FAILURES_FIELD: Final = "n:fails"


def _digest(model: Any) -> str:
    dumped = json.dumps(model.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(dumped.encode()).hexdigest()[:6]


@dataclasses.dataclass(frozen=True, slots=True)
class Trigger:
    """Events of one kind, matched by permission rules (any of ``rules``, none of ``excepted``)."""

    event: str
    rules: tuple[PermissionRule, ...]
    excepted: tuple[PermissionRule, ...]

    @classmethod
    def of(cls, item: EventRules) -> Trigger:
        return cls(item.event, tuple(map(parse_rule, item.rules)), tuple(map(parse_rule, item.except_)))

    def matches(self, event: str, hook_input: Mapping[str, Any]) -> bool:
        """Whether this event is one of them. A call that cannot be judged (over ``hookbus.limits``)
        meets every rule and no exception: a fact it would set is set (the safe side of a taint)."""
        if event != self.event:
            return False
        if not self.rules and not self.excepted:
            return True
        tool_name = str(hook_input.get("tool_name", ""))
        tool_input = hook_input.get("tool_input")
        arguments = tool_input if isinstance(tool_input, dict) else {}
        cwd = hook_input.get("cwd")
        where = cwd if isinstance(cwd, str) else None
        home = agent_home(hook_input)
        if self.rules and not any(
            rule_matches(r, tool_name, arguments, where, kind="deny", home=home) for r in self.rules
        ):
            return False
        return not any(rule_matches(r, tool_name, arguments, where, kind="allow", home=home) for r in self.excepted)


@dataclasses.dataclass(frozen=True, slots=True)
class Fact:
    name: str
    field: str
    set_by: tuple[Trigger, ...]
    cleared_by: tuple[Trigger, ...]
    ttl_ms: int | None

    @classmethod
    def of(cls, name: str, definition: FactDef) -> Fact:
        ttl = None if definition.ttl is None else int(duration_seconds(definition.ttl) * 1000)
        return cls(
            name,
            f"f:{name}:{_digest(definition)}",
            tuple(map(Trigger.of, definition.set_by)),
            tuple(map(Trigger.of, definition.cleared_by)),
            ttl,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Counter:
    name: str
    field: str
    count: tuple[Trigger, ...]
    #: Width of one bucket in ms; None: one count for the whole session.
    bucket_ms: int | None

    @classmethod
    def of(cls, name: str, definition: CounterDef) -> Counter:
        window = None if definition.window is None else duration_seconds(definition.window)
        bucket_ms = None if window is None else max(1, int(window * 1000 / BUCKETS))
        return cls(name, f"c:{name}:{_digest(definition)}", tuple(map(Trigger.of, definition.count)), bucket_ms)


class SessionPolicy:
    """A policy's session definitions, compiled; :attr:`defined` False when it keeps no state."""

    def __init__(self, settings: SessionSettings, conditioned: bool = False) -> None:
        """``conditioned``: some handler of the policy has a ``when:`` (built-in counters need state)."""
        self.settings = settings
        self.defined = settings.defined or conditioned
        self.facts = {name: Fact.of(name, d) for name, d in settings.facts.items()}
        self.counters = {name: Counter.of(name, d) for name, d in settings.counters.items()}
        self.budgets = settings.budgets
        self.loop_gate = settings.loop_gate
        self.ttl_ms = int(duration_seconds(settings.ttl) * 1000)
        self.max_sessions = settings.max_sessions
        #: The events any definition reads (every other event changes nothing but the built-ins).
        self.events = frozenset(t.event for f in self.facts.values() for t in (*f.set_by, *f.cleared_by)) | frozenset(
            t.event for c in self.counters.values() for t in c.count
        )
        #: Whether it decides PreToolUse on its own (a budget or the loop gate), with no handler.
        self.decides = bool(self.budgets or self.loop_gate)


class _Policy(Protocol):
    @property
    def settings(self) -> PlatformSettings: ...
    @property
    def by_event(self) -> Mapping[str, tuple[HandlerEntry, ...]]: ...


_COMPILED: Final[weakref.WeakKeyDictionary[Any, SessionPolicy]] = weakref.WeakKeyDictionary()


def session_policy(policy: _Policy) -> SessionPolicy:
    """The compiled session definitions of ``policy`` (compiled once, dropped with it)."""
    found = _COMPILED.get(policy)
    if found is None:
        conditioned = any(e.handler.when is not None for entries in policy.by_event.values() for e in entries)
        found = _COMPILED[policy] = SessionPolicy(policy.settings.session, conditioned)
    return found


__all__ = [
    "BUCKETS",
    "CALLS_FIELD",
    "FAILURES_FIELD",
    "FIRST_SEEN_FIELD",
    "VERSION_FIELD",
    "Counter",
    "Fact",
    "SessionPolicy",
    "Trigger",
    "session_policy",
]
