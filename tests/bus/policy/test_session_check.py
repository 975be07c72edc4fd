"""``policy check`` on session policy: unknown names, durations without a unit, conditions that can
never hold, each with its line (:mod:`bus.policy.sessioncheck`)."""

from __future__ import annotations

import pytest

from bus.errors import PolicyError
from bus.policy.loading import policy_from_text

HEAD = """hookbus:
  session:
    facts:
      secret: {setBy: [{event: PreToolUse, rules: ["Read(**/.env)"]}]}
    counters:
      calls: {count: [{event: PreToolUse}], window: 1h}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        policy_from_text(text, "p.yaml")
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "      when: {facts: [secrett]}\n",
            "p.yaml:10: hooks.PreToolUse[0].when: unknown fact 'secrett' (did you mean 'secret'?)",
        ),
        ("      when: {counters: {call: {gt: 1}}}\n", "unknown counter 'call'"),
        (
            "      when: {facts: [secret], notFacts: [secret]}\n",
            "can never hold: fact 'secret' is required and excluded",
        ),
        ("      when: {counters: {calls: {gt: 5, lt: 3}}}\n", "can never hold: no value of counter 'calls'"),
        ("      when: {after: {secret: secret}}\n", "cannot be set after itself"),
        ("      when: {within: {secret: 10}}\n", "a duration needs a unit (ms, s, m, h or d): got 10"),
    ],
)
def test_a_bad_condition_is_an_error_with_its_line(body: str, expected: str) -> None:
    text = HEAD + "hooks:\n  PreToolUse:\n    - matcher: Bash\n" + body + "      hooks: [{type: rule, deny: [Bash]}]\n"
    assert any(expected in problem for problem in problems(text)), problems(text)


def test_bad_definitions_are_errors_with_their_lines() -> None:
    text = """hookbus:
  session:
    facts:
      a: {setBy: [{event: Stop, rules: [Bash]}]}
      b: {setBy: [{event: PreToolUse, rules: ["Bash("]}], ttl: 5}
    budgets:
      x: {counter: nope, limit: 1}
hooks: {}
"""
    found = problems(text)
    assert any("p.yaml:5:" in p and "a duration needs a unit" in p for p in found), found


def test_rules_and_budgets_are_checked_once_the_durations_are_right() -> None:
    text = """hookbus:
  session:
    facts:
      a: {setBy: [{event: Stop, rules: [Bash]}]}
      b: {setBy: [{event: PreToolUse, rules: ["Bash("]}]}
    budgets:
      x: {counter: nope, limit: 1}
hooks: {}
"""
    found = problems(text)
    assert any("p.yaml:4:" in p and "Stop is no tool event" in p for p in found), found
    assert any("p.yaml:5:" in p and "invalid permission rule 'Bash('" in p for p in found), found
    assert any("p.yaml:7:" in p and "unknown counter 'nope'" in p for p in found), found


def test_a_counter_nothing_reads_is_a_note() -> None:
    policy = policy_from_text(HEAD + "hooks: {}\n", "p.yaml")
    assert any("counter 'calls' is not read" in note for note in policy.notes)


def test_a_fact_no_event_sets_and_a_counter_that_counts_nothing_are_errors_at_their_lines() -> None:
    text = """hookbus:
  session:
    facts:
      never:
        setBy: [{event: PreToolUse, rules: ["Bash(curl *)"], except: [Bash]}]
      sometimes:
        setBy:
          - {event: PreToolUse, rules: ["Bash(curl *)"], except: ["Bash(curl *)"]}
          - {event: PostToolUse, rules: [WebFetch]}
    counters:
      nothing:
        count: [{event: PreToolUse, rules: ["Bash(git push *)", Write], except: ["Bash(git push *)", "Write(*)"]}]
    budgets:
      b: {counter: nothing, limit: 1}
hooks: {}
"""
    found = problems(text)
    assert "p.yaml:5: hookbus.session.facts.never.setBy: fact 'never' is set by no event" in "\n".join(found), found
    assert any(p.startswith("p.yaml:12: ") and "counter 'nothing' counts no event" in p for p in found), found
    assert not any("'sometimes'" in p for p in found)  # its WebFetch sets it


def test_a_condition_that_can_never_hold_and_an_unread_counter_name_their_lines() -> None:
    body = "      when: {anyFacts: [secret], notFacts: [secret]}\n"
    text = HEAD + "hooks:\n  PreToolUse:\n    - matcher: Bash\n" + body + "      hooks: [{type: rule, deny: [Bash]}]\n"
    assert any(p.startswith("p.yaml:10: ") and "can never hold: every fact of anyFacts" in p for p in problems(text))
    notes = policy_from_text(HEAD + "hooks: {}\n", "p.yaml").notes
    assert "p.yaml:6: counter 'calls' is not read by any when: or budget" in notes


def test_a_counter_named_as_a_built_in_one_is_an_error_at_its_line() -> None:
    text = """hookbus:
  session:
    counters:
      tool_calls: {count: [{event: PreToolUse, rules: [Bash]}]}
    budgets:
      b: {counter: tool_calls, limit: 1}
hooks: {}
"""
    found = problems(text)
    assert any(
        p.startswith("p.yaml:4: ") and "counter 'tool_calls' is a built-in counter's name" in p for p in found
    ), found
