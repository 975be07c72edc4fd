"""What a decision works out on its session's state (facts set, the answers of
``when:`` conditions) carries to the state its settle answers, and reads as worked out afresh: a
chain of events decided by :class:`workers.engine.sessions.SessionJudge` and kept by
:class:`workers.dispatcher.sessions.SessionStates`, the settle applying each event's operations
at its own time (at times in a later bucket than the decision's), as the script answers."""

from __future__ import annotations

import dataclasses
import random

import orjson

from bus.policy.loading import policy_from_text
from bus.policy.sessionschema import When
from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.session.apply import apply_ops, written_at
from bus.session.conditions import Conditions
from bus.session.definitions import session_policy
from bus.session.effects import effects
from bus.session.state import SessionState, SessionView
from workers.dispatcher.sessions import SessionStates
from workers.engine.sessions import SessionJudge

POLICY = """
hookbus:
  session:
    facts:
      pushed:
        setBy: [{event: PreToolUse, rules: ["Bash(git push *)"]}]
        clearedBy: [{event: PreToolUse, rules: [Edit]}]
      read: {setBy: [{event: PreToolUse, rules: [Read]}]}
    counters:
      pushes: {count: [{event: PreToolUse, rules: ["Bash(git push *)"]}], window: 1m}
      edits: {count: [{event: PreToolUse, rules: [Edit]}]}
    budgets:
      pushes: {counter: pushes, limit: 30}
      calls: {counter: tool_calls, limit: 200}
      edits: {counter: edits, limit: 50}
      fails: {counter: failures, limit: 20}
hooks: {}
"""
STEPS = [
    ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "git push"}}),
    ("PreToolUse", {"tool_name": "Edit", "tool_input": {"file_path": "/w/a"}}),
    ("PreToolUse", {"tool_name": "Read", "tool_input": {"file_path": "/w/a"}}),
    ("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
    ("PostToolUseFailure", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
    ("PostToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}}),
]


WHENS = [{"facts": ["pushed"]}, {"notFacts": ["read"]}, {"after": {"pushed": "read"}}, {"anyFacts": ["read"]}]
#: Conditions on counters (a windowed one, a plain one, built-ins): not static, kept on the state all the same.
COUNTED = [
    {"counters": {"pushes": {"gte": 2}}},
    {"counters": {"edits": {"lt": 3}}},
    {"counters": {"tool_calls": {"lt": 100}}},
    {"any": [{"counters": {"tool_calls": {"gte": 5}}}, {"counters": {"failures": {"gte": 1}}}]},
    {"facts": ["read"]},
]


def fresh(state: SessionState) -> SessionState:
    """The same fields, with nothing worked out on them."""
    return SessionState(dict(state.fields))


def test_budgets_and_facts_carried_through_settles_are_those_worked_out_afresh() -> None:
    policy = policy_from_text(POLICY)
    compiled = session_policy(policy)
    states = SessionStates(Keyspace(), Metrics(), lambda op: None)
    key, rng, at = "s", random.Random(11), 1_000_000
    states.put(key, SessionState())
    conditions = Conditions(compiled, [When.model_validate(when, by_alias=True) for when in WHENS])
    assert conditions.static
    counted = Conditions(compiled, [When.model_validate(when, by_alias=True) for when in COUNTED])
    assert not counted.static
    for n in range(400):
        at += rng.randrange(0, 3_000)  # buckets of 6 s
        event, hook_input = STEPS[rng.randrange(len(STEPS))]
        hook_input = {**hook_input, "cwd": "/w"}
        state = states.get(key)
        before = fresh(state)  # the state moves on in place once the event settles
        judge = SessionJudge(compiled, state, at)
        judge.read = True
        decision = rng.choice(("none", "none", "allow", "deny"))
        outcome = judge.outcome(event, hook_input, decision)
        unkept = dataclasses.replace(judge.matched(event, hook_input), pre_ops=None)
        assert outcome.ops == effects(compiled, event, hook_input, decision, unkept), n  # kept with the match
        reference = SessionView(compiled, before, at)
        assert judge.facts() == reference.facts(), n
        assert judge.budgets_left() == reference.budgets_left(), n
        settled_at = at + rng.choice((0, 1, 2_500, 7_000))  # the settle's clock: the same bucket or a later one
        states.answered(key, outcome, True, orjson.dumps({"e": 0, "n": settled_at}))
        kept = states.get(key)
        assert dict(kept.fields) == dict(apply_ops(before, outcome.ops, settled_at).fields), n  # as the script writes
        for later in (settled_at, settled_at + rng.randrange(0, 9_000)):
            view, afresh = SessionView(compiled, kept, later), SessionView(compiled, fresh(kept), later)
            assert view.budgets_left() == afresh.budgets_left(), n
            assert view.facts() == afresh.facts(), n
            assert conditions.answers(view) == conditions.answers(afresh), n
            assert counted.answers(view) == counted.answers(afresh), n
        after = SessionView(compiled, apply_ops(before, outcome.ops, at), at)  # as the decision saw it
        written = written_at(before.fields, outcome.ops, at)
        moved = [name for name, fields in compiled.budget_fields.items() if set(fields) & written.keys()]
        if not before.version:  # a session's first event: every budget
            moved = list(compiled.budgets)
        assert outcome.budgets == {name: after.budgets_left()[name] for name in moved}, n  # those it moves
        assert sorted(outcome.facts) == sorted(after.facts()), n  # (the facts newly set come last)


def test_two_events_decided_on_one_state_move_it_on_in_turn_as_the_script_applies_them() -> None:
    """The dispatcher's copy moves on in place: an event decided on it before another settled
    finds it moved on, and its own answer moves it on again from there, as the script applied it
    (its decision done before the other settled, or after); one whose decision read it expects
    the version it read."""
    compiled = session_policy(policy_from_text(POLICY))
    states, key, at = SessionStates(Keyspace(), Metrics(), lambda op: None), "s", 1_000_000
    states.put(key, SessionState())
    ls = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "cwd": "/w"}
    push = {"tool_name": "Bash", "tool_input": {"command": "git push"}, "cwd": "/w"}
    cases = [(a, b, done) for a in (ls, push) for b in (ls, push) for done in (True, False)] * 2
    for n, (first_input, second_input, done_before) in enumerate(cases):
        state = states.get(key)
        script, read_version = fresh(state), state.version  # the state as the script holds it
        first, second = SessionJudge(compiled, state, at), SessionJudge(compiled, state, at + 1)
        second.read = True  # the second's decision read the state before the first settled
        one = first.outcome("PreToolUse", first_input, "allow")
        two = second.outcome("PreToolUse", second_input, "allow") if done_before else None
        script = apply_ops(script, one.ops, at + 2)
        states.answered(key, one, True, orjson.dumps({"e": 0, "n": at + 2}))
        assert states.get(key) is state and dict(state.fields) == dict(script.fields), n  # in place
        two = two or second.outcome("PreToolUse", second_input, "allow")
        assert two.expected == read_version, n
        assert two.known == f"{script.version}:{script.fields['t0']}", n  # the copy as it is now
        # settled without the check (as after MAX_ATTEMPTS): the script applies it to the state now
        script = apply_ops(script, two.ops, at + 3)
        states.answered(key, two, True, orjson.dumps({"e": 0, "n": at + 3}))
        assert dict(state.fields) == dict(script.fields), n
        view, afresh = SessionView(compiled, state, at + 3), SessionView(compiled, fresh(state), at + 3)
        assert view.budgets_left() == afresh.budgets_left(), n
        assert view.facts() == afresh.facts(), n
        at += 20_000
