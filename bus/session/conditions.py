"""``when:`` conditions compiled once per policy into closures, judged as
:meth:`bus.session.state.SessionView.holds` judges them (the reference; the tests compare the two).

A condition that reads no time (facts set or not and their order, no ``within`` and no counter)
is *static*: what it says depends only on when each fact it reads was set, so a caller may keep
its answer for as long as those facts' settings stay as they were (:class:`Conditions`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Final

from bus.policy.sessionschema import When
from bus.session.definitions import SessionPolicy
from bus.session.state import CARRIED, SessionView, carried_key, carry, ms_of, within

#: ``check(view, used)``: whether the condition holds on ``view``; the facts that made it (and
#: any nested condition judged on the way) hold are added to ``used``, as ``holds`` adds them.
Check = Callable[[SessionView, dict[str, None]], bool]

#: Answers kept per :class:`Conditions`: sets of facts' settings (past it, it starts again).
KEPT_ANSWERS: Final = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    """One condition, compiled: its check, and whether it reads the time."""

    check: Check
    static: bool
    #: Whether it reads how long ago a fact was set (``within``), nested conditions included.
    timed: bool = False


def compile_when(when: When) -> Compiled:
    """``when`` as a closure (the same answer and the same facts used as ``SessionView.holds``)."""
    facts = tuple(when.facts)
    any_facts = tuple(when.any_facts)
    not_facts = tuple(when.not_facts)
    spans = tuple((name, ms_of(span)) for name, span in when.within.items())
    after = tuple(when.after.items())
    counters = tuple(when.counters.items())
    alls = tuple(compile_when(nested) for nested in when.all)
    anys = tuple(compile_when(nested) for nested in when.any)
    negated = None if when.not_ is None else compile_when(when.not_)
    nested = (*alls, *anys, *((negated,) if negated else ()))
    static = not spans and not counters and all(c.static for c in nested)
    timed = bool(spans) or any(c.timed for c in nested)
    all_checks = tuple(c.check for c in alls)
    any_checks = tuple(c.check for c in anys)
    not_check = None if negated is None else negated.check

    def check(view: SessionView, used: dict[str, None]) -> bool:
        fact_ms = view.fact_ms
        for name in facts:
            if fact_ms(name) is None:
                return False
        found = list(facts)
        if any_facts:
            some = [name for name in any_facts if fact_ms(name) is not None]
            if not some:
                return False
            found += some
        for name in not_facts:
            if fact_ms(name) is not None:
                return False
        for name, span_ms in spans:
            set_ms = fact_ms(name)
            if set_ms is None or view.now_ms - set_ms > span_ms:
                return False
            found.append(name)
        for first, second in after:
            first_ms, second_ms = fact_ms(first), fact_ms(second)
            if first_ms is None or (second_ms is not None and first_ms <= second_ms):
                return False
            found.append(first)
        for name, bound in counters:
            if not within(view.counter(name), bound):
                return False
        for nested in all_checks:
            if not nested(view, used):
                return False
        if any_checks and not any(nested(view, used) for nested in any_checks):
            return False
        if not_check is not None and not_check(SessionView(view.policy, view.state, view.now_ms, view.fleet), {}):
            return False
        for name in found:
            used[name] = None
        return True

    return Compiled(check, static, timed)


def _shape(when: When) -> str:
    return json.dumps(when.model_dump(mode="json", by_alias=True), sort_keys=True)


class Conditions:
    """Distinct ``when:`` conditions of some handlers, compiled, and the static ones' answers kept
    per setting of the facts they read (:meth:`answers`)."""

    def __init__(self, policy: SessionPolicy, whens: Iterable[When]) -> None:
        by_shape: dict[str, int] = {}
        #: Per ``id`` of each condition given, its position among the distinct ones.
        self.index: dict[int, int] = {}
        self.compiled: list[Compiled] = []
        self._whens: list[When] = []  # held: the ids in :attr:`index` stay theirs
        for when in whens:
            if id(when) in self.index:
                continue
            shape = _shape(when)
            if shape not in by_shape:
                by_shape[shape] = len(self.compiled)
                self.compiled.append(compile_when(when))
            self.index[id(when)] = by_shape[shape]
            self._whens.append(when)
        self.static = all(c.static for c in self.compiled)
        names: set[str] = set()
        for when in self._whens:
            names |= when.fact_names()
        known = [policy.facts[name] for name in sorted(names) if name in policy.facts]
        #: The fields of the facts read that never expire (their text says all), and the names of the others.
        self._fields = tuple(fact.field for fact in known if fact.ttl_ms is None)
        self._expiring = tuple(fact.name for fact in known if fact.ttl_ms is not None)
        self._kept: dict[tuple[object, ...], list[list[str] | None]] = {}
        self._carried_key = carried_key("answers", self)
        # Whether all the answers depend on the state's fields alone and on the current bucket of
        # the windowed counters read (no fact that expires, no within, no session age, no tenant
        # or agent count): then they are kept on the state and carry to the next as long as none
        # of those fields changes, checked against the buckets they were worked out in.
        reads = [policy.counter_reads(name) for when in self._whens for name in when.counter_names()]
        self._carried = not self._expiring and not any(c.timed for c in self.compiled) and None not in reads
        self._widths = tuple(sorted({width for _, width in filter(None, reads) if width is not None}))
        self._field_set = frozenset((*self._fields, *(field for fields, _ in filter(None, reads) for field in fields)))

    def answers(self, view: SessionView) -> list[list[str] | None]:
        """Per distinct condition, the facts that made it hold (in the order ``holds`` names them),
        or None when it does not hold; the static ones' answers are kept per setting of their facts."""
        buckets: tuple[int, ...] = ()
        if self._carried:  # kept on the state (carry()), or carried to it
            if self._widths:
                buckets = tuple(map(view.now_ms.__floordiv__, self._widths))
            found = view.state.memo.get(CARRIED)  # what it carries (carry())
            entry = None if found is None else found[0].get(self._carried_key)
            if entry is not None and entry[0]() is self and entry[1][0] == buckets:
                return entry[1][1]  # type: ignore[no-any-return]
        get = view.state.fields.get
        key = (*map(get, self._fields), *map(view.fact_ms, self._expiring))
        answers = self._kept.get(key)
        if answers is None:
            answers = [_judge(c.check, view) if c.static else None for c in self.compiled]
            if len(self._kept) >= KEPT_ANSWERS:
                self._kept.clear()
            self._kept[key] = answers
        if not self.static:
            answers = [_judge(c.check, view) if not c.static else answers[n] for n, c in enumerate(self.compiled)]
        if self._carried:
            carry(view.state, "answers", self, (buckets, answers), self._field_set)
        return answers


def _judge(check: Check, view: SessionView) -> list[str] | None:
    used: dict[str, None] = {}
    return list(used) if check(view, used) else None


__all__ = ["KEPT_ANSWERS", "Check", "Compiled", "Conditions", "compile_when"]
