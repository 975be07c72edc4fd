"""Checking a file's session policy when it loads: names, rules, and conditions that cannot hold.

A ``when:`` may only name facts and counters its file defines under ``hookbus.session`` (or the
built-in counters); a ``setBy``/``clearedBy``/``count`` rule must parse and belong to a tool
event; a fact that no event sets or a counter that counts no event (each rule of its ``setBy`` or
``count`` is excepted by its own ``except``), a condition that can never hold (a fact both
required and excluded, bounds that leave no value) and a counter named as a built-in one are
errors. A counter no condition or budget reads is a note. Every problem carries its line
(:class:`bus.policy.loading` reports them with the file's).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from pydantic import ValidationError

from bus.hooks.events import IF_EVENTS
from bus.policy.schema import Handler, Loc, MatcherGroup, suggest
from bus.policy.sessionschema import BUILTIN_COUNTERS, EventRules, SessionSettings, When, both
from bus.rules.permissions import parse_rule


class Checker(Protocol):
    """What checking reports to (:class:`bus.policy.loading._Checker`)."""

    def problem(self, loc: Loc, message: str, at: Loc | None = None) -> None: ...
    def note(self, loc: Loc, message: str) -> None: ...


def folded(group: MatcherGroup, handler: Handler) -> Handler:
    """``handler`` with what its group says of every handler: its ``when`` joined to the handler's
    own (both must hold), its ``approval`` (each handler's ``ask`` goes to the approval queue)."""
    if group.approval and not handler.approval:
        handler = handler.model_copy(update={"approval": True})
    if group.when is None:
        return handler
    return handler.model_copy(update={"when": both(group.when, handler.when)})


def whens_of(gloc: Loc, group: MatcherGroup) -> Iterator[tuple[Loc, When]]:
    """Each ``when`` of a group and its handlers, with where it stands."""
    if group.when is not None:
        yield (*gloc, "when"), group.when
    for hi, handler in enumerate(group.hooks):
        if handler.when is not None:
            yield (*gloc, "hooks", hi, "when"), handler.when


def check_session(ck: Checker, platform: dict[str, Any], whens: list[tuple[Loc, When]]) -> None:
    """Report what is wrong with a file's ``hookbus.session`` and the ``when:`` conditions it holds."""
    raw = platform.get("session")
    try:
        session = SessionSettings.model_validate(raw or {}, strict=True, by_alias=True, by_name=False)
    except ValidationError:
        return  # reported with the rest of hookbus:
    base: Loc = ("hookbus", "session")
    lists: list[tuple[Loc, list[EventRules]]] = []
    for name, fact_def in session.facts.items():
        lists += [
            ((*base, "facts", name, "setBy"), fact_def.set_by),
            ((*base, "facts", name, "clearedBy"), fact_def.cleared_by),
        ]
    for name, counter_def in session.counters.items():
        lists.append(((*base, "counters", name, "count"), counter_def.count))
    for loc, items in lists:
        for i, item in enumerate(items):
            _check_rules(ck, (*loc, i), item)
    for name, fact_def in session.facts.items():
        if all(map(_never, fact_def.set_by)):
            ck.problem((*base, "facts", name, "setBy"), f"fact {name!r} is set by no event: {_EXCEPTED}")
    for name in session.counters:
        if name in BUILTIN_COUNTERS:  # a condition or budget naming it would read one or the other
            ck.problem((*base, "counters", name), f"counter {name!r} is a built-in counter's name: give it another")
    for name, counter_def in session.counters.items():
        if all(map(_never, counter_def.count)):
            ck.problem((*base, "counters", name, "count"), f"counter {name!r} counts no event: {_EXCEPTED}")
    fleet = {name for name, d in session.counters.items() if d.scope != "session"}
    counters = {*session.counters, *BUILTIN_COUNTERS}
    read = {name for name in fleet if session.counters[name].on_limit is not None}  # it acts on its own
    for name in sorted(fleet & {*(b.counter for b in session.budgets.values())}):
        ck.problem(
            (*base, "budgets"), f"counter {name!r} is a tenant or agent counter: a budget reads session counters"
        )
    for name, budget in session.budgets.items():
        read.add(budget.counter)
        if budget.counter not in counters:
            hint = suggest(budget.counter, counters)
            ck.problem((*base, "budgets", name, "counter"), f"unknown counter {budget.counter!r}{hint}")
    for loc, when in whens:
        for fact in sorted(when.fact_names() - set(session.facts)):
            hint = suggest(fact, session.facts) or _defined("facts", session.facts)
            ck.problem(loc, f"unknown fact {fact!r}{hint}")
        for counter in sorted(when.counter_names() - counters):
            hint = suggest(counter, counters) or _defined("counters", counters)
            ck.problem(loc, f"unknown counter {counter!r}{hint}")
        read |= when.counter_names()
        if (why := impossible(when)) is not None:
            ck.problem(loc, f"this condition can never hold: {why}")
    for name in session.counters:
        if name not in read:
            ck.note((*base, "counters", name), f"counter {name!r} is not read by any when: or budget")


_EXCEPTED = "every rule is excepted by its own except"


def _never(item: EventRules) -> bool:
    """Whether no event can match ``item``: it has rules, and each is excepted (an ``except`` of the
    same rule, or of its whole tool)."""
    if not item.rules or not item.except_:
        return False
    try:
        rules = [parse_rule(text) for text in item.rules]
        excepts = [parse_rule(text) for text in item.except_]
    except Exception:  # reported by _check_rules
        return False
    return all(
        any(e.tool == r.tool and (e.content is None or e.content.strip("*") == "" or e == r) for e in excepts)
        for r in rules
    )


def _defined(kind: str, names: Any) -> str:
    listed = ", ".join(sorted(names))
    return f" (this file's {kind}: {listed})" if listed else f" (define it under hookbus.session.{kind})"


def _check_rules(ck: Checker, loc: Loc, item: EventRules) -> None:
    if (item.rules or item.except_) and item.event not in IF_EVENTS:
        ck.problem((*loc, "rules"), f"{item.event} is no tool event: its events match no permission rule")
        return
    for key, rules in (("rules", item.rules), ("except", item.except_)):
        for i, text in enumerate(rules):
            try:
                parse_rule(text)
            except Exception as exc:  # the parser's own error types
                ck.problem((*loc, key, i), f"invalid permission rule {text!r}: {exc}")


def impossible(when: When) -> str | None:
    """Why ``when`` can never hold, or None (what can be told without the session)."""
    both_ways = (set(when.facts) | set(when.within) | set(when.after)) & set(when.not_facts)
    if both_ways:
        return f"fact {sorted(both_ways)[0]!r} is required and excluded"
    if when.any_facts and set(when.any_facts) <= set(when.not_facts):
        return "every fact of anyFacts is excluded by notFacts"
    for first, second in when.after.items():
        if first == second:
            return f"fact {first!r} cannot be set after itself"
    for name, bound in when.counters.items():
        low = max((v for v in (bound.gt, bound.gte) if v is not None), default=None)
        high = min((v for v in (bound.lt, bound.lte) if v is not None), default=None)
        if low is not None and high is not None:
            strict = (bound.gt is not None and bound.gt == low) or (bound.lt is not None and bound.lt == high)
            if low > high or (low == high and strict):
                return f"no value of counter {name!r} is within its bounds"
        if (bound.lt is not None and bound.lt <= 0) or (bound.lte is not None and bound.lte < 0):
            return f"counter {name!r} is never below 0"
    for nested in (*when.all, *when.any):
        if (why := impossible(nested)) is not None and nested in when.all:
            return why
    if when.any and all(impossible(nested) is not None for nested in when.any):
        return "no condition of any: can hold"
    return None


__all__ = ["Checker", "check_session", "folded", "impossible", "whens_of"]
