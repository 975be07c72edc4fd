"""``when:`` conditions compiled into closures (:mod:`bus.session.conditions`) answer as
:meth:`bus.session.state.SessionView.holds` does, facts used included, and the answers kept per
setting of the facts follow the state as it changes; the facts set, kept alike, too."""

from __future__ import annotations

import itertools
import random
from typing import Any

from bus.policy.loading import policy_from_text
from bus.policy.sessionschema import When
from bus.session.conditions import Conditions, compile_when
from bus.session.definitions import SessionPolicy, session_policy
from bus.session.state import SessionState, SessionView

POLICY = """
hookbus:
  session:
    facts:
      a: {setBy: [{event: PostToolUse, rules: [Edit]}]}
      b: {setBy: [{event: PostToolUse, rules: [Write]}]}
      c: {setBy: [{event: PostToolUse, rules: [Read]}], ttl: 10m}
    counters:
      n: {count: [{event: PreToolUse, rules: [Bash]}]}
hooks: {}
"""
MINUTE = 60_000

CONDITIONS: list[dict[str, Any]] = [
    {},
    {"facts": ["a"]},
    {"facts": ["a", "c"]},
    {"anyFacts": ["b", "c"]},
    {"notFacts": ["a"], "facts": ["b"]},
    {"within": {"c": "5m"}},
    {"after": {"a": "b"}},
    {"counters": {"n": {"gte": 2}}},
    {"counters": {"tool_calls": {"lt": 3}}, "facts": ["b"]},
    {"any": [{"facts": ["a"]}, {"facts": ["b"]}], "facts": ["c"]},
    {"any": [{"all": [{"facts": ["a"]}, {"facts": ["zz"]}]}, {"anyFacts": ["b"]}]},
    {"all": [{"facts": ["b"]}, {"after": {"c": "a"}}], "anyFacts": ["a", "b"]},
    {"not": {"facts": ["a"]}, "anyFacts": ["b", "c"]},
    {"not": {"any": [{"facts": ["b"]}, {"counters": {"n": {"gt": 0}}}]}},
]


def session() -> SessionPolicy:
    return session_policy(policy_from_text(POLICY))


def states(policy: SessionPolicy) -> list[SessionState]:
    """States with each fact unset, set long ago or lately, and counts of 0 to 3."""
    rng = random.Random(5)
    found = []
    fields = [policy.facts[name].field for name in "abc"]
    for settings in itertools.product(("", "1", str(8 * MINUTE)), repeat=3):
        values = {field: value for field, value in zip(fields, settings, strict=True) if value}
        values |= {policy.counters["n"].field: str(rng.randrange(4)), "n:calls": str(rng.randrange(4))}
        found.append(SessionState(values))
    return found


def test_compiled_conditions_answer_as_holds_does() -> None:
    policy = session()
    for text, state, at in itertools.product(CONDITIONS, states(policy), (9 * MINUTE, 14 * MINUTE, 30 * MINUTE)):
        when = When.model_validate(text, by_alias=True)
        reference = SessionView(policy, state, at)
        held = reference.holds(when)
        used: dict[str, None] = {}
        assert compile_when(when).check(SessionView(policy, state, at), used) == held, (text, state, at)
        if held:
            assert list(used) == list(reference.used), (text, state, at)


def test_kept_answers_follow_the_state() -> None:
    policy = session()
    whens = [When.model_validate(text, by_alias=True) for text in CONDITIONS]
    conditions = Conditions(policy, [*whens, whens[1]])  # a condition given twice is judged once
    assert len(conditions.compiled) == len(CONDITIONS)
    for _ in range(2):  # the second round reads the answers kept
        for state, at in itertools.product(states(policy), (9 * MINUTE, 14 * MINUTE)):
            answers = conditions.answers(SessionView(policy, state, at))
            for when in whens:
                reference = SessionView(policy, state, at)
                expected = list(reference.used) if reference.holds(when) else None
                assert answers[conditions.index[id(when)]] == expected, (when, state, at)


def test_kept_facts_follow_the_state() -> None:
    policy = session()
    for _ in range(2):
        for state, at in itertools.product(states(policy), (9 * MINUTE, 14 * MINUTE, 20 * MINUTE)):
            view = SessionView(policy, state, at)
            assert view.facts() == [name for name in policy.facts if SessionView(policy, state, at).fact_ms(name)]
