"""``hookbus policy lint``: one finding per rule of the linter, each at its line, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus.rules.permissions import parse_rule
from hookbus.policytools.lint import covers, lint_files
from tests.conftest import REPO, run_hookbus

# Every finding below is marked with a comment naming its rule, on the line it must be reported at.
POLICY = """\
hookbus:
  deadlineSeconds: 2.0
  agents: [claude, codex]
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: rule
          deny: ["Bash(git push *)"]
          allow: ["Bash(git push origin main)"]  # unreachable-rule: the deny above covers it
        - type: rule
          deny:
            - "Bash(*)"
            - "Bash(rm -rf *)"  # redundant-rule: after a *
          ask: ["Bash(npm publish *)"]  # unreachable-rule, ask-unsupported (codex)
    - matcher: Bahs  # unknown-tool
      hooks:
        - {type: command, command: "true"}
    - matcher: Write|Edit
      hooks:
        - {type: command, command: "./check.sh", if: "Bash(ls *)"}  # if-never-matches
        - {type: command, command: "./slow.sh", timeout: 30}  # timeout-past-deadline
        - {type: rule, async: true, deny: ["Write(*.pem)"]}  # async-decision
        - {type: rule, deny: ["Read(**/.env)"]}  # unreachable-rule: Read never passes Write|Edit
    - matcher: Write|Edit
      hooks:
        - {type: command, command: "./slow.sh", timeout: 30}  # duplicate-handler
  Stop:
    - hooks:
        - {type: command, command: "./stop.sh", if: "Bash(*)"}  # if-never-matches: Stop has no if
  PostToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, allow: ["Bash(ls *)"], agents: [claude]}
        - {type: rule, deny: ["Bash(ls -la)"], agents: [claude]}
"""


def expected_findings(text: str) -> list[tuple[int, str]]:
    """``(line, rule)`` of every ``# rule`` comment in ``text``."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if "  # " in line:
            for part in line.split("  # ", 1)[1].split(":")[0].split(","):
                found.append((n, part.strip().split(" ")[0]))
    return sorted(found)


pytestmark = pytest.mark.system


def line_with(text: str) -> int:
    return next(n for n, line in enumerate(POLICY.splitlines(), 1) if text in line)


def test_every_rule_is_found_at_its_line_with_its_severity(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    result = run_hookbus("policy", "lint", str(path), "--json")
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)
    assert sorted((f["line"], f["rule"]) for f in findings) == expected_findings(POLICY)
    assert {f["file"] for f in findings} == {str(path)}
    severity = {(f["line"], f["rule"]): f["severity"] for f in findings}
    warnings = {rule for (_, rule), level in severity.items() if level == "warning"}
    assert warnings == {"redundant-rule", "unknown-tool", "timeout-past-deadline", "duplicate-handler"}
    by_line = {f["line"]: f["message"] for f in findings if f["rule"] == "unreachable-rule"}
    assert by_line[line_with("Bash(git push origin main)")] == (
        f"allow rule 'Bash(git push origin main)' never decides: deny rule 'Bash(git push *)' ({path}:9) covers it"
    )
    assert by_line[line_with("Read(**/.env)")] == (
        "deny rule 'Read(**/.env)' never applies: matcher 'Write|Edit' never lets Read through"
    )
    ask = next(f for f in findings if f["rule"] == "ask-unsupported")
    assert ask["severity"] == "error" and ask["message"].startswith("asks, and codex cannot ask (no: ")


def test_the_text_is_one_line_per_finding_and_strict_counts_warnings(tmp_path: Path) -> None:
    warned = tmp_path / "warned.yaml"
    warned.write_text(
        "hooks:\n  PreToolUse:\n    - matcher: Bahs\n      hooks:\n        - {type: command, command: 'true'}\n"
    )
    result = run_hookbus("policy", "lint", str(warned))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{warned}:3: warning: matcher 'Bahs' names no tool that Claude Code or any supported agent has [unknown-tool]",
        "0 errors, 1 warnings in 1 files",
    ]
    assert run_hookbus("policy", "lint", "--strict", str(warned)).returncode == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, deny: 3}\n")
    refused = run_hookbus("policy", "lint", str(broken))
    assert refused.returncode == 1 and refused.stderr.startswith(f"{broken}:5: ")


def test_a_handler_repeated_in_a_second_file_is_named_with_the_first() -> None:
    findings = lint_files([REPO / "examples" / "policy.yaml", REPO / "examples" / "policy.yaml"])
    assert findings and {f.rule for f in findings} == {"duplicate-handler"}
    assert all(f.message.startswith(f"the same handler as {REPO / 'examples' / 'policy.yaml'}:") for f in findings)


def test_session_policy_mistakes_are_found_at_their_lines(tmp_path: Path) -> None:
    policy = tmp_path / "session.yaml"
    head = """hookbus:
  session:
    facts:
      secret: {setBy: [{event: PreToolUse, rules: ["Read(**/.env)"]}]}
    counters:
      calls: {count: [{event: PreToolUse}], window: 1h}
"""
    policy.write_text(head + "hooks: {}\n")
    (unread,) = lint_files([policy])
    assert (unread.line, unread.severity, unread.rule) == (6, "warning", "unread-counter")
    assert str(unread) == f"{policy}:6: warning: counter 'calls' is not read by any when: or budget [unread-counter]"
    never = '      never: {setBy: [{event: PreToolUse, rules: ["Bash(curl *)"], except: [Bash]}]}\n'
    policy.write_text(head.replace("    counters:\n", never + "    counters:\n") + "hooks: {}\n")
    result = run_hookbus("policy", "lint", str(policy))
    assert result.returncode == 1
    assert (
        f"{policy}:5: hookbus.session.facts.never.setBy: fact 'never' is set by no event"
        in result.stdout + result.stderr
    )
    when = "  PreToolUse:\n    - matcher: Bash\n      when: {facts: [secret], notFacts: [secret]}\n"
    policy.write_text(head + "hooks:\n" + when + "      hooks: [{type: rule, deny: [Bash]}]\n")
    result = run_hookbus("policy", "lint", str(policy))
    assert result.returncode == 1
    assert f"{policy}:10: hooks.PreToolUse[0].when: this condition can never hold" in result.stdout + result.stderr


def test_the_example_policies_lint_clean() -> None:
    for name in ("policy.yaml", "agent_loop_policy.yaml", "async_policy.yaml"):
        assert lint_files([REPO / "examples" / name]) == [], name


@pytest.mark.parametrize(
    ("wide", "narrow", "expected"),
    [
        ("Bash", "Bash(ls)", True),
        ("Bash(*)", "Bash", True),
        ("Bash(git push *)", "Bash(git push --force origin *)", True),
        ("Bash(git push *)", "Bash(git push)", True),
        ("Bash(git push --force *)", "Bash(git push *)", False),
        ("Bash(npm run test:*)", "Bash(npm run test -- -x)", True),
        ("Read(**/.env)", "Read(/srv/app/.env)", True),
        ("Read(**/.env)", "Edit(/srv/app/.env)", False),
        ("Read(**/id_rsa)", "Read(//**/id_rsa)", False),  # the cwd's, not any directory's
        ("Read(//**/id_rsa)", "Read(//home/dev/.ssh/id_rsa)", True),
        ("Read(~/.ssh/**)", "Read(~/.ssh/id_rsa)", True),
        ("Bash(a[b]*)", "Bash(ab)", False),
    ],
)
def test_covering_is_judged_on_the_rules_text(wide: str, narrow: str, expected: bool) -> None:
    assert covers(parse_rule(wide), parse_rule(narrow)) is expected
