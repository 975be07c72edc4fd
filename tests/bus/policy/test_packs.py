"""Built-in packs: included by name (``hookbus.include``), first in the file's handlers, covered by
the revision, an unknown name a one-line error; the dangerous-commands pack passes its own tests."""

from __future__ import annotations

import asyncio
import fnmatch
import textwrap
import tomllib
from pathlib import Path

import pytest

from bus.errors import PolicyError
from bus.policy import packs
from bus.policy.loading import load_policy, parse_policy_text, policy_from_text
from bus.policy.schema import RuleHandler
from hookbus.policytools.cases import load_suite
from hookbus.policytools.coverage import CoverageReport, _Counter
from hookbus.policytools.lint import lint_files
from hookbus.policytools.runner import CaseRunner

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PACK = "dangerous-commands"


def inline(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_the_built_in_packs_are_listed() -> None:
    assert PACK in packs.pack_names()
    assert "hooks:" in packs.pack_text(PACK)


def test_an_included_pack_adds_its_handlers_before_the_files_own() -> None:
    policy = policy_from_text(
        inline(
            """
            hookbus: {include: [dangerous-commands]}
            hooks:
              PreToolUse:
                - matcher: Bash
                  hooks: [{type: rule, deny: ["Bash(make deploy)"]}]
            """
        )
    )
    entries = policy.entries("PreToolUse")
    assert {e.source for e in entries[:-1]} == {f"pack:{PACK}"}
    last = entries[-1].handler
    assert entries[-1].source == "policy.yaml" and isinstance(last, RuleHandler) and last.deny == ["Bash(make deploy)"]
    assert policy.settings.include == []  # the include is applied, not carried as a setting


def test_an_unknown_pack_is_one_error_with_its_line() -> None:
    with pytest.raises(PolicyError) as raised:
        policy_from_text("hookbus:\n  include: [dangerous-command]\n")
    assert str(raised.value) == (
        "policy.yaml:2: hookbus.include[0]: unknown pack 'dangerous-command' (did you mean 'dangerous-commands'?)"
    )
    problems = parse_policy_text("hookbus: {include: [nope]}\n", "p.yaml").problems
    assert [p.message for p in problems] == [f"unknown pack 'nope' (built-in packs: {', '.join(packs.pack_names())})"]


def test_the_revision_covers_the_packs_text(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "hookbus: {include: [dangerous-commands]}\n"
    before = policy_from_text(text).revision
    original = packs.pack_text(PACK)
    monkeypatch.setattr("bus.policy.loading.pack_text", lambda name: original + "\n# a new release\n")
    assert policy_from_text(text).revision != before


def test_two_layers_including_the_same_pack_run_it_once_without_a_note(tmp_path: Path) -> None:
    org, team = tmp_path / "org.yaml", tmp_path / "team.yaml"
    org.write_text("hookbus: {include: [dangerous-commands]}\n")
    team.write_text("hookbus: {include: [dangerous-commands]}\n")
    one, both = load_policy([org]), load_policy([org, team])
    assert both.handler_count == one.handler_count > 0
    assert not [note for note in both.notes if "duplicates" in note]


@pytest.mark.parametrize("name", ["packs/dangerous-commands.yaml", "policy.yaml"])
def test_the_linter_finds_nothing_in_the_pack(name: str) -> None:
    assert [str(finding) for finding in lint_files([EXAMPLES / name])] == []


def test_a_finding_against_a_pack_rule_names_its_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        inline(
            """
            hookbus: {include: [dangerous-commands]}
            hooks:
              PreToolUse:
                - matcher: Bash
                  hooks: [{type: rule, ask: ["Bash(rm -rf /)"]}]
            """
        )
    )
    (finding,) = lint_files([policy])
    line = packs.pack_text(PACK).splitlines().index('            - "Bash(rm -rf /)"') + 1
    assert f"deny rule 'Bash(rm -rf /)' (pack:{PACK}:{line}) covers it" in finding.message


def test_the_example_policy_includes_the_pack() -> None:
    policy = load_policy([EXAMPLES / "policy.yaml"])
    assert any(e.source == f"pack:{PACK}" for e in policy.entries("PreToolUse"))


@pytest.mark.parametrize("name", ["packs/dangerous-commands_test.yaml", "policy_test.yaml"])
def test_the_packs_policy_tests_pass(name: str) -> None:
    suite = load_suite(EXAMPLES / name)
    runner = CaseRunner(load_policy(list(suite.policy_paths)), run_handlers=False, sandbox="")

    async def run_all() -> list[str]:
        results = [await runner.run(case) for case in suite.cases]
        return [f"{r.where} {r.name}: {r.failures or r.error}" for r in results if not r.passed]

    assert len(suite.cases) > 10
    assert asyncio.run(run_all()) == []


def test_coverage_names_a_pack_rules_line() -> None:
    policy = load_policy([EXAMPLES / "policy.yaml"])
    report = CoverageReport(policy.revision, list(policy.sources), None, None, [])
    _Counter(policy, report)
    line = packs.pack_text(PACK).splitlines().index('            - "Bash(rm -rf /)"') + 1
    assert [c.where for (_, kind, text), c in report.rules.items() if (kind, text) == ("deny", "Bash(rm -rf /)")] == [
        f"pack:{PACK}:{line}"
    ]


def test_every_pack_is_package_data() -> None:
    project = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["bus"]
    for name in packs.pack_names():
        assert any(fnmatch.fnmatch(f"policy/packs/{name}.yaml", glob) for glob in globs), name
