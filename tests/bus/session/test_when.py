"""``when:`` conditions judged on a session's state (:mod:`bus.session.state`), and what an event
changes (:mod:`bus.session.effects`), with the state kept as the settle script keeps it
(:func:`bus.session.apply.apply_ops`)."""

from __future__ import annotations

from typing import Any

import pytest

from bus.policy.loading import policy_from_text
from bus.policy.sessionschema import When
from bus.session.apply import apply_ops
from bus.session.definitions import SessionPolicy, session_policy
from bus.session.effects import effects, verdicts
from bus.session.state import SessionState, SessionView

POLICY = """
hookbus:
  session:
    facts:
      edited: {setBy: [{event: PostToolUse, rules: [Edit, Write]}]}
      tested:
        setBy: [{event: PostToolUse, rules: ["Bash(pytest*)"]}]
        clearedBy: [{event: PostToolUse, rules: [Edit]}]
      fetched: {setBy: [{event: PostToolUse, rules: [WebFetch]}], ttl: 10m}
    counters:
      pushes: {count: [{event: PreToolUse, rules: ["Bash(git push *)"]}], window: 1h}
    budgets:
      pushes: {counter: pushes, limit: 2}
hooks:
  PreToolUse:
    - matcher: Bash
      when: {after: {tested: edited}}
      hooks: [{type: rule, allow: ["Bash(git push *)"]}]
"""
MINUTE = 60_000


def call(tool: str, **tool_input: Any) -> dict[str, Any]:
    return {"session_id": "s", "tool_name": tool, "tool_input": tool_input, "cwd": "/w"}


@pytest.fixture(scope="module")
def session() -> SessionPolicy:
    return session_policy(policy_from_text(POLICY))


def run(session: SessionPolicy, steps: list[tuple[int, str, dict[str, Any], str]]) -> SessionState:
    state = SessionState()
    for at, event, hook_input, decision in steps:
        state = apply_ops(state, effects(session, event, hook_input, decision), at)
    return state


def holds(session: SessionPolicy, state: SessionState, at: int, **when: Any) -> bool:
    return SessionView(session, state, at).holds(When.model_validate(when, by_alias=True))


def test_since_the_last_edit(session: SessionPolicy) -> None:
    state = run(session, [(1, "PostToolUse", call("Edit", file_path="/w/a"), "none")])
    assert not holds(session, state, 2, after={"tested": "edited"})
    state = run(
        session,
        [
            (1, "PostToolUse", call("Edit", file_path="/w/a"), "none"),
            (2, "PostToolUse", call("Bash", command="pytest -q"), "none"),
        ],
    )
    assert holds(session, state, 3, after={"tested": "edited"}, facts=["tested"])
    assert not holds(session, state, 3, notFacts=["tested"])
    again = apply_ops(state, effects(session, "PostToolUse", call("Edit", file_path="/w/a"), "none"), 4)
    assert holds(session, again, 5, notFacts=["tested"]) and not holds(session, again, 5, after={"tested": "edited"})


def test_within_and_ttl(session: SessionPolicy) -> None:
    state = run(session, [(0, "PostToolUse", call("WebFetch", url="https://x.example/"), "none")])
    assert holds(session, state, 4 * MINUTE, within={"fetched": "5m"})
    assert not holds(session, state, 6 * MINUTE, within={"fetched": "5m"})
    assert holds(session, state, 9 * MINUTE, facts=["fetched"])
    assert not holds(session, state, 10 * MINUTE, facts=["fetched"])  # the fact's ttl passed


def test_a_denied_call_changes_nothing_and_windows_slide(session: SessionPolicy) -> None:
    push = call("Bash", command="git push origin main")
    assert effects(session, "PreToolUse", push, "deny") == []
    state = run(session, [(0, "PreToolUse", push, "none"), (30 * MINUTE, "PreToolUse", push, "ask")])
    view = SessionView(session, state, 31 * MINUTE)
    assert view.counter("pushes") == 2 and view.counter("tool_calls") == 2
    (over,) = verdicts(view, "PreToolUse", session.matched("PreToolUse", push))
    assert over.decided == ("deny", "hookbus: budget 'pushes' is used up (pushes: 2 of 2)")
    assert verdicts(view, "PreToolUse", session.matched("PreToolUse", call("Bash", command="ls"))) == []
    assert SessionView(session, state, 67 * MINUTE).counter("pushes") == 1  # the first left the hour (and a tenth)
    assert SessionView(session, state, 100 * MINUTE).counter("pushes") == 0


def test_state_stays_bounded_however_long_the_session(session: SessionPolicy) -> None:
    push = call("Bash", command="git push origin main")
    state = SessionState()
    for n in range(5000):
        state = apply_ops(state, effects(session, "PreToolUse", push, "none"), n * 7_919)
    assert len(state.fields) <= 3 + 11 + 2  # version, first seen, calls; 11 buckets; room for facts
    assert state.version == 5000
