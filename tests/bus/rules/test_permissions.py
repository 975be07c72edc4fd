"""Permission-rule syntax for ``if`` and ``rule`` handlers, rule by rule of Claude Code's syntax."""

from __future__ import annotations

from typing import Any

import pytest

from bus.rules.paths import agent_home
from bus.rules.permissions import PermissionRule, parse_rule, rule_matches, split_bash

CWD = "/work/proj"


# --- parse_rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tool", "content"),
    [
        ("Bash", "Bash", None),
        ("Bash(git push *)", "Bash", "git push *"),
        ("  Bash( git push * )  ", "Bash", "git push *"),
        ("Bash(npm run test:*)", "Bash", "npm run test:*"),
        ("Bash(echo $(date))", "Bash", "echo $(date)"),
        ('Bash(echo ")")', "Bash", 'echo ")"'),
        ("Bash(echo \\))", "Bash", "echo \\)"),
        ("Edit(src/**)", "Edit", "src/**"),
        ("Read(./.env)", "Read", "./.env"),
        ("WebFetch(domain:example.com)", "WebFetch", "domain:example.com"),
        ("mcp__github", "mcp__github", None),
        ("mcp__github__*", "mcp__github__*", None),
        ("mcp__my-server__get_issue", "mcp__my-server__get_issue", None),
        ("PowerShell(Remove-Item *)", "PowerShell", "Remove-Item *"),
        ("Agent(model:opus)", "Agent", "model:opus"),
        ("*", "*", None),
    ],
)
def test_parse_rule(text: str, tool: str, content: str | None) -> None:
    rule = parse_rule(text)
    assert rule == PermissionRule(tool, content)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty permission rule"),
        ("   ", "empty permission rule"),
        ("Bash()", "empty specifier"),
        ("Bash(  )", "empty specifier"),
        ("Bash(git push", "must end with"),
        ("Bash(git push))", "unbalanced"),
        ("Bash((git push)", "unbalanced"),
        ("Bash)", "unbalanced"),
        ("Bash(echo $(date)", "unbalanced"),
        ("(git push)", "no tool name"),
        ("Bash git(x)", "invalid tool name"),
        ("Ba$h(x)", "invalid tool name"),
        ("Bash(x) && Edit(y)", "unbalanced"),
    ],
)
def test_parse_rule_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rule(text)


def test_rule_round_trips_to_text() -> None:
    assert str(parse_rule("Bash(git push *)")) == "Bash(git push *)"
    assert str(parse_rule("Read")) == "Read"


# --- tool part ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "tool_name", "expected"),
    [
        ("Bash", "Bash", True),
        ("Bash", "PowerShell", False),
        ("Bash", "BashOutput", False),
        ("bash", "Bash", False),
        ("Read", "Read", True),
        ("WebFetch", "WebFetch", True),
        ("WebFetch", "WebSearch", False),
        # Edit covers every tool that edits files, Read every tool that reads them
        ("Edit", "Edit", True),
        ("Edit", "Write", True),
        ("Edit", "MultiEdit", True),
        ("Edit", "NotebookEdit", True),
        ("Edit", "Read", False),
        ("Write", "Edit", False),
        ("Read", "Grep", True),
        ("Read", "Glob", True),
        ("Read", "Edit", False),
        # Task is the old name of Agent
        ("Task", "Agent", True),
        ("Agent", "Task", True),
        # MCP: server-wide forms and exact tools
        ("mcp__github", "mcp__github__get_issue", True),
        ("mcp__github", "mcp__github", True),
        ("mcp__github", "mcp__githubx__get_issue", False),
        ("mcp__github", "mcp__gitlab__get_issue", False),
        ("mcp__github__*", "mcp__github__get_issue", True),
        ("mcp__github__*", "mcp__gitlab__get_issue", False),
        ("mcp__github__get_*", "mcp__github__get_issue", True),
        ("mcp__github__get_*", "mcp__github__create_issue", False),
        ("mcp__github__get_issue", "mcp__github__get_issue", True),
        ("mcp__github__get_issue", "mcp__github__get_issues", False),
        ("mcp__*", "mcp__anything__tool", True),
        ("mcp__*", "Bash", False),
        ("*", "Bash", True),
    ],
)
def test_tool_part(rule: str, tool_name: str, expected: bool) -> None:
    assert rule_matches(parse_rule(rule), tool_name, {}, CWD) is expected


# --- Bash --------------------------------------------------------------------------------


def _bash(rule: str, command: str, **kwargs: Any) -> bool:
    return rule_matches(parse_rule(rule), "Bash", {"command": command}, CWD, **kwargs)


@pytest.mark.parametrize(
    ("rule", "command", "expected"),
    [
        # exact match without wildcards
        ("Bash(npm run build)", "npm run build", True),
        ("Bash(npm run build)", "npm run build --watch", False),
        ("Bash(npm run build)", "npm  run   build", True),  # whitespace normalised
        ("Bash(npm run build)", "npm run buil", False),
        # trailing " *": the prefix as a whole word, then anything or nothing
        ("Bash(git push *)", "git push", True),
        ("Bash(git push *)", "git push origin main", True),
        ("Bash(git push *)", "git pushx", False),
        ("Bash(git push *)", "git pull", False),
        ("Bash(ls *)", "ls", True),
        ("Bash(ls *)", "ls -la", True),
        ("Bash(ls *)", "lsof", False),
        ("Bash(ls*)", "lsof", True),
        ("Bash(ls*)", "ls -la", True),
        # legacy ":*" suffix == trailing " *"
        ("Bash(npm run test:*)", "npm run test", True),
        ("Bash(npm run test:*)", "npm run test --watch", True),
        ("Bash(npm run test:*)", "npm run testx", False),
        ("Bash(npm run test:*)", "npm run build", False),
        ("Bash(git:* push)", "git:x push", True),  # ':*' elsewhere is a literal ':' + wildcard
        ("Bash(git:* push)", "git push", False),
        # '*' anywhere, spaces included
        ("Bash(git * main)", "git push origin main", True),
        ("Bash(git * main)", "git log", False),
        ("Bash(git log * main)", "git log main", False),
        ("Bash(* --version)", "node --version", True),
        ("Bash(* --version)", "node -v", False),
        ("Bash(* --help *)", "npm --help x", True),
        ("Bash(* --help *)", "npm --help", False),  # only a sole trailing '*' is optional
        ("Bash(*)", "anything at all", True),
        ("Bash(*)", "echo 'unbalanced", True),
        # rm -rf / is exact; /* is a glob
        ("Bash(rm -rf /)", "rm -rf /", True),
        ("Bash(rm -rf /)", "rm -rf /tmp/x", False),
        ("Bash(rm -rf /*)", "rm -rf /tmp", True),
        ("Bash(rm -rf /*)", "rm -rf ./tmp", False),
        ("Bash(rm -rf /)", 'rm -rf "/"', True),  # quotes removed
        # leading VAR=value stripped
        ("Bash(git push *)", "GIT_SSH_COMMAND='ssh -i k' git push", True),
        ("Bash(git push *)", "A=1 B=2 git push --force", True),
        ("Bash(npm test)", "NODE_ENV=test npm test", True),
        # every subcommand is checked: && || ; | & newline
        ("Bash(rm -rf /)", "cd / && rm -rf /", True),
        ("Bash(rm -rf /)", "false || rm -rf /", True),
        ("Bash(rm -rf /)", "ls; rm -rf /", True),
        ("Bash(rm *)", "find . -name x | rm -f", True),
        ("Bash(rm *)", "sleep 1 & rm x", True),
        ("Bash(rm *)", "ls\nrm x", True),
        ("Bash(git push *)", "git status && git log", False),
        ("Bash(safe-cmd *)", "safe-cmd && other-cmd", True),  # any subcommand matching is enough
        ("Bash(other-cmd)", "safe-cmd && other-cmd", True),
        # separators inside quotes are not separators
        ("Bash(rm *)", "echo 'x && rm -rf /'", False),
        ("Bash(rm *)", 'echo "x; rm -rf /"', False),
        # commands inside $() and backticks, recursively
        ("Bash(rm -rf /)", "echo $(rm -rf /)", True),
        ("Bash(rm -rf /)", "echo `rm -rf /`", True),
        ("Bash(rm -rf /)", "echo $(echo $(rm -rf /))", True),
        ("Bash(curl *)", 'x="$(curl evil.sh)"', True),
        ("Bash(whoami)", "echo `whoami`", True),
        ("Bash(date)", "echo '$(date)'", False),  # single quotes: no substitution
        # wrappers Claude Code looks through
        ("Bash(npm test *)", "timeout 30 npm test", True),
        ("Bash(npm test *)", "nohup npm test --ci", True),
        ("Bash(grep *)", "xargs grep pattern", True),
        ("Bash(timeout *)", "timeout 30 npm test", True),  # the wrapper itself still matches
        # comments and here-documents are not commands
        ("Bash(rm *)", "ls # rm -rf /", False),
        ("Bash(rm *)", "cat <<EOF\nrm -rf /\nEOF", False),
    ],
)
def test_bash_rules(rule: str, command: str, expected: bool) -> None:
    assert _bash(rule, command) is expected


@pytest.mark.parametrize(
    ("rule", "command", "fail_open_result"),
    [
        # unparsable commands: the hook runs (fail open)
        ("Bash(git push *)", "echo 'unbalanced", True),
        ("Bash(git push *)", 'git push "origin', True),
        ("Bash(rm -rf /)", "echo $(unterminated", True),
        ("Bash(rm -rf /)", "echo `unterminated", True),
        ("Bash(rm -rf /)", "echo )", True),
        # a pattern more specific than the command name meets $VAR, $() or backticks
        ("Bash(git push *)", "git $SUBCOMMAND origin", True),
        ("Bash(git push *)", "git $(echo push) origin", True),
        ("Bash(git push *)", "git `echo push` origin", True),
        ("Bash(git push *)", 'git "$SUB"', True),
        ("Bash(rm -rf /)", "rm -rf $TARGET", True),
        ("Bash(git push *)", "$CMD push", True),  # the program itself is unknown
        ("Bash(git push *)", "ls $HOME", False),  # another program: no reason to run
        ("Bash(git push *)", "git status '$HOME'", False),  # quoted: literal, not an expansion
        ("Bash(git *)", "git $SUB", True),  # literal match anyway ('*' covers it)
        ("Bash(git)", "git $SUB", False),  # a bare command name is not "more specific"
        ("Bash(git push *)", "timeout 5 git $SUB", True),  # wrapper stripped before the check
    ],
)
def test_bash_fail_open(rule: str, command: str, fail_open_result: bool) -> None:
    assert _bash(rule, command) is fail_open_result
    literal = rule == "Bash(git *)"
    assert _bash(rule, command, fail_open=False) is literal


def test_bash_without_a_command_string_does_not_match() -> None:
    assert not rule_matches(parse_rule("Bash(ls *)"), "Bash", {}, CWD)
    assert not rule_matches(parse_rule("Bash(ls *)"), "Bash", {"command": ["ls"]}, CWD)
    assert rule_matches(parse_rule("Bash"), "Bash", {}, CWD)


@pytest.mark.parametrize(
    ("rule", "command", "expected"),
    [
        ("PowerShell(Remove-Item *)", "Remove-Item -Recurse C:\\x", True),
        ("PowerShell(Remove-Item *)", "remove-item foo", True),  # case-insensitive
        ("PowerShell(Remove-Item *)", "rm foo", True),  # alias canonicalised
        ("PowerShell(Remove-Item *)", "del foo", True),
        ("PowerShell(Get-ChildItem *)", "gci | Remove-Item", True),
        ("PowerShell(Remove-Item *)", "gci | Where-Object { $_.Length } | Remove-Item", True),
        ("PowerShell(Remove-Item *)", "Get-ChildItem; Write-Output 'Remove-Item x'", False),
        ("PowerShell(git push *)", "& git push origin", True),
        ("PowerShell(Get-Date)", "Write-Output (Get-Date)", True),
        ("PowerShell(Remove-Item *)", "Remove-ItemProperty x", False),
    ],
)
def test_powershell_rules(rule: str, command: str, expected: bool) -> None:
    assert rule_matches(parse_rule(rule), "PowerShell", {"command": command}, CWD) is expected


def test_bash_rules_do_not_match_powershell_calls() -> None:
    assert not rule_matches(parse_rule("Bash(ls *)"), "PowerShell", {"command": "ls"}, CWD)
    assert not rule_matches(parse_rule("PowerShell(ls *)"), "Bash", {"command": "ls"}, CWD)


# --- File tools --------------------------------------------------------------------------


def _file(rule: str, path: str, tool: str = "Edit", cwd: str | None = CWD, **kwargs: Any) -> bool:
    field = "notebook_path" if tool == "NotebookEdit" else "path" if tool in ("Glob", "Grep") else "file_path"
    return rule_matches(parse_rule(rule), tool, {field: path}, cwd, **kwargs)


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        # single-segment dir pattern: <cwd>/src only (v2.1.214+)
        ("Edit(src/**)", f"{CWD}/src/app.ts", True),
        ("Edit(src/**)", f"{CWD}/src/deep/er/app.ts", True),
        ("Edit(src/**)", f"{CWD}/vendor/pkg/src/lib.js", False),
        ("Edit(src/**)", "/elsewhere/src/app.ts", False),
        ("Edit(**/src/**)", f"{CWD}/vendor/pkg/src/lib.js", True),
        ("Edit(**/src/**)", f"{CWD}/src/app.ts", True),
        ("Edit(**/src/**)", "/elsewhere/src/app.ts", False),  # only under the anchor
        ("Edit(/src/**)", f"{CWD}/src/app.ts", True),
        ("Edit(/src/**)", f"{CWD}/vendor/src/app.ts", False),
        ("Edit(src/components/**)", f"{CWD}/src/components/a/b.tsx", True),
        ("Edit(src/components/**)", f"{CWD}/x/src/components/b.tsx", False),
        # '*' stays within a segment, '?' is one character
        ("Edit(src/*.ts)", f"{CWD}/src/app.ts", True),
        ("Edit(src/*.ts)", f"{CWD}/src/sub/app.ts", False),
        ("Edit(src/?.ts)", f"{CWD}/src/a.ts", True),
        ("Edit(src/?.ts)", f"{CWD}/src/ab.ts", False),
        ("Edit(src/**/*.ts)", f"{CWD}/src/a/b/c.ts", True),
        ("Edit(src/**/*.ts)", f"{CWD}/src/c.ts", True),
        ("Edit(src/[ab].ts)", f"{CWD}/src/b.ts", True),
        ("Edit(src/[!ab].ts)", f"{CWD}/src/b.ts", False),
        # no slash: gitignore semantics, any depth under the cwd
        ("Edit(*.ts)", f"{CWD}/a/b/c.ts", True),
        ("Edit(*.ts)", f"{CWD}/c.ts", True),
        ("Edit(*.ts)", "/other/c.ts", False),
        ("Edit(*.ts)", f"{CWD}/c.tsx", False),
        # a directory pattern covers what is inside
        ("Edit(build)", f"{CWD}/build/out.js", True),
        ("Edit(build/)", f"{CWD}/x/build/out.js", True),
        ("Edit(build/)", f"{CWD}/build", False),
        # '//' is absolute
        ("Edit(//tmp/scratch.txt)", "/tmp/scratch.txt", True),
        ("Edit(//tmp/scratch.txt)", f"{CWD}/tmp/scratch.txt", False),
        ("Edit(//etc/**)", "/etc/passwd", True),
        ("Edit(//**/.env)", "/any/where/.env", True),
        # paths are normalised before matching
        ("Edit(src/**)", f"{CWD}/lib/../src/a.ts", True),
        ("Edit(src/**)", f"{CWD}/src/../lib/a.ts", False),
        ("Edit(src/**)", "src/a.ts", True),  # relative input path: joined with the cwd
    ],
)
def test_edit_paths(rule: str, path: str, expected: bool) -> None:
    assert _file(rule, path) is expected


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        ("Read(./.env)", f"{CWD}/.env", True),
        ("Read(./.env)", f"{CWD}/sub/.env", False),
        ("Read(./.env)", f"{CWD}/.env.sample", False),
        ("Read(.env)", f"{CWD}/.env", True),
        ("Read(.env)", f"{CWD}/sub/.env", True),  # bare filename: any depth (gitignore)
        ("Read(.env)", "/other/.env", False),
        ("Read(**/.env)", f"{CWD}/a/b/.env", True),
        ("Read(*.pem)", f"{CWD}/keys/server.pem", True),
        ("Read(*.pem)", "/etc/ssl/server.pem", False),
        ("Read(.env*)", f"{CWD}/.env.local", True),
    ],
)
def test_read_paths(rule: str, path: str, expected: bool) -> None:
    assert _file(rule, path, tool="Read") is expected


def test_home_paths_are_below_the_agents_home_not_the_dispatchers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/alice")  # the dispatcher's: never what ~ stands for
    mine = {"tool": "Read", "kind": "allow", "home": "/srv/agent"}
    assert _file("Read(~/.ssh/**)", "/srv/agent/.ssh/id_rsa", **mine)
    assert not _file("Read(~/.ssh/**)", "/home/alice/.ssh/id_rsa", **mine)
    assert not _file("Read(~/.ssh/**)", f"{CWD}/.ssh/id_rsa", **mine)
    assert _file("Read(~/.zshrc)", "/srv/agent/.zshrc", **mine)
    assert _file("Read(~/Documents/*.pdf)", "/srv/agent/Documents/a.pdf", **mine)
    assert not _file("Read(~/Documents/*.pdf)", "/srv/agent/Documents/x/a.pdf", **mine)
    assert _file("Read(~)", "/srv/agent/anything", **mine)
    assert _file("Read(~/.ssh/**)", "~/.ssh/id_rsa", **mine)  # a path the agent sent with ~
    assert not _file("Read(~/.ssh/**)", "/srv/agent/.ssh/id_rsa", tool="Read", kind="allow")  # home unknown


@pytest.mark.parametrize(
    "path",
    [
        "/home/dev/.ssh/id_rsa",
        "/root/.ssh/id_rsa",
        "/Users/dev/.ssh/id_rsa",
        "C:\\Users\\dev\\.ssh\\id_rsa",
        "~/.ssh/k",
    ],
)
@pytest.mark.parametrize("home", [None, "/srv/agent"])
def test_a_deny_rules_home_holds_under_every_home(path: str, home: str | None) -> None:
    # The home unknown, or another one: a deny or ask rule's ~/ still covers every conventional home.
    for kind in ("deny", "ask", "if"):  # an if decides whether a (denying) handler runs
        assert _file("Read(~/.ssh/**)", path, tool="Read", kind=kind, home=home)
    assert _file("Read(~/.ssh/**)", "/srv/agent/.ssh/x", tool="Read", kind="deny", home="/srv/agent")
    assert not _file("Read(~/.ssh/**)", "/srv/other/.ssh/x", tool="Read", kind="deny", home=home)
    assert not _file("Read(~/.ssh/**)", "/home/dev/project/.ssh/x", tool="Read", kind="deny", home=home)


@pytest.mark.parametrize(
    ("transcript", "home"),
    [
        ("/home/dev/.claude/projects/-work-repo/1b2c.jsonl", "/home/dev"),
        ("/Users/ana/.codex/sessions/2026/12/06/rollout.jsonl", "/Users/ana"),
        ("/var/lib/ci/.gemini/tmp/abc/chats/session.json", "/var/lib/ci"),
        ("C:\\Users\\dev\\.copilot\\session-state\\x.jsonl", "/c/Users/dev"),
        ("/tmp/codex-home/sessions/rollout.jsonl", None),  # no agent folder: unknown
        (None, None),
        ("/.claude/x", None),
    ],
)
def test_the_agents_home_is_where_its_transcripts_are(transcript: str | None, home: str | None) -> None:
    assert agent_home({"transcript_path": transcript}) == home


def test_any_directory_is_root_anchored() -> None:
    # Read(**/id_rsa) covers the project; Read(//**/id_rsa) any directory at all.
    assert not _file("Read(**/id_rsa)", "/home/dev/.ssh/id_rsa", tool="Read", kind="deny")
    for path in ("/home/dev/.ssh/id_rsa", f"{CWD}/keys/id_rsa", "/id_rsa", "keys/id_rsa", "~/.ssh/id_rsa"):
        assert _file("Read(//**/id_rsa)", path, tool="Read", kind="deny")
    assert not _file("Read(//**/id_rsa)", "/home/dev/.ssh/id_rsa.pub", tool="Read", kind="deny")


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("Edit", True), ("Write", True), ("MultiEdit", True), ("NotebookEdit", True), ("Read", False)],
)
def test_edit_rules_cover_every_editing_tool(tool: str, expected: bool) -> None:
    assert _file("Edit(docs/**)", f"{CWD}/docs/a.md", tool=tool) is expected


@pytest.mark.parametrize(
    ("rule", "tool", "tool_input", "expected"),
    [
        ("Read(src/**)", "Grep", {"pattern": "x", "path": f"{CWD}/src/lib"}, True),
        ("Read(src/**)", "Glob", {"pattern": "*.ts", "path": f"{CWD}/lib"}, False),
        ("Read(secrets/**)", "Grep", {"pattern": "x"}, False),  # no path: searches the cwd
        ("Read(//work/**)", "Grep", {"pattern": "x"}, True),
        ("Read(src/**)", "Read", {}, False),  # no file_path: nothing to match
        ("Write(docs/**)", "Write", {"file_path": f"{CWD}/docs/a.md"}, True),
        ("Write(docs/**)", "Edit", {"file_path": f"{CWD}/docs/a.md"}, False),
    ],
)
def test_file_tool_inputs(rule: str, tool: str, tool_input: dict[str, Any], expected: bool) -> None:
    assert rule_matches(parse_rule(rule), tool, tool_input, CWD) is expected


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        ("Edit(src/**)", "/any/where/src/a.ts", True),  # suffix match when the cwd is unknown
        ("Edit(src/**)", "/any/where/lib/a.ts", False),
        ("Read(.env)", "/x/.env", True),
        ("Read(//etc/passwd)", "/etc/passwd", True),
        ("Read(//etc/passwd)", "/x/etc/passwd", False),
    ],
)
def test_paths_without_cwd(rule: str, path: str, expected: bool) -> None:
    assert _file(rule, path, tool="Read" if rule.startswith("Read") else "Edit", cwd=None) is expected


def test_deny_rule_reading() -> None:
    # deny/ask: a one-directory pattern matches that directory at any depth
    assert not _file("Read(secrets/**)", f"{CWD}/a/secrets/k", tool="Read")
    assert _file("Read(secrets/**)", f"{CWD}/a/secrets/k", tool="Read", kind="deny")
    assert not _file("Read(a/secrets/**)", f"{CWD}/x/a/secrets/k", tool="Read", kind="deny")
    # deny: Read path rules also cover Edit and Write on the same path, not NotebookEdit
    assert not _file("Read(.env)", f"{CWD}/.env", tool="Write")
    assert _file("Read(.env)", f"{CWD}/.env", tool="Write", kind="deny")
    assert not _file("Read(.env)", f"{CWD}/.env", tool="NotebookEdit", kind="deny")


def test_windows_paths() -> None:
    rule = parse_rule("Edit(src/**)")
    assert rule_matches(rule, "Edit", {"file_path": "C:\\proj\\src\\a.ts"}, "C:\\proj")
    assert not rule_matches(rule, "Edit", {"file_path": "C:\\proj\\lib\\a.ts"}, "C:\\proj")
    assert rule_matches(parse_rule("Read(//c/**/.env)"), "Read", {"file_path": "C:\\x\\.env"}, None)


# --- WebFetch, Agent, Skill, WebSearch, parameters, MCP --------------------------------


@pytest.mark.parametrize(
    ("rule", "url", "expected"),
    [
        ("WebFetch(domain:example.com)", "https://example.com/x", True),
        ("WebFetch(domain:example.com)", "https://api.example.com/x", True),  # subdomain
        ("WebFetch(domain:example.com)", "https://a.b.example.com", True),
        ("WebFetch(domain:example.com)", "https://badexample.com/", False),
        ("WebFetch(domain:example.com)", "https://example.com.evil.io/", False),
        ("WebFetch(domain:example.com)", "https://EXAMPLE.com./x", True),  # case, trailing dot
        ("WebFetch(domain:example.com)", "http://user:pw@example.com:8080/x", True),
        ("WebFetch(domain:example.com)", "example.com/path", True),  # no scheme
        ("WebFetch(domain:*.example.com)", "https://api.example.com", True),
        ("WebFetch(domain:*.example.com)", "https://example.com", False),
        ("WebFetch(domain:example.*)", "https://example.org", True),
        ("WebFetch(domain:example.*)", "https://example.evil.com", False),
        ("WebFetch(domain:*)", "https://anything.io", True),
        ("WebFetch(domain:example.com)", "not a url at all", False),
        ("WebFetch(domain:example.com)", "http://[::1", False),  # invalid URL
        ("WebFetch(https://docs.python.org/*)", "https://docs.python.org/3/", True),
        ("WebFetch(https://docs.python.org/*)", "https://evil.io/docs.python.org/", False),
        ("WebFetch", "https://anything.io", True),
    ],
)
def test_webfetch(rule: str, url: str, expected: bool) -> None:
    assert rule_matches(parse_rule(rule), "WebFetch", {"url": url}) is expected


def test_webfetch_without_url() -> None:
    assert not rule_matches(parse_rule("WebFetch(domain:example.com)"), "WebFetch", {})


@pytest.mark.parametrize(
    ("rule", "tool", "tool_input", "expected"),
    [
        ("Agent(Explore)", "Agent", {"subagent_type": "Explore"}, True),
        ("Agent(Explore)", "Agent", {"subagent_type": "Plan"}, False),
        ("Agent(my-plugin:*)", "Agent", {"subagent_type": "my-plugin:reviewer"}, True),
        ("Task(Explore)", "Agent", {"subagent_type": "Explore"}, True),
        ("Agent(Explore)", "Agent", {}, False),
        ("Skill(pdf)", "Skill", {"skill": "pdf"}, True),
        ("Skill(plugin:*)", "Skill", {"skill": "plugin:tool"}, True),
        ("Skill(pdf)", "Skill", {"name": "pdf"}, True),
        ("Skill(pdf)", "Skill", {"skill": "docx"}, False),
        ("WebSearch(*password*)", "WebSearch", {"query": "leaked password list"}, True),
        ("WebSearch(*password*)", "WebSearch", {"query": "weather"}, False),
        ("AskUserQuestion(x)", "AskUserQuestion", {"questions": []}, False),  # no content field
        # Tool(param:value)
        ("Agent(model:opus)", "Agent", {"model": "opus", "subagent_type": "Plan"}, True),
        ("Agent(model:opus)", "Agent", {"model": "sonnet"}, False),
        ("Agent(model:*)", "Agent", {}, False),  # an omitted parameter never matches
        ("Agent(isolation:*)", "Agent", {"isolation": "worktree"}, True),
        ("Agent(model : opus)", "Agent", {"model": "opus"}, True),
        ("Bash(run_in_background:true)", "Bash", {"command": "x", "run_in_background": True}, True),
        ("Bash(run_in_background:true)", "Bash", {"command": "x", "run_in_background": False}, False),
        ("Bash(timeout:600000)", "Bash", {"command": "x", "timeout": 600000}, True),
        ("Bash(git:*)", "Bash", {"command": "git status"}, True),  # not a parameter: legacy prefix
        ("Read(limit:*)", "Read", {"file_path": "/a", "limit": 10}, True),
        ("Edit(replace_all:true)", "Edit", {"file_path": "/a", "replace_all": True}, True),
        ("Agent(model:opus)", "Agent", {"model": {"tier": "opus"}}, False),  # not a scalar
        # MCP tools: only parameter rules can match content
        ("mcp__db__query(table:users)", "mcp__db__query", {"table": "users"}, True),
        ("mcp__db__query(table:users)", "mcp__db__query", {"table": "orders"}, False),
        ("mcp__db__query(users)", "mcp__db__query", {"table": "users"}, False),
    ],
)
def test_other_tools(rule: str, tool: str, tool_input: dict[str, Any], expected: bool) -> None:
    assert rule_matches(parse_rule(rule), tool, tool_input, CWD) is expected


# --- rule kinds: allow lists need every subcommand --------------------------------------


@pytest.mark.parametrize(
    ("rule", "command", "if_result", "allow_result"),
    [
        ("Bash(git status *)", "git status", True, True),
        ("Bash(git status *)", "git status && rm -rf ~", True, False),
        ("Bash(git *)", "git add . && git commit -m x", True, True),
        ("Bash(echo *)", "echo $(rm -rf ~)", True, False),  # the inner command must match too
        ("Bash(echo *)", "echo $(echo hi)", True, True),
        ("Bash(git push *)", "echo 'unbalanced", True, False),  # unparsable: never allowed
        ("Bash(git push *)", "git $SUB", True, False),  # dynamic: never allowed
        ("Bash(npm test *)", "NODE_ENV=test npm test", True, True),  # safe variable
        ("Bash(git status)", "LD_PRELOAD=/tmp/x.so git status", True, False),  # unsafe variable
        ("Bash(ls *)", "", False, False),
        ("Bash(ls *)", "FOO=1", False, False),
        ("Bash(*)", "anything; at all", True, True),
    ],
)
def test_allow_kind(rule: str, command: str, if_result: bool, allow_result: bool) -> None:
    parsed = parse_rule(rule)
    assert rule_matches(parsed, "Bash", {"command": command}, CWD) is if_result
    assert rule_matches(parsed, "Bash", {"command": command}, CWD, kind="allow") is allow_result
    assert rule_matches(parsed, "Bash", {"command": command}, CWD, kind="deny") is if_result


def test_allow_kind_can_opt_into_failing_open() -> None:
    rule = parse_rule("Bash(git push *)")
    assert rule_matches(rule, "Bash", {"command": "echo 'x"}, CWD, kind="allow", fail_open=True)
    assert not rule_matches(rule, "Bash", {"command": "echo 'x"}, CWD, kind="deny", fail_open=False)


def test_ask_reads_paths_like_deny() -> None:
    assert _file("Read(secrets/**)", f"{CWD}/a/secrets/k", tool="Read", kind="ask")
    assert not _file("Read(secrets/**)", f"{CWD}/a/secrets/k", tool="Read", kind="allow")


def test_split_bash_is_exported() -> None:
    assert split_bash("FOO=1 a && b | c; d $(e)") == ["a", "b", "c", "d $(e)", "e"]
    assert split_bash("echo 'x") is None
