"""``hookbus policy test``: test files that pass and fail on purpose, through the real CLI.

Each failing case's line is checked word for word (what was expected, what came back, which
handler decided), and the JUnit XML and JSON are read back.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import REPO, run_hookbus

pytestmark = pytest.mark.system

POLICY = """\
hookbus:
  deadlineSeconds: 5.0
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: rule
          reason: "no force push"
          deny: ["Bash(git push --force *)"]
          ask: ["Bash(git push *)"]
        - type: rule
          reason: "codex may not curl"
          agents: [codex]
          deny: ["Bash(curl *)"]
    - matcher: Write
      hooks:
        - {type: command, command: "./sandbox-writes.sh"}
  Stop:
    - hooks:
        - {type: command, command: "./tests-ran.sh"}
  SessionStart:
    - hooks:
        - {type: command, command: "echo fleet rules apply", once: true}
"""

# Lines of the cases below are checked: keep them where they are.
CASES = """\
cases:
  - name: force push is denied
    tool: Bash
    input: {command: "git push --force origin main"}
    expect: {decision: deny, reason: "no force push"}
  - name: push asks
    tool: Bash
    input: {command: "git push origin main"}
    expect: {decision: ask}
  - name: codex may not curl
    agent: codex
    tool: Bash
    input: {command: "curl https://example.com"}
    expect: {decision: deny, reason: "codex may not curl"}
  - name: claude may curl
    tool: Bash
    input: {command: "curl https://example.com"}
    expect: {decision: none}
  - name: gemini's shell tool is Bash
    agent: gemini
    hookInput:
      {hook_event_name: BeforeTool, session_id: g1, cwd: /w,
       tool_name: run_shell_command, tool_input: {command: "git push --force x y"}}
    expect: {decision: deny}
  - name: writes are sandboxed
    tool: Write
    input: {file_path: /etc/passwd, content: x}
    stubs:
      - handler: ./sandbox-writes.sh
        stdout:
          hookSpecificOutput:
            {hookEventName: PreToolUse, permissionDecision: allow,
             updatedInput: {file_path: /tmp/sb/etc/passwd, content: x}}
    expect: {decision: allow, updatedInput: {file_path: /tmp/sb/etc/passwd, content: x}}
  - name: stop without tests is blocked
    event: Stop
    stubs: [{handler: tests-ran, exitCode: 2, stderr: "run the tests first"}]
    expect: {decision: block, reason: "run the tests first"}
  - name: the stop guard lets go after eight blocks
    event: Stop
    session: {stopBlocks: 8}
    stubs: [{handler: tests-ran, exitCode: 2, stderr: "run the tests first"}]
    expect: {decision: none, reason: "stopBlockLimit 8"}
  - name: fleet context at the start
    event: SessionStart
    input: {source: startup}
    stubs: [{handler: echo fleet, stdout: "fleet rules apply"}]
    expect: {context: "fleet rules"}
  - name: WRONG decision
    tool: Bash
    input: {command: "git push origin main"}
    expect: {decision: deny}
  - name: WRONG reason
    tool: Bash
    input: {command: "git push --force origin main"}
    expect: {reason: "not this"}
  - name: WRONG updatedInput
    tool: Write
    input: {file_path: /etc/passwd, content: x}
    stubs:
      - handler: ./sandbox-writes.sh
        stdout: {hookSpecificOutput: {hookEventName: PreToolUse, updatedInput: {file_path: /b}}}
    expect: {updatedInput: {file_path: /a}}
  - name: WRONG context, the once hook already ran
    event: SessionStart
    input: {source: resume}
    session: {onceFired: [echo fleet rules apply]}
    stubs: [{handler: echo fleet, stdout: "fleet rules apply"}]
    expect: {context: "fleet rules"}
  - name: WRONG the write hook is not run without a stub
    tool: Write
    input: {file_path: /etc/passwd, content: x}
    expect: {decision: allow}
  - name: WRONG stub
    tool: Bash
    input: {command: ls}
    stubs: [{handler: ./no-such-hook.sh}]
    expect: {decision: none}
"""

#: ``{WRONG ...}`` is the line of that case in CASES; ``{rid}`` and ``{wid}`` the rule and write handlers' ids.
EXPECTED_FAILURES = [
    "FAIL {t}:{WRONG decision} WRONG decision: expected decision deny, got ask"
    " (decided by rule Bash(git push *) [{rid}])",
    "FAIL {t}:{WRONG reason} WRONG reason: expected a reason containing 'not this',"
    " got 'no force push (rule: Bash(git push --force *))' (decided by rule Bash(git push --force *) [{rid}])",
    'FAIL {t}:{WRONG updatedInput} WRONG updatedInput: expected updatedInput {{"file_path":"/a"}},'
    ' got {{"file_path":"/b"}} (no handler decided)',
    "FAIL {t}:{WRONG context} WRONG context, the once hook already ran: expected added context containing"
    " 'fleet rules', got no added context (no handler decided)",
    "FAIL {t}:{WRONG the write} WRONG the write hook is not run without a stub: expected decision allow, got none"
    " (no handler decided; not run: command ./sandbox-writes.sh [{wid}])",
    "ERROR {t}:{WRONG stub} WRONG stub: stub './no-such-hook.sh':"
    " no handler of PreToolUse in the policy is './no-such-hook.sh'",
]
WRONG = ("WRONG decision", "WRONG reason", "WRONG updatedInput", "WRONG context", "WRONG the write", "WRONG stub")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "policy_test.yaml").write_text(CASES)
    return tmp_path


def handler_ids(project: Path) -> dict[str, str]:
    from bus.policy.loading import load_policy

    policy = load_policy([project / "policy.yaml"])
    rule = policy.entries("PreToolUse")[0].handler_id[:8]
    write = policy.entries("PreToolUse")[2].handler_id[:8]
    return {"rid": rule, "wid": write}


def test_each_failing_case_is_one_line_with_what_was_expected_what_came_back_and_who_decided(project: Path) -> None:
    result = run_hookbus("policy", "test", str(project / "policy_test.yaml"))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    t = str(project / "policy_test.yaml")
    lines_of = {
        name: str(n)
        for n, text in enumerate(CASES.splitlines(), 1)
        for name in WRONG
        if text.startswith(f"  - name: {name}")
    }
    assert len(lines_of) == 6
    expected = [re.sub(r"\{(WRONG [^}]*)\}", lambda m: lines_of[m.group(1)], line) for line in EXPECTED_FAILURES]
    assert lines[:-1] == [line.format(t=t, **handler_ids(project)) for line in expected]
    assert lines[-1].startswith("9 passed, 5 failed, 1 errors (15 cases in 1 files, ")


def test_junit_xml_reads_back_with_every_case_and_failure(project: Path, tmp_path: Path) -> None:
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    result = run_hookbus("policy", "test", str(project), "--junit", str(junit))
    assert result.returncode == 1, result.stderr
    root = ElementTree.parse(junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("15", "5", "1")
    [suite] = root.findall("testsuite")
    assert suite.get("name") == str(project / "policy_test.yaml")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert len(cases) == 15 and cases["force push is denied"].find("failure") is None
    assert cases["force push is denied"].get("line") == "2"
    failure = cases["WRONG decision"].find("failure")
    assert failure is not None and failure.get("message") == "expected decision deny, got ask"
    error = cases["WRONG stub"].find("error")
    assert error is not None and str(error.get("message")).endswith("in the policy is './no-such-hook.sh'")


def test_json_and_run_select_cases(project: Path) -> None:
    result = run_hookbus("policy", "test", str(project), "--json", "--run", "stop")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["passed"], report["failed"]) == (2, 0)
    by_name = {case["name"]: case for case in report["cases"]}
    assert set(by_name) == {"stop without tests is blocked", "the stop guard lets go after eight blocks"}
    blocked = by_name["stop without tests is blocked"]
    assert blocked["decision"] == "block" and blocked["reason"] == "run the tests first"
    assert blocked["decided_by"] == [f"command ./tests-ran.sh [{blocked['decided_by'][0][-9:-1]}]"]
    guard = by_name["the stop guard lets go after eight blocks"]
    assert guard["decision"] == "none" and "9 times in a row" in guard["output"]["systemMessage"]


def test_run_handlers_runs_a_command_hook_for_real(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        textwrap.dedent(
            """\
            hooks:
              UserPromptSubmit:
                - hooks:
                    - {type: command, command: "cat >/dev/null; echo \\"cwd is $PWD\\""}
            """
        )
    )
    (tmp_path / "p_test.yaml").write_text(
        "cases:\n  - {name: context from the hook, event: UserPromptSubmit, input: {prompt: hi},\n"
        "     expect: {context: 'cwd is /'}}\n"
    )
    without = run_hookbus("policy", "test", str(tmp_path / "p_test.yaml"))
    assert without.returncode == 1 and "got no added context (no handler decided; not run: command" in without.stdout
    ran = run_hookbus("policy", "test", str(tmp_path / "p_test.yaml"), "--run-handlers", "--json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [case] = json.loads(ran.stdout)["cases"]
    # In the replay's sandbox: a fresh temporary directory, not this one.
    context = case["output"]["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("cwd is /") and "hookbus-policy-test-" in context and str(tmp_path) not in context


def test_a_policy_without_tests_says_so_and_a_bad_test_file_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "tested.yaml").write_text(POLICY)
    (tmp_path / "untested.yaml").write_text("hooks: {}\n")
    (tmp_path / "tested_test.yaml").write_text(
        "cases:\n  - name: ok\n    tool: Bash\n    input: {command: ls}\n    expect: {decision: none}\n"
    )
    result = run_hookbus("policy", "test", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{tmp_path / 'untested.yaml'}: no tests"
    by_policy = run_hookbus("policy", "test", str(tmp_path / "tested.yaml"), str(tmp_path / "untested.yaml"))
    assert by_policy.returncode == 0, by_policy.stderr
    assert by_policy.stdout.splitlines()[0] == f"{tmp_path / 'untested.yaml'}: no tests"
    assert by_policy.stdout.splitlines()[1].startswith("1 passed (1 cases in 1 files, ")
    (tmp_path / "empty").mkdir()
    alone = run_hookbus("policy", "test", str(tmp_path / "empty"), "--policy", str(tmp_path / "untested.yaml"))
    assert alone.returncode == 1
    assert alone.stdout.splitlines() == [f"{tmp_path / 'untested.yaml'}: no tests", "no test cases found"]
    (tmp_path / "bad_test.yaml").write_text(
        "policy: tested.yaml\ncases:\n  - name: typo\n    event: PreToolUsed\n    expect: {decisoin: deny}\n"
    )
    bad = run_hookbus("policy", "test", str(tmp_path / "bad_test.yaml"))
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.splitlines() == [
        f"{tmp_path / 'bad_test.yaml'}:4: cases[0].event: unknown event 'PreToolUsed' (did you mean 'PreToolUse'?)",
        f"{tmp_path / 'bad_test.yaml'}:5: cases[0].expect: unknown field 'decisoin'",
    ]


def test_the_examples_tests_pass() -> None:
    result = run_hookbus("policy", "test", str(REPO / "examples"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed" not in result.stdout and "no tests" not in result.stdout


def test_a_plugin_answers_only_the_cases_of_the_policy_that_lists_it(tmp_path: Path) -> None:
    (tmp_path / "curl_plugin.py").write_text(
        textwrap.dedent(
            """\
            from bus.hooks.plugins import register_hook

            def no_curl(hook_input):
                return "no curl (plugin)" if "curl" in str(hook_input.tool_input or {}) else None

            register_hook("PreToolUse", no_curl)
            """
        )
    )
    (tmp_path / "with.yaml").write_text("hookbus:\n  plugins: [curl_plugin]\nhooks: {}\n")
    (tmp_path / "without.yaml").write_text("hooks: {}\n")
    case = "cases:\n  - {{name: curl, tool: Bash, input: {{command: 'curl x'}}, expect: {{decision: {}}}}}\n"
    (tmp_path / "with_test.yaml").write_text(case.format("deny"))
    (tmp_path / "without_test.yaml").write_text(case.format("none"))
    result = run_hookbus("policy", "test", ".", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = {c["file"]: c for c in json.loads(result.stdout)["cases"]}
    assert cases["with_test.yaml"]["reason"] == "no curl (plugin)"
    assert cases["without_test.yaml"]["decision"] == "none"


def test_a_whole_hook_input_in_an_agents_format_brings_its_own_event(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "hooks:\n  PostToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, deny: ['Bash(rm -rf *)']}\n"
    )
    after_tool = {
        "hook_event_name": "AfterTool",
        "session_id": "g-1",
        "cwd": "/w",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "rm -rf x"},
        "tool_response": {},
    }
    cases = [
        {"name": "AfterTool: PostToolUse", "agent": "gemini", "hookInput": after_tool, "expect": {"decision": "block"}},
        {
            "name": "an event given wins",
            "agent": "gemini",
            "event": "PreToolUse",
            "hookInput": after_tool,
            "expect": {"decision": "none"},
        },
    ]
    (tmp_path / "policy_test.json").write_text(json.dumps({"cases": cases}))
    result = run_hookbus("policy", "test", str(tmp_path), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [c["decision"] for c in json.loads(result.stdout)["cases"]] == ["block", "none"]
