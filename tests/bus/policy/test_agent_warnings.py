"""Warnings about decisions an agent the policy names cannot carry out (:mod:`bus.policy.agents`).

Expected warnings are worked out from the dialects' declarations as they are when the test
runs (they change as dialects learn more), never from a copied table. Where a test needs a
known limit, it declares one on a dialect of its own, passed as the check's dialects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from bus.dialects import DIALECTS
from bus.dialects.base import CAPABILITIES, CAPABILITY_TITLES, Capability, Dialect, Support, no, partial
from bus.policy.agents import agent_warnings, named_agents
from bus.policy.loading import Policy, policy_from_text
from hookbus.cli import main

#: For each capability, a handler that makes use of it: (event, matcher, handler).
USES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "deny": ("PreToolUse", "Bash", {"type": "rule", "deny": ["Bash(rm *)"]}),
    "ask": ("PreToolUse", "Bash", {"type": "rule", "ask": ["Bash(git push *)"]}),
    "allow": ("PreToolUse", "Bash", {"type": "rule", "allow": ["Bash(ls *)"]}),
    "rewrite_input": ("PreToolUse", "Bash", {"type": "command", "command": "/bin/true"}),
    "stop_block": ("Stop", None, {"type": "prompt", "prompt": "Is the work done?"}),
    "add_context": ("SessionStart", None, {"type": "command", "command": "/bin/true"}),
    "fail_closed": ("Notification", None, {"type": "command", "command": "/bin/true", "failMode": "closed"}),
}


def group(matcher: str | None, handler: dict[str, Any]) -> dict[str, Any]:
    return {"matcher": matcher, "hooks": [handler]} if matcher else {"hooks": [handler]}


def policy_of(*handlers: tuple[str, str | None, dict[str, Any]], **platform: Any) -> Policy:
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, matcher, handler in handlers:
        hooks.setdefault(event, []).append(group(matcher, handler))
    return policy_from_text(json.dumps({"hookbus": platform, "hooks": hooks}), "policy.json")


def lacking(capability: str, dialects: Mapping[str, Dialect] = DIALECTS) -> dict[str, Capability]:
    """The agents whose dialect does not fully carry out ``capability``, with their declaration."""
    found = {name: d.capabilities[capability] for name, d in dialects.items()}
    return {name: declared for name, declared in found.items() if declared.support is not Support.YES}


def with_limits(**limits: Mapping[str, Capability]) -> dict[str, Dialect]:
    """The real dialects, where each agent of ``limits`` carries out everything but what it lists."""
    out: dict[str, Dialect] = dict(DIALECTS)
    for agent, declared in limits.items():
        base = type(DIALECTS[agent])
        out[agent] = type(f"Limited{base.__name__}", (base,), {"capabilities": {**Dialect.capabilities, **declared}})()
    return out


NO_ASK = with_limits(codex={"ask": no("no ask: hookbus answers deny")})


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_each_capability_warns_for_exactly_the_agents_that_declare_it_lacking(capability: str) -> None:
    policy = policy_of(USES[capability], agents=list(DIALECTS))
    found = {w.agent: w for w in agent_warnings(policy) if w.capability == capability}
    assert {agent: (w.support, w.note) for agent, w in found.items()} == {
        agent: (declared.support, declared.note) for agent, declared in lacking(capability).items()
    }
    for warning in found.values():
        assert [(u.source, u.path) for u in warning.uses] == [
            ("policy.json", f"hooks.{USES[capability][0]}[0].hooks[0]")
        ]


def test_the_dialects_declare_at_least_one_limit() -> None:
    # Otherwise every warning test here would pass without a warning ever being made.
    assert any(lacking(capability) for capability in CAPABILITIES)


def test_a_policy_that_names_no_agent_gets_no_warning() -> None:
    policy = policy_of(*USES.values())
    assert named_agents(policy) == ()
    assert agent_warnings(policy, NO_ASK) == []


def test_the_fleet_names_agents_for_every_handler() -> None:
    (warning,) = agent_warnings(policy_of(USES["ask"], agents=["claude", "codex"]), NO_ASK)
    assert (warning.agent, warning.capability, warning.support) == ("codex", "ask", Support.NO)
    assert warning.note == "no ask: hookbus answers deny"
    assert str(warning) == (
        f"codex cannot {CAPABILITY_TITLES['ask']} (no: no ask: hookbus answers deny); "
        "used by policy.json: hooks.PreToolUse[0].hooks[0] (ask rules)"
    )


def test_a_handler_limited_to_agents_is_checked_for_those_agents_only() -> None:
    for_claude = ("PreToolUse", "Bash", {**USES["ask"][2], "agents": ["claude"]})
    assert agent_warnings(policy_of(for_claude, agents=["codex"]), NO_ASK) == []
    for_codex = ("PreToolUse", "Bash", {**USES["ask"][2], "agents": ["codex"]})
    # Named by the handler alone, without a fleet.
    (warning,) = agent_warnings(policy_of(for_codex), NO_ASK)
    assert warning.agent == "codex"


def test_an_agent_named_by_one_handler_is_named_for_the_others() -> None:
    for_codex = ("PreToolUse", "Write", {"type": "rule", "deny": ["Write(/etc/**)"], "agents": ["codex"]})
    policy = policy_of(for_codex, USES["ask"])
    assert named_agents(policy) == ("codex",)
    (warning,) = agent_warnings(policy, NO_ASK)
    assert [u.path for u in warning.uses] == ["hooks.PreToolUse[1].hooks[0]"]


def test_one_warning_per_agent_and_capability_lists_every_handler() -> None:
    other = ("PreToolUse", "Bash", {"type": "rule", "ask": ["Bash(curl *)"]})
    (warning,) = agent_warnings(policy_of(USES["ask"], other, agents=["codex"]), NO_ASK)
    assert [u.path for u in warning.uses] == ["hooks.PreToolUse[0].hooks[0]", "hooks.PreToolUse[1].hooks[0]"]


def test_a_partial_capability_warns_with_its_note() -> None:
    dialects = with_limits(qwen={"rewrite_input": partial("only the command of Bash")})
    (warning,) = agent_warnings(policy_of(USES["rewrite_input"], agents=["qwen"]), dialects)
    assert (warning.capability, warning.support) == ("rewrite_input", Support.PARTIAL)
    assert str(warning).startswith(f"qwen can {CAPABILITY_TITLES['rewrite_input']} only in part (partial: only the")
    assert "(command handler, if it answers so)" in str(warning)


def test_every_stop_handler_blocks_and_a_rule_on_stop_decides_nothing() -> None:
    dialects = with_limits(gemini={"stop_block": no("a Stop cannot be blocked")})
    command = ("SubagentStop", None, {"type": "command", "command": "/bin/true"})
    rule = ("Stop", None, {"type": "rule", "deny": ["Bash(rm *)"]})
    warnings = [w for w in agent_warnings(policy_of(command, rule, agents=["gemini"]), dialects)]
    assert [(w.capability, [u.path for u in w.uses]) for w in warnings] == [
        ("stop_block", ["hooks.SubagentStop[0].hooks[0]"])
    ]


def test_shadow_handlers_and_shadow_policies_decide_nothing() -> None:
    shadow = ("PreToolUse", "Bash", {**USES["ask"][2], "shadow": True})
    assert agent_warnings(policy_of(shadow, agents=["codex"]), NO_ASK) == []
    assert agent_warnings(policy_of(USES["ask"], agents=["codex"], shadow=True), NO_ASK) == []


def test_an_async_handler_can_only_leave_context() -> None:
    dialects = with_limits(codex={c: no(f"no {c}") for c in CAPABILITIES})
    queued = ("PreToolUse", "Bash", {"type": "command", "command": "/bin/true", "async": True})
    assert [w.capability for w in agent_warnings(policy_of(queued, agents=["codex"]), dialects)] == ["add_context"]


def test_an_open_answer_may_make_any_decision_its_event_takes() -> None:
    dialects = with_limits(codex={c: no(f"no {c}") for c in CAPABILITIES})
    found = agent_warnings(policy_of(USES["rewrite_input"], agents=["codex"]), dialects)
    assert [w.capability for w in found] == ["deny", "ask", "allow", "rewrite_input", "add_context"]
    prompt = ("PreToolUse", "Bash", {"type": "prompt", "prompt": "Is this safe?"})
    assert [w.capability for w in agent_warnings(policy_of(prompt, agents=["codex"]), dialects)] == ["deny"]


# -- hookbus policy check --------------------------------------------------------------------------


def a_limit() -> tuple[str, str, Capability]:
    """An (agent, capability, declaration) the dialects declare as not fully carried out."""
    return next((a, c, d) for c in CAPABILITIES for a, d in lacking(c).items())


def check(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["policy", "check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_policy_check_prints_one_warning_line_per_limit_and_strict_fails(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    agent, capability, declared = a_limit()
    event, matcher, handler = USES[capability]
    path = write_policy(
        json.dumps({"hookbus": {"agents": [agent]}, "hooks": {event: [group(matcher, handler)]}}), "fleet.json"
    )
    expected = [f"warning: {w}" for w in agent_warnings(policy_from_text(path.read_text(), str(path)))]
    title = CAPABILITY_TITLES[capability]
    line = next(w for w in expected if w.startswith(f"warning: {agent} can") and title in w)
    assert declared.note in line and f"{path}: hooks.{event}[0].hooks[0]" in line

    code, out, err = check(str(path), capsys=capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[:-1] == expected
    assert out.splitlines()[-1].startswith("ok: 1 handlers on 1 events")

    code, out, err = check("--strict", str(path), capsys=capsys)
    assert (code, out) == (1, "")
    assert err.splitlines() == [f"{w} (an error under --strict)" for w in expected]


def test_policy_check_of_a_policy_without_agents_warns_of_nothing(
    write_policy: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, capability, _ = a_limit()
    event, matcher, handler = USES[capability]
    path = write_policy(json.dumps({"hooks": {event: [group(matcher, handler)]}}), "no-fleet.json")
    code, out, _ = check("--strict", str(path), capsys=capsys)
    assert (code, out) == (0, f"ok: 1 handlers on 1 events (revision {policy_from_text(path.read_text()).revision})\n")
