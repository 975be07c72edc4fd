"""A session's state as the dispatcher reads it, and the conditions judged on it.

:class:`SessionState` is the session's hash as Redis holds it (fields to values, plus its
version). :class:`SessionView` reads it under one policy at one instant: whether a fact is
set (and since when), what a counter says, whether a ``when:`` holds, and which facts made it
hold (named in the reason of a decision they led to).
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Final

from bus.policy.sessionschema import Threshold, When, duration_seconds
from bus.session.definitions import (
    BUCKETS,
    BUILTIN_FIELDS,
    FIRST_SEEN_FIELD,
    VERSION_FIELD,
    Counter,
    SessionPolicy,
)

#: Key of what a state's memo carries to the next state as long as none of the fields it was
#: worked out of changed (:func:`carry`): those entries by key, and every field any of them read.
CARRIED: Final = "carried"
#: Facts set kept per policy, per setting of its facts (past it, they start again).
KEPT_SETTINGS: Final = 256


@dataclasses.dataclass(frozen=True, slots=True)
class SessionState:
    """One session's state: its hash's fields and values (text)."""

    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: What views worked out on this state and may carry to the next (:meth:`following`).
    memo: dict[object, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def following(self, prior: SessionState | None, changed: Iterable[str] | None = None) -> SessionState:
        """This state, noted as the one after ``prior`` with ``changed`` fields (default: the fields
        whose values differ), so that what a view worked out on ``prior`` and reads none of them
        carries over (one state back at most)."""
        if prior is None or prior is self or not prior.memo:
            return self
        if changed is None:
            changed = {field for field, _ in self.fields.items() ^ prior.fields.items()}
        _carry_over(prior.memo, self.memo, frozenset(changed))
        return self

    def advance(self, written: Mapping[str, str | None]) -> None:
        """Move this state on, in place, by ``written`` (None: the field is deleted): what the
        settle of an event decided on it applied. What it carries and reads a field written is
        dropped. The dispatcher's copy of a session's state moves on so: none of its fields is
        copied per event."""
        fields = self.fields
        assert isinstance(fields, dict), "a state moves on only when its fields are its own"
        if None in written.values():
            for field, value in written.items():
                if value is None:
                    fields.pop(field, None)
                else:
                    fields[field] = value
        else:
            fields.update(written)  # no None: checked above
        memo = self.memo
        if (carried_now := memo.get(CARRIED)) is not None and not written.keys().isdisjoint(carried_now[1]):
            del memo[CARRIED]
            _carry_over({CARRIED: carried_now}, memo, written.keys())

    @property
    def version(self) -> int:
        """How many settled events changed it (0: none yet)."""
        return _int(self.fields.get(VERSION_FIELD))

    @classmethod
    def of(cls, raw: Mapping[bytes, bytes] | Mapping[str, str] | Iterable[object] | None) -> SessionState:
        """From ``HGETALL`` (a mapping), or its flat list of fields and values."""
        if not raw:
            return cls()
        if isinstance(raw, Mapping):
            pairs = list(raw.items())
        else:
            flat = raw if isinstance(raw, list) else list(raw)
            if len(flat) % 2 == 0 and set(map(type, flat)) == {str}:  # the settle script's JSON: text already
                items = iter(flat)
                return cls(dict(zip(items, items, strict=False)))  # even: checked
            pairs = list(zip(flat[::2], flat[1::2], strict=True))
        return cls({_text(k): _text(v) for k, v in pairs})


def _carry_over(before: dict[object, Any], memo: dict[object, Any], changed: AbstractSet[str]) -> None:
    """Copy to ``memo`` what ``before`` (a state's memo) carries that reads none of ``changed``."""
    found = before.get(CARRIED)
    if found is None:
        return
    entries, reads = found
    if changed.isdisjoint(reads):  # all of it: copied, each state adds its own
        memo[CARRIED] = (dict(entries), reads)
        return
    # each entry: (weak reference to its owner, value, fields read)
    kept = {key: entry for key, entry in entries.items() if changed.isdisjoint(entry[2])}
    if kept:
        memo[CARRIED] = (kept, frozenset().union(*(entry[2] for entry in kept.values())))


def carried_key(tag: str, owner: object) -> tuple[str, int]:
    """The key of what is kept as ``tag`` of ``owner`` (:func:`carry`) among what a state's memo
    carries (``memo[CARRIED][0]``: entries ``(weak reference to owner, value, fields read)``)."""
    return (tag, id(owner))


def carry(state: SessionState, tag: str, owner: object, value: object, fields: frozenset[str]) -> None:
    """Keep ``value`` on ``state`` as ``tag`` of ``owner`` (held weakly), worked out of ``fields``
    alone: it carries to the states that follow as long as none of them changes."""
    memo, key, entry = state.memo, carried_key(tag, owner), (weakref.ref(owner), value, fields)
    found = memo.get(CARRIED)
    if found is None:
        memo[CARRIED] = ({key: entry}, fields)
        return
    found[0][key] = entry
    if not fields <= found[1]:
        memo[CARRIED] = (found[0], found[1] | fields)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


class SessionView:
    """A session's state read under one policy at ``now_ms``."""

    __slots__ = ("_facts", "fleet", "now_ms", "policy", "state", "used")

    def __init__(
        self, policy: SessionPolicy, state: SessionState, now_ms: int, fleet: Callable[[Counter], float] | None = None
    ) -> None:
        """``fleet(counter)``: a tenant or agent counter's value as this process knows it (none: 0)."""
        self.policy, self.state, self.now_ms, self.fleet = policy, state, now_ms, fleet
        #: The facts that made a condition hold, in the order they were read.
        self.used: dict[str, None] = {}
        self._facts: dict[str, int | None] = {}

    def fact_ms(self, name: str) -> int | None:
        """When the fact was last set, if it is set now (not cleared, not expired)."""
        try:
            return self._facts[name]
        except KeyError:
            found = self._facts[name] = self._fact_ms(name)
            return found

    def _fact_ms(self, name: str) -> int | None:
        fact = self.policy.facts.get(name)
        if fact is None:
            return None
        raw = self.state.fields.get(fact.field)
        if not raw:
            return None
        set_ms = _int(raw)
        if fact.ttl_ms is not None and self.now_ms - set_ms >= fact.ttl_ms:
            return None
        return set_ms

    def facts(self) -> list[str]:
        """The names of the facts set now, in definition order (kept per setting of the facts: what
        a fact that never expires says is its field's text)."""
        policy = self.policy
        if not policy.expiring:  # kept on the state (carry()), or carried to it: memo[CARRIED][0][key]
            found_now = self.state.memo.get(CARRIED)
            entry = None if found_now is None else found_now[0].get(policy.facts_key)
            if entry is not None and entry[0]() is policy:
                return list(entry[1])
        key = (*map(self.state.fields.get, policy.lasting_fields), *map(self.fact_ms, policy.expiring))
        found = policy.kept_facts.get(key)
        if found is None:
            found = tuple(name for name in policy.facts if self.fact_ms(name) is not None)
            if len(policy.kept_facts) >= KEPT_SETTINGS:
                policy.kept_facts.clear()
            policy.kept_facts[key] = found
        if not policy.expiring:  # what it says depends on those fields alone
            carry(self.state, "facts", policy, found, policy.lasting_set)
        return list(found)

    def counter(self, name: str) -> float:
        """A counter's value now (a built-in's too)."""
        if name in BUILTIN_FIELDS:
            value = _int(self.state.fields.get(BUILTIN_FIELDS[name]))
            return value / 1_000_000 if name == "cost_usd" else value  # kept in micro-dollars
        if name == "session_age_seconds":
            first = _int(self.state.fields.get(FIRST_SEEN_FIELD))
            return max(0.0, (self.now_ms - first) / 1000) if first else 0.0
        counter = self.policy.counters.get(name)
        if counter is None:
            wide = self.policy.fleet.get(name)
            return self.fleet(wide) if wide is not None and self.fleet is not None else 0
        if counter.bucket_ms is None:
            return _int(self.state.fields.get(counter.field))
        oldest = self.now_ms // counter.bucket_ms - BUCKETS
        total = 0
        for raw in map(self.state.fields.get, counter.slots):
            if raw:
                index, _, count = raw.partition(":")
                if _int(index) >= oldest:
                    total += _int(count)
        return total

    def budgets_left(self) -> dict[str, float]:
        """Each budget's units left now."""
        return {name: max(0.0, b.limit - self.counter(b.counter)) for name, b in self.policy.budgets.items()}

    def budgets_moved(self, over: Mapping[str, str]) -> dict[str, float]:
        """The budgets an event moves, each with its units left once ``over`` (what its operations
        write, :func:`bus.session.apply.laid_over`) is laid over the state's fields at this instant:
        those reading a field of ``over``, and those on the session's age, which every event moves.
        The state is not copied: only the fields those budgets read are."""
        policy, fields = self.policy, self.state.fields
        names = dict.fromkeys(name for field in over for name in policy.budgets_by_field.get(field, ()))
        names.update(dict.fromkeys(policy.budgets_unread))
        if not names:
            return {}
        read = policy.budget_fields
        laid = {f: over[f] if f in over else fields.get(f, "") for name in names for f in read[name]}
        if policy.budgets_unread:  # the session's age reads when it was first seen
            laid[FIRST_SEEN_FIELD] = over.get(FIRST_SEEN_FIELD) or fields.get(FIRST_SEEN_FIELD, "")
        view = SessionView(policy, SessionState(laid), self.now_ms, self.fleet)
        budgets = policy.budgets
        return {name: max(0.0, budgets[name].limit - view.counter(budgets[name].counter)) for name in names}

    def holds(self, when: When) -> bool:
        """Whether ``when`` holds now; the facts that made it hold are added to :attr:`used`."""
        found = [name for name in when.facts if self.fact_ms(name) is not None]
        if len(found) < len(when.facts):
            return False
        if when.any_facts:
            some = [name for name in when.any_facts if self.fact_ms(name) is not None]
            if not some:
                return False
            found += some
        if any(self.fact_ms(name) is not None for name in when.not_facts):
            return False
        for name, span in when.within.items():
            set_ms = self.fact_ms(name)
            if set_ms is None or self.now_ms - set_ms > ms_of(span):
                return False
            found.append(name)
        for first, second in when.after.items():
            first_ms, second_ms = self.fact_ms(first), self.fact_ms(second)
            if first_ms is None or (second_ms is not None and first_ms <= second_ms):
                return False
            found.append(first)
        for name, bound in when.counters.items():
            if not within(self.counter(name), bound):
                return False
        if not all(self.holds(nested) for nested in when.all):
            return False
        if when.any and not any(self.holds(nested) for nested in when.any):
            return False
        if when.not_ is not None and SessionView(self.policy, self.state, self.now_ms, self.fleet).holds(when.not_):
            return False
        for name in found:
            self.used[name] = None
        return True


@functools.lru_cache(maxsize=1024)
def ms_of(span: str) -> float:
    """A duration's milliseconds (kept for the most recent 1024)."""
    return duration_seconds(span) * 1000


def within(value: float, bound: Threshold) -> bool:
    """Whether ``value`` meets every bound of ``bound``."""
    return (
        (bound.gt is None or value > bound.gt)
        and (bound.gte is None or value >= bound.gte)
        and (bound.lt is None or value < bound.lt)
        and (bound.lte is None or value <= bound.lte)
    )


__all__ = [
    "CARRIED",
    "KEPT_SETTINGS",
    "SessionState",
    "SessionView",
    "carried_key",
    "carry",
    "ms_of",
    "within",
]
