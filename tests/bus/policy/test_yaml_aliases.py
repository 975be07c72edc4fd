"""YAML aliases are refused: a billion-laughs document fails at once, naming its file and line."""

from __future__ import annotations

import pytest

from bus.errors import PolicyError
from bus.policy.loading import parse_policy_text, policy_from_text

LAUGHS = "\n".join(
    [
        "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
        *(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)),
        "hooks: *i",
    ]
)


def test_billion_laughs_is_refused_with_file_and_line() -> None:
    assert len(LAUGHS) < 500  # 9**9 (387 million) strings once expanded
    parsed = parse_policy_text(LAUGHS, "laughs.yaml")
    assert [str(p) for p in parsed.problems] == [
        "laughs.yaml:2: invalid YAML: aliases ('*name') are not allowed in a policy file (column 8)"
    ]


def test_an_alias_anywhere_is_refused() -> None:
    text = "hookbus:\n  shadow: &s true\n  orgLocked: *s\n"
    with pytest.raises(PolicyError, match=r"^policy\.yaml:3: invalid YAML: aliases \('\*name'\) are not allowed"):
        policy_from_text(text)


def test_flow_yaml_in_a_file_without_extension_is_refused_too() -> None:
    parsed = parse_policy_text('{"a": &x [1], "hooks": {"Stop": *x}}', "policy")
    assert len(parsed.problems) == 1
    assert "aliases ('*name') are not allowed" in parsed.problems[0].message


def test_an_anchor_without_alias_and_ordinary_policies_load() -> None:
    text = "hooks:\n  Stop: &stop\n    - hooks:\n        - {type: command, command: 'true'}\n"
    policy = policy_from_text(text)
    assert policy.handler_count == 1
    assert (
        policy_from_text('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}').handler_count == 1
    )
