"""A path rule list's prefilter matches exactly the paths its alternation matches."""

from __future__ import annotations

import random

import pytest

from bus.policy.loading import load_policy
from bus.policy.rulelists import compile_rules
from bus.policy.schema import RuleHandler
from bus.rules.paths import PathRules

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

_PIECES = ("a", "b", ".env", "*", "?", "[ab]", "[!a]", "[|]", "**", ".", "-", "\\*", "x.pem", "id_rsa", "é")
_PATH_PARTS = ("a", "b", ".env", "x.pem", "ab", "id_rsa", "|", "*", "é", "", "..", "a.b", "\n")


def _rule(rng: random.Random) -> str:
    segments = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
    lead = rng.choice(("//**/", "**/", "", "~/", "/", "./", "//"))
    return lead + "/".join(segments) + rng.choice(("", "", "/", "/**"))


def _path(rng: random.Random) -> str:
    return "/".join(rng.choice(_PATH_PARTS) for _ in range(rng.randint(1, 6)))


def _check(rules: PathRules, paths: list[str]) -> int:
    filtered = 0
    for _, combined, prefilter in rules.by_anchor:
        if prefilter is None:
            continue
        filtered += 1
        for path in paths:
            assert (prefilter.fullmatch(path) is None) == (combined.fullmatch(path) is None), (path, combined.pattern)
    return filtered


def test_the_prefilter_matches_as_the_alternation_on_generated_rules() -> None:
    rng = random.Random(5)
    filtered = 0
    for _ in range(300):
        texts = [_rule(rng) for _ in range(rng.randint(1, 8))]
        paths = [_path(rng) for _ in range(200)]
        for deny in (True, False):
            filtered += _check(PathRules.compile(list(enumerate(texts)), deny), paths)
    assert filtered > 100


def test_the_prefilter_matches_as_the_alternation_on_the_example_policy() -> None:
    policy = load_policy(["examples/policy.yaml"])
    rng = random.Random(6)
    paths = [_path(rng) for _ in range(3000)]
    paths += ["home/dev/project/.env", "x/.ssh/id_rsa", "a/b/server.pem/x", ".aws/credentials", "src/main.py"]
    filtered = 0
    for entry in policy.entries("PreToolUse"):
        if isinstance(entry.handler, RuleHandler):
            for rule_list in compile_rules(entry.handler):
                for tool in rule_list.tools.values():
                    if tool.paths is not None:
                        filtered += _check(tool.paths, paths)
    assert filtered >= 2  # the pack's secrets and the example's own
