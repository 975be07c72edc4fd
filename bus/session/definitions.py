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

from bus.policy import verdictcache
from bus.policy.entries import HandlerEntry
from bus.policy.rulelists import Call, RuleList, compile_lists, first_verdict, read_call
from bus.policy.schema import PlatformSettings
from bus.policy.sessionschema import (
    BudgetDef,
    CounterDef,
    EventRules,
    FactDef,
    OnLimit,
    SessionSettings,
    duration_seconds,
)
from bus.rules.limits import current_limits
from bus.rules.permissions import parse_rule

#: Buckets of a windowed counter's window (one more is kept: the one filling now).
BUCKETS: Final = 10
#: Matches of calls to triggers kept per policy (past it, they start again).
MATCHES_KEPT: Final = 4096
#: Built-in fields of every session's state.
VERSION_FIELD: Final = "v"
FIRST_SEEN_FIELD: Final = "t0"
CALLS_FIELD: Final = "n:calls"
FAILURES_FIELD: Final = "n:fails"
TOKENS_FIELD: Final = "n:tokens"
#: The session's spent cost in micro-dollars (:mod:`bus.session.usage`).
COST_FIELD: Final = "n:cost"
#: The built-in counters that read one field of the state, and that field (``cost_usd``'s in
#: micro-dollars).
BUILTIN_FIELDS: Final = {
    "tool_calls": CALLS_FIELD,
    "failures": FAILURES_FIELD,
    "tokens": TOKENS_FIELD,
    "cost_usd": COST_FIELD,
}


def _digest(model: Any) -> str:
    fields = model.model_dump(mode="json", by_alias=True)
    if isinstance(model, CounterDef) and model.scope == "session":
        # A session counter's digest as it was before counters had a scope: an upgrade keeps its counts.
        fields = {k: v for k, v in fields.items() if k not in ("scope", "decisions", "onLimit")} | {"per": "session"}
    dumped = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(dumped.encode()).hexdigest()[:6]


@dataclasses.dataclass(frozen=True, slots=True)
class Trigger:
    """Events of one kind that match any of ``rules`` (none: every event of the kind) and none of
    ``excepted``; rules are read as a ``rule`` handler's deny list, exceptions as its allow list."""

    event: str
    rules: tuple[str, ...]
    excepted: tuple[RuleList, ...]

    @classmethod
    def of(cls, item: EventRules) -> Trigger:
        for text in (*item.rules, *item.except_):
            parse_rule(text)  # ValueError for a rule that does not parse (the file's check reports it)
        excepted = compile_lists((), (), tuple(item.except_)) if item.except_ else ()
        return cls(item.event, tuple(item.rules), excepted)

    def matches(self, event: str, hook_input: Mapping[str, Any]) -> bool:
        """Whether this event is one of them (one trigger alone; :meth:`SessionPolicy.matched` tries all at once)."""
        if event != self.event:
            return False
        given = hook_input if isinstance(hook_input, dict) else dict(hook_input)
        if self.rules and first_verdict(compile_lists(self.rules, (), ()), given) is None:
            return False
        return self.unexcepted(given)

    def unexcepted(self, hook_input: dict[str, Any], call: Call | None = None) -> bool:
        return not self.excepted or first_verdict(self.excepted, hook_input, call) is None


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
    #: ``session``, or ``tenant``/``agent``: counted apart from the session (:mod:`bus.session.fleet`).
    scope: str = "session"
    #: The decisions counted (empty: every one); tenant and agent scope only.
    decisions: frozenset[str] = frozenset()
    on_limit: OnLimit | None = None
    #: A windowed counter's bucket fields (``<field>:<n>``), by slot.
    slots: tuple[str, ...] = ()

    @classmethod
    def of(cls, name: str, definition: CounterDef) -> Counter:
        window = None if definition.window is None else duration_seconds(definition.window)
        bucket_ms = None if window is None else max(1, int(window * 1000 / BUCKETS))
        field = f"c:{name}:{_digest(definition)}"
        return cls(
            name,
            field,
            tuple(map(Trigger.of, definition.count)),
            bucket_ms,
            definition.scope,
            frozenset(definition.decisions),
            definition.on_limit,
            () if bucket_ms is None else tuple(f"{field}:{slot}" for slot in range(BUCKETS + 1)),
        )


class SessionPolicy:
    """A policy's session definitions, compiled; :attr:`defined` False when it keeps no state."""

    def __init__(self, settings: SessionSettings, conditioned: bool = False) -> None:
        """``conditioned``: some handler of the policy has a ``when:`` (built-in counters need state)."""
        self.settings = settings
        self.defined = settings.defined or conditioned
        self.facts = {name: Fact.of(name, d) for name, d in settings.facts.items()}
        every = {name: Counter.of(name, d) for name, d in settings.counters.items()}
        #: The session's own counters (in its state).
        self.counters = {name: c for name, c in every.items() if c.scope == "session"}
        #: The counters of a whole tenant or agent, counted once an event is settled (:mod:`bus.session.fleet`).
        self.fleet = {name: c for name, c in every.items() if c.scope != "session"}
        self.budgets = settings.budgets
        self.loop_gate = settings.loop_gate
        self.ttl_ms = int(duration_seconds(settings.ttl) * 1000)
        self.max_sessions = settings.max_sessions
        #: The events any definition reads (every other event changes nothing but the built-ins).
        self.events = frozenset(t.event for f in self.facts.values() for t in (*f.set_by, *f.cleared_by)) | frozenset(
            t.event for c in every.values() for t in c.count
        )
        #: Per event, the facts and counters whose triggers name it.
        self._by_event: dict[str, list[tuple[str, str, Trigger]]] = {}
        for fact in self.facts.values():
            for kind, triggers in (("set", fact.set_by), ("clear", fact.cleared_by)):
                for trigger in triggers:
                    self._by_event.setdefault(trigger.event, []).append((kind, fact.name, trigger))
        for counter in every.values():
            for trigger in counter.count:
                self._by_event.setdefault(trigger.event, []).append(("count", counter.name, trigger))
        #: Per event, what the first pass of :meth:`matched` starts from: the triggers with no rules
        #: (met by every event), those with rules, and all their rules as one compiled deny list.
        self._first_pass: dict[str, tuple[tuple[int, ...], frozenset[int], tuple[RuleList, ...]]] = {}
        for event, entries in self._by_event.items():
            texts = tuple(dict.fromkeys(text for _, _, t in entries for text in t.rules))
            self._first_pass[event] = (
                tuple(n for n, (_, _, t) in enumerate(entries) if not t.rules),
                frozenset(n for n, (_, _, t) in enumerate(entries) if t.rules),
                compile_lists(texts, (), ()) if texts else (),
            )
        #: Per event, every list its triggers read (what a kept match depends on), and the matches kept.
        self._lists = {
            event: (*first[2], *(lst for _, _, t in self._by_event[event] for lst in t.excepted))
            for event, first in self._first_pass.items()
        }
        #: The events none of whose lists names a parameter: a kept match is then the call's alone.
        self._unparametered = frozenset(e for e, lists in self._lists.items() if not any(lst.params for lst in lists))
        self._kept: dict[object, Matched] = {}
        #: Whether it decides PreToolUse on its own (a budget or the loop gate), with no handler.
        self.decides = bool(self.budgets or self.loop_gate)
        #: Each fact's and session counter's position in definition order; the facts by field.
        self.fact_positions = {name: n for n, name in enumerate(self.facts)}
        self.counter_positions = {name: n for n, name in enumerate(self.counters)}
        self.fact_by_field = {fact.field: fact.name for fact in self.facts.values()}
        #: Per counter, the budgets on it: (position in definition order, name).
        self.budgets_of: dict[str, list[tuple[int, str]]] = {}
        for n, (name, budget) in enumerate(self.budgets.items()):
            self.budgets_of.setdefault(budget.counter, []).append((n, name))
        #: The fields of the facts that never expire, and the names of those that do.
        self.lasting_fields = tuple(fact.field for fact in self.facts.values() if fact.ttl_ms is None)
        self.expiring = tuple(fact.name for fact in self.facts.values() if fact.ttl_ms is not None)
        self.lasting_set = frozenset(self.lasting_fields)
        #: Per budget, the fields its counter reads; per field, the budgets reading it; the budgets
        #: whose counter reads no field of the session's own (its age: every event moves them).
        self.budget_fields: dict[str, tuple[str, ...]] = {}
        self.budgets_by_field: dict[str, list[str]] = {}
        for name, budget in self.budgets.items():
            read = self.counter_reads(budget.counter)
            self.budget_fields[name] = fields = () if read is None else read[0]
            for field in fields:
                self.budgets_by_field.setdefault(field, []).append(name)
        self.budgets_unread = tuple(name for name, fields in self.budget_fields.items() if not fields)
        #: Per budget whose counter is a count in one field (a session counter with no window, a
        #: built-in but ``cost_usd``), that field: what is left of it reads one number.
        self.budget_count_field = {name: f for name, b in self.budgets.items() if (f := _count_field(self, b.counter))}
        #: The budgets a PreToolUse checks (name, definition, whether its counter is measured, the field
        #: it reads when it is a count in one field), in
        #: definition order, per set of counters it counts (:func:`bus.session.effects.verdicts`).
        self.kept_budgets_on: dict[tuple[str, ...], list[tuple[str, BudgetDef, bool, str | None]]] = {}
        #: The key of the facts set among what a state carries (``bus.session.state.carried_key("facts", self)``).
        self.facts_key = ("facts", id(self))
        #: The facts set, per setting of every fact (:meth:`bus.session.state.SessionView.facts`).
        self.kept_facts: dict[tuple[object, ...], tuple[str, ...]] = {}
        #: What a reader of the policy keeps per choice of handlers (:mod:`workers.engine.sessions`),
        #: and how many copies of handlers naming facts those keep in all.
        self.plans: dict[object, Any] = {}
        self.noted = 0

    def counter_reads(self, name: str) -> tuple[tuple[str, ...], int | None] | None:
        """The fields of the session's state counter ``name`` reads, and its buckets' width (None:
        not windowed); None when what it says depends on more (the session's age, a tenant's or
        agent's count) or it is not defined."""
        own = self.counters.get(name)
        if own is not None:
            return ((own.field,), None) if own.bucket_ms is None else (own.slots, own.bucket_ms)
        field = BUILTIN_FIELDS.get(name)
        return None if field is None else ((field,), None)

    def matched(self, event: str, hook_input: Mapping[str, Any], call: Call | None = None) -> Matched:
        """The facts ``event`` sets and clears and the counters it counts (``call``: the event's
        tool call as rule lists read it, :func:`bus.policy.rulelists.read_call`, when the caller has
        it); kept per call as a ``rule`` handler's verdicts are (:mod:`bus.policy.verdictcache`).

        Every rule of the event's triggers is one deny list, compiled as a ``rule`` handler's is
        (one regex per program): one pass finds the first rule that matches, and the next pass
        leaves out the triggers found, so an event costs one pass more than it has triggers met,
        however many the policy defines. A call that cannot be judged (over ``hookbus.limits``)
        meets every rule and no exception: a fact it would set is set (the safe side of a taint)."""
        if call is not None and (subject := call.subject) is not None and event in self._unparametered:
            kept = self._kept.get((event, call.tool_name, subject, call.cwd, call.home, id(current_limits())))
            if kept is not None:  # the usual call: a kept match, found first
                return kept
        entries = self._by_event.get(event, ())
        if not entries:
            return Matched()
        given = hook_input if isinstance(hook_input, dict) else dict(hook_input)
        if call is None:
            call = read_call(given)
        key: tuple[object, ...] | None = None
        if call is not None and call.subject is not None:
            tool_name, tool_input, cwd, home, _, shell, subject = call
            if event in self._unparametered:  # verdictcache.call_key but the lists, which are the event's
                key = (event, tool_name, subject, cwd, home, id(current_limits()))
            else:
                read = verdictcache.call_key(self._lists[event], tool_name, tool_input, cwd, home, shell, subject)
                key = None if read is None else (event, read)
            kept = self._kept.get(key) if key is not None else None
            if kept is not None:
                return kept
        found = self._match(event, entries, given, call)
        if key is not None:
            if len(self._kept) >= MATCHES_KEPT:
                self._kept.clear()
            self._kept[key] = found
        return found

    def _match(
        self, event: str, entries: list[tuple[str, str, Trigger]], given: dict[str, Any], call: Call | None
    ) -> Matched:
        found = Matched()
        always, left, lists = self._first_pass[event]
        hits = list(always)
        while left:
            verdict = first_verdict(lists, given, call)
            if verdict is None:
                break
            met = {n for n in left if verdict[1] in entries[n][2].rules}
            hits += met
            left -= met
            texts = tuple(dict.fromkeys(text for n in sorted(left) for text in entries[n][2].rules))
            lists = compile_lists(texts, (), ()) if texts else ()
        for n in sorted(hits):
            kind, name, trigger = entries[n]
            if name not in getattr(found, kind) and trigger.unexcepted(given, call):
                getattr(found, kind)[name] = None
        return found


def _count_field(policy: SessionPolicy, name: str) -> str | None:
    """The field of counter ``name`` when it is a count in one field (None: it is not)."""
    if name in BUILTIN_FIELDS:  # as SessionView.counter() reads them: a built-in first
        return BUILTIN_FIELDS[name] if name != "cost_usd" else None
    own = policy.counters.get(name)
    return own.field if own is not None and own.bucket_ms is None else None


@dataclasses.dataclass(slots=True)
class Matched:
    """What one event's triggers matched, by name, in definition order."""

    set: dict[str, None] = dataclasses.field(default_factory=dict)
    clear: dict[str, None] = dataclasses.field(default_factory=dict)
    count: dict[str, None] = dataclasses.field(default_factory=dict)
    #: The operations of a PreToolUse that matched these, once worked out (kept with the match).
    pre_ops: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: Whether what those write depends on when they are applied (:func:`bus.session.effects.timed`).
    pre_timed: bool = dataclasses.field(default=True, compare=False, repr=False)
    #: When those only add one to counts (``I`` operations), the fields they count.
    pre_counts: tuple[str, ...] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: And the budgets on those counts: (name, limit, field), when each is a count in one field.
    pre_budgets: tuple[tuple[str, float, str], ...] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: The budgets a PreToolUse that matched these checks, once worked out (:func:`bus.session.effects.verdicts`).
    checked: list[tuple[str, BudgetDef, bool, str | None]] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )


class _Policy(Protocol):
    @property
    def settings(self) -> PlatformSettings: ...
    @property
    def by_event(self) -> Mapping[str, tuple[HandlerEntry, ...]]: ...


_COMPILED: Final[weakref.WeakKeyDictionary[Any, SessionPolicy]] = weakref.WeakKeyDictionary()


#: The policy last asked for (held weakly) and its session definitions: most events of a
#: dispatcher are of one policy, found here without the weak dictionary's Python-level lookup.
_last: tuple[weakref.ref[Any], SessionPolicy] | None = None


def session_policy(policy: _Policy) -> SessionPolicy:
    """The compiled session definitions of ``policy`` (compiled once, dropped with it)."""
    global _last
    last = _last
    if last is not None and last[0]() is policy:
        return last[1]
    found = _COMPILED.get(policy)
    if found is None:
        conditioned = any(e.handler.when is not None for entries in policy.by_event.values() for e in entries)
        found = _COMPILED[policy] = SessionPolicy(policy.settings.session, conditioned)
    _last = (weakref.ref(policy), found)
    return found


__all__ = [
    "BUCKETS",
    "BUILTIN_FIELDS",
    "CALLS_FIELD",
    "COST_FIELD",
    "FAILURES_FIELD",
    "FIRST_SEEN_FIELD",
    "MATCHES_KEPT",
    "TOKENS_FIELD",
    "VERSION_FIELD",
    "Counter",
    "Fact",
    "Matched",
    "SessionPolicy",
    "Trigger",
    "session_policy",
]
