"""Counters of a whole tenant or agent (``scope: tenant``/``agent``) and their ``onLimit``: the
schema, and what ``policy check`` refuses."""

from __future__ import annotations

import pytest

from bus.errors import PolicyError
from bus.policy.loading import policy_from_text
from bus.session.definitions import session_policy

FLEET = """hookbus:
  session:
    counters:
      rm_denies:
        count: [{{event: PreToolUse, rules: ["Bash(rm -rf *)"]}}]
        decisions: [deny]
        window: 5m
        scope: tenant
        {extra}
hooks: {{}}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        policy_from_text(text, "p.yaml")
    return [str(problem) for problem in caught.value.problems]


def test_a_tenant_counter_with_on_limit_compiles_apart_from_the_session() -> None:
    extra = "onLimit: {above: 20, action: freeze, tools: [Bash, Write|Edit], for: 30m}"
    policy = policy_from_text(FLEET.format(extra=extra), "p.yaml")
    compiled = session_policy(policy)
    assert compiled.counters == {}  # nothing in the session's own state
    counter = compiled.fleet["rm_denies"]
    assert counter.scope == "tenant" and counter.decisions == {"deny"} and counter.bucket_ms == 30_000
    assert counter.on_limit is not None and counter.on_limit.above == 20 and counter.on_limit.for_ == "30m"
    rm = {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}
    assert "rm_denies" in compiled.matched("PreToolUse", rm).count


def test_per_is_the_older_spelling_of_scope() -> None:
    text = FLEET.format(extra="").replace("scope: tenant", "per: agent")
    assert session_policy(policy_from_text(text, "p.yaml")).fleet["rm_denies"].scope == "agent"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("scope: tenant", "scope: fleet"), "scope"),
        (("window: 5m", "description: no window"), "needs a 'window'"),
        (("scope: tenant", "scope: session"), "need 'scope: tenant' or 'scope: agent'"),
    ],
)
def test_a_bad_scope_is_an_error(change: tuple[str, str], expected: str) -> None:
    text = FLEET.format(extra="").replace(*change)
    found = problems(text)
    assert any(expected in p and "rm_denies" in p for p in found), found


def test_a_bad_on_limit_is_an_error() -> None:
    assert any("above" in p for p in problems(FLEET.format(extra="onLimit: {action: freeze}")))
    assert any("onLimit" in p for p in problems(FLEET.format(extra="onLimit: {above: 2, action: page}")))
    assert any("invalid matcher" in p for p in problems(FLEET.format(extra="onLimit: {above: 2, tools: ['(']}")))


def test_a_budget_cannot_read_a_tenant_counter_a_when_can() -> None:
    text = FLEET.format(extra="").replace(
        "hooks: {}",
        "    budgets:\n      b: {counter: rm_denies, limit: 3}\n"
        "hooks:\n  PreToolUse:\n    - when: {counters: {rm_denies: {gt: 1}}}\n"
        "      hooks: [{type: rule, deny: ['Bash(curl *)']}]",
    )
    found = problems(text)
    assert [p for p in found if "rm_denies" in p] == [
        "p.yaml:10: hookbus.session.budgets: counter 'rm_denies' is a tenant or agent counter: a budget reads"
        " session counters"
    ], found


def test_a_session_counter_keeps_its_field_from_before_counters_had_a_scope() -> None:
    text = "hookbus:\n  session:\n    counters:\n      pushes:\n        window: 1h\n"
    text += '        count: [{event: PreToolUse, rules: ["Bash(git push *)"]}]\nhooks: {}\n'
    # The field the same definition had before (its state survives the upgrade).
    assert session_policy(policy_from_text(text, "p.yaml")).counters["pushes"].field == "c:pushes:6aca42"
