"""``when:`` conditions compiled into closures (:mod:`bus.session.conditions`) answer as
:meth:`bus.session.state.SessionView.holds` does, facts used included, and the answers kept per
setting of the facts follow the state as it changes; the facts set, kept alike, too; and the
budgets an event moves are those worked out afresh on the state after it."""

from __future__ import annotations

import itertools
import random
from typing import Any

from bus.policy.loading import policy_from_text
from bus.policy.sessionschema import When
from bus.session.apply import applied, apply_ops, changed_by, written_at
from bus.session.conditions import Conditions, compile_when
from bus.session.definitions import SessionPolicy, session_policy
from bus.session.effects import effects
from bus.session.state import SessionState, SessionView, carried_key

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
    assert policy.facts_key == carried_key("facts", policy)  # where facts() finds what a state carries
    for _ in range(2):
        for state, at in itertools.product(states(policy), (9 * MINUTE, 14 * MINUTE, 20 * MINUTE)):
            view = SessionView(policy, state, at)
            assert view.facts() == [name for name in policy.facts if SessionView(policy, state, at).fact_ms(name)]


BUDGETS = """
hookbus:
  session:
    counters:
      pushes: {count: [{event: PreToolUse, rules: ["Bash(git push *)"]}], window: 1m}
      edits: {count: [{event: PreToolUse, rules: [Edit]}]}
    budgets:
      pushes: {counter: pushes, limit: 3}
      calls: {counter: tool_calls, limit: 20}
      edits: {counter: edits, limit: 5}
      fails: {counter: failures, limit: 2}
      age: {counter: session_age_seconds, limit: 3600}
hooks: {}
"""


def test_budgets_an_event_moves_are_those_reading_what_it_writes_as_worked_out_afresh() -> None:
    """An outcome's budgets are those reading a field the event writes (and those on the session's
    age, which every event moves), each as a view of the state after it reads it."""
    policy = session_policy(policy_from_text(BUDGETS))
    assert policy.budgets_unread == ("age",)
    rng = random.Random(7)
    steps = [
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "git push"}}),
        ("PreToolUse", {"tool_name": "Edit", "tool_input": {"file_path": "/w/a"}}),
        ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
        ("PostToolUseFailure", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
        ("PostToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
    ]
    state, at, seen = SessionState(), 1_000_000, set()
    for n in range(300):
        at += rng.randrange(0, 3_000)  # buckets of 6 s: at times a new bucket
        event, hook_input = steps[rng.randrange(len(steps))]
        ops = effects(policy, event, {**hook_input, "cwd": "/w"}, "none")
        after = apply_ops(state, ops, at)
        differ = {k for k, _ in after.fields.items() ^ state.fields.items()}
        told = changed_by(state, after, ops)
        assert told is None or differ <= told
        written = written_at(state.fields, ops, at)
        now = at + rng.choice((0, 0, 0, 7_000))
        whole = SessionView(policy, after, now).budgets_left()
        moved = {name for name, fields in policy.budget_fields.items() if not fields or set(fields) & written.keys()}
        over = applied(state, ops, at)  # the changes laid over the state before
        assert {k: v for k, v in over.fields.items() if v} == dict(after.fields)
        laid = {field: "" if value is None else value for field, value in written.items()}
        assert SessionView(policy, state, now).budgets_moved(laid) == {name: whole[name] for name in moved}, n
        seen |= moved
        state = after
    assert seen == set(policy.budgets)


def test_matches_kept_per_call_are_those_worked_out_afresh() -> None:
    text = """
hookbus:
  session:
    facts:
      secret: {setBy: [{event: PreToolUse, rules: ["Read(**/.env)", "Bash(cat *.env)"], except: ["Read(//w/ok/**)"]}]}
      pushed:
        setBy: [{event: PreToolUse, rules: ["Bash(git push *)"]}]
        clearedBy: [{event: PreToolUse, rules: ["Bash(git pull*)"]}]
    counters:
      net: {count: [{event: PreToolUse, rules: ["Bash(curl *)", "Bash(cat *.env)"]}, {event: PostToolUse}]}
hooks: {}
"""
    calls = [
        {"tool_name": "Bash", "tool_input": {"command": c}, "cwd": "/w"}
        for c in ("cat a.env", "git push x && curl y", "git pull", "ls", "curl z; git pull; cat .env")
    ] + [{"tool_name": "Read", "tool_input": {"file_path": p}, "cwd": "/w"} for p in ("/w/.env", "/w/ok/.env", "/w/x")]
    kept = session_policy(policy_from_text(text))
    for _ in range(2):  # the second round reads the matches kept
        for hook_input in calls:
            for event in ("PreToolUse", "PostToolUse"):
                fresh = SessionPolicy(policy_from_text(text).settings.session).matched(event, hook_input)
                assert kept.matched(event, hook_input) == fresh, (event, hook_input)
    assert list(kept.matched("PreToolUse", calls[0]).set) == ["secret"]
    assert list(kept.matched("PreToolUse", calls[0]).count) == ["net"]
    assert not kept.matched("PreToolUse", calls[6]).set  # excepted
    assert list(kept.matched("PreToolUse", calls[4]).clear) == ["pushed"]


def test_a_negated_condition_reads_tenant_counters_as_the_rest_does() -> None:
    policy = session_policy(
        policy_from_text(
            """
hookbus:
  session:
    counters:
      pushes: {scope: tenant, window: 1h, count: [{event: PreToolUse, rules: ["Bash(git push *)"]}]}
hooks: {}
"""
        )
    )
    fleet = {policy.fleet["pushes"].name: 9.0}
    for text, held in (
        ({"counters": {"pushes": {"gt": 5}}}, True),
        ({"not": {"counters": {"pushes": {"gt": 5}}}}, False),
    ):
        when = When.model_validate(text, by_alias=True)
        view = SessionView(policy, SessionState({}), 0, lambda counter: fleet[counter.name])
        assert view.holds(when) is held, text
        compiled = SessionView(policy, SessionState({}), 0, lambda counter: fleet[counter.name])
        assert compile_when(when).check(compiled, {}) is held, text
