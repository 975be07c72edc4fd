"""The ``agents`` handler option and the ``hookbus.agents`` fleet setting: what loads, what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bus.dialects import DIALECTS
from bus.errors import PolicyError
from bus.policy.loading import Policy, policy_from_text

KNOWN = f"(known agents: {', '.join(DIALECTS)})"


def policy_of(handler: dict[str, Any], **platform: Any) -> Policy:
    group = {"matcher": "Bash", "hooks": [handler]}
    return policy_from_text(json.dumps({"hookbus": platform, "hooks": {"PreToolUse": [group]}}), "policy.json")


def problems_of(handler: dict[str, Any], **platform: Any) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        policy_of(handler, **platform)
    return [f"{p.path}: {p.message}" for p in caught.value.problems]


DENY_RM = {"type": "rule", "deny": ["Bash(rm *)"]}


def test_a_handler_limited_to_agents_and_a_fleet_load() -> None:
    policy = policy_of({**DENY_RM, "agents": ["codex", "gemini"]}, agents=["claude", "codex", "gemini"])
    (entry,) = policy.entries("PreToolUse")
    assert entry.handler.agents == ["codex", "gemini"]
    assert policy.settings.agents == ["claude", "codex", "gemini"]


def test_without_the_option_a_handler_runs_for_every_agent_and_no_fleet_is_declared() -> None:
    policy = policy_of(DENY_RM)
    assert policy.entries("PreToolUse")[0].handler.agents is None
    assert policy.settings.agents is None


def test_every_dialect_name_is_an_agent_name() -> None:
    policy = policy_of({**DENY_RM, "agents": list(DIALECTS)}, agents=list(DIALECTS))
    assert policy.entries("PreToolUse")[0].handler.agents == list(DIALECTS)


def test_an_unknown_agent_is_one_line_naming_the_known_ones() -> None:
    assert problems_of({**DENY_RM, "agents": ["codex", "aider"]}) == [
        f"hooks.PreToolUse[0].hooks[0].agents[1]: unknown agent 'aider' {KNOWN}"
    ]


def test_a_misspelt_agent_gets_a_suggestion() -> None:
    assert problems_of({**DENY_RM, "agents": ["Gemini"]}) == [
        f"hooks.PreToolUse[0].hooks[0].agents[0]: unknown agent 'Gemini' (did you mean 'gemini'?) {KNOWN}"
    ]


def test_an_unknown_agent_in_the_fleet_is_refused_too() -> None:
    assert problems_of(DENY_RM, agents=["qwen", "devin"]) == [f"hookbus.agents[1]: unknown agent 'devin' {KNOWN}"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("codex", "must be a list (got string 'codex')"),
        ({"codex": True}, "must be a list (got mapping)"),
        ([7], "must be a string (got integer 7)"),
        ([], "must not be empty"),
    ],
)
def test_agents_of_the_wrong_type(value: Any, message: str) -> None:
    (problem,) = problems_of({**DENY_RM, "agents": value})
    assert problem.endswith(message), problem
    assert problem.startswith("hooks.PreToolUse[0].hooks[0].agents")


def test_a_fleet_of_the_wrong_type() -> None:
    assert problems_of(DENY_RM, agents="codex") == ["hookbus.agents: must be a list (got string 'codex')"]


def test_handlers_differing_only_in_agents_are_two_handlers() -> None:
    both = policy_from_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "Bash", "hooks": [DENY_RM, {**DENY_RM, "agents": ["codex"]}]},
                    ]
                }
            }
        )
    )
    first, second = both.entries("PreToolUse")
    assert first.handler_id != second.handler_id
    assert first.handler_id == policy_of(DENY_RM).entries("PreToolUse")[0].handler_id
