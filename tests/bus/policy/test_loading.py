"""Policy loading, validation (with line numbers), layering and the Claude Code settings key list."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.errors import PolicyError, PolicyProblem
from bus.hooks import claude_settings
from bus.policy.loading import empty_policy, load_policy, parse_policy_text, policy_from_text
from bus.policy.schema import CommandHandler, HttpHandler, RuleHandler

HERE = Path(__file__).parents[1] / "policies"
SCHEMA = Path(__file__).resolve().parents[2] / "data" / "claude-code-settings.schema.json"


def problems_of(text: str, source: str = "policy.yaml") -> list[PolicyProblem]:
    """The problems of one inline file (dedented), asserting there is at least one."""
    found = parse_policy_text(textwrap.dedent(text).lstrip("\n"), source).problems
    assert found, "expected the policy to be rejected"
    return found


def only_problem(text: str, source: str = "policy.yaml") -> PolicyProblem:
    found = problems_of(text, source)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def inline(text: str, source: str = "policy.yaml") -> Any:
    return policy_from_text(textwrap.dedent(text).lstrip("\n"), source)


def schema_validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    return jsonschema.validators.validator_for(schema)(schema)


# --- a whole Claude Code settings file ------------------------------------------------------


def test_full_claude_settings_file_loads_unchanged_with_notes() -> None:
    policy = load_policy([HERE / "claude_settings.json"])
    assert {e: len(policy.entries(e)) for e in policy.events()} == {
        "PreToolUse": 3,
        "PostToolUse": 1,
        "UserPromptSubmit": 1,
        "SessionStart": 1,
        "Stop": 1,
        "Notification": 1,
    }
    ignored = [re.sub(r"^.*: ignored Claude Code settings key ", "", n) for n in policy.notes if "ignored" in n]
    assert ignored == [
        "'model'",
        "'permissions'",
        "'env'",
        "'statusLine'",
        "'enabledPlugins'",
        "'cleanupPeriodDays'",
        "'includeCoAuthoredBy'",
    ]
    assert f"{HERE / 'claude_settings.json'}:4: ignored Claude Code settings key 'permissions'" in policy.notes
    assert policy.allowed_http_hook_urls == ("https://hooks.example.com/*",)
    assert policy.http_hook_allowed_env_vars == ("HOOK_TOKEN",)
    assert policy.disable_all_hooks is False
    bash, http, protect = policy.entries("PreToolUse")
    assert isinstance(bash.handler, CommandHandler) and bash.handler.if_ == "Bash(rm *)"
    assert bash.handler.timeout == 30 and (bash.matcher, bash.group_index, bash.handler_index) == (
        "Bash",
        0,
        0,
    )
    assert isinstance(http.handler, HttpHandler) and http.handler.timeout == 15.0  # JSON 1.5e1 is a number
    assert http.handler.headers == {"Authorization": "Bearer $HOOK_TOKEN"}
    assert (protect.matcher, protect.group_index, protect.handler_index) == ("Edit|Write|MultiEdit", 1, 0)
    assert policy.entries("PostToolUse")[0].handler.async_ is True
    assert policy.entries("Stop")[0].handler.type == "agent"
    assert policy.entries("SessionStart")[0].handler.status_message == "Loading context"
    assert policy.entries("PreCompact") == () and policy.entries("NoSuchEvent") == ()


def test_settings_fixture_is_valid_for_the_schemastore_schema() -> None:
    validator = schema_validator()
    data = json.loads((HERE / "claude_settings.json").read_text())
    assert [e.message for e in validator.iter_errors(data)] == []


def test_every_claude_code_settings_key_is_accepted() -> None:
    others = sorted(claude_settings.SETTINGS_KEYS - claude_settings.HOOK_KEYS)
    policy = policy_from_text(json.dumps({key: None for key in others}), "all.json")
    assert len(policy.notes) == len(others) > 100
    assert all("ignored Claude Code settings key" in note for note in policy.notes)


def test_yaml_and_json_equivalents_give_the_same_entries() -> None:
    as_json = load_policy([HERE / "claude_settings.json"])
    as_yaml = load_policy([HERE / "claude_settings.yaml"])

    def shape(policy: Any) -> list[tuple[Any, ...]]:
        return [
            (e.event, e.group_index, e.handler_index, e.matcher, e.handler, e.handler_id)
            for event in sorted(policy.events())
            for e in policy.entries(event)
        ]

    assert shape(as_json) == shape(as_yaml) and len(shape(as_json)) == 8
    assert as_json.allowed_http_hook_urls == as_yaml.allowed_http_hook_urls
    assert as_json.settings == as_yaml.settings
    assert as_json.revision != as_yaml.revision  # a hash of the bytes, not of the meaning


def test_revision_is_a_stable_hash_of_the_contents(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("hooks: {}\n")
    first = load_policy([path]).revision
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    assert load_policy([path]).revision == first
    path.write_text("hooks: {}\nhookbus: {stopBlockLimit: 3}\n")
    assert load_policy([path]).revision != first
    assert load_policy([path, path]).revision != load_policy([path]).revision


# --- problems, each with its line -----------------------------------------------------------


def test_every_problem_of_a_file_is_reported_with_its_line() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy([HERE / "many_errors.yaml"])
    got = [(p.line, p.path, p.message) for p in caught.value.problems]
    assert [(line, path) for line, path, _ in got] == [
        (8, "hooks.PreToolUse[0].hooks[0].timeout"),
        (10, "hooks.PreToolUse[0].hooks[1].command"),
        (11, "hooks.PreToolUse[0].hooks[1]"),
        (14, "hooks.PreToolUse[0].hooks[2].shell"),
        (15, "hooks.PreToolUse[0].hooks[3]"),
        (17, "hooks.PreToolUse[0].hooks[4]"),
        (18, "hooks.PreToolUse[0].hooks[5]"),
        (19, "hooks.PreToolUse[1].matcher"),
        (23, "hooks.PreToolUse[1].hooks[0].timeout"),
        (26, "hooks.SessionStart[0].hooks[0].type"),
        (28, "hooks.PreTooluse"),
        (31, "hookbus.deadlines.PostTooluse"),
        (32, "hookbus.http.allowedNetworks[1]"),
        (33, "hookbus.llm.baseUrl"),
        (34, "hookbus"),
    ]
    messages = [message for _, _, message in got]
    assert messages[0] == "must be > 0"
    assert messages[1] == "must not be empty"
    assert messages[2] == "unknown field 'bogus'"
    assert messages[3] == "must be 'bash' or 'powershell' (got string 'zsh')"
    assert messages[4] == "unknown handler type 'foo' (expected command, http, prompt, agent, mcp_tool, rule, function)"
    assert messages[5].startswith("missing required field 'type'")
    assert messages[6] == "missing required field 'url'"
    assert "'Bash('" in messages[7]
    assert messages[9].startswith("handler type 'prompt' not allowed on SessionStart")
    assert messages[10] == "unknown event 'PreTooluse' (did you mean 'PreToolUse'?)"
    assert messages[11] == "unknown event 'PostTooluse' (did you mean 'PostToolUse'?)"
    assert messages[12] == "not a network in CIDR notation: 'not-a-network'"
    assert messages[13] == "must be an http(s) URL (got 'ftp://llm.internal')"
    assert messages[14] == "unknown key 'bogusKey'"
    assert str(caught.value).splitlines()[0] == (
        f"{HERE / 'many_errors.yaml'}:8: hooks.PreToolUse[0].hooks[0].timeout: must be > 0"
    )


def test_problem_renders_file_line_bracketed_path_and_message() -> None:
    problem = only_problem("""
        hooks:
          PreToolUse:
            - matcher: Bash
              hooks:
                - {type: command, command: ./a.sh}
                - type: command
                  command: ./b.sh
                  timeout: -1
    """)
    assert str(problem) == "policy.yaml:8: hooks.PreToolUse[0].hooks[1].timeout: must be > 0"


@pytest.mark.parametrize(
    ("handler", "path", "message"),
    [
        ('{"type": "command", "command": "x", "bogus": 1}', "", "unknown field 'bogus'"),
        ('{"type": "command", "command": "x", "status_message": "s"}', "", "unknown field 'status_message'"),
        (
            '{"type": "command", "command": "x", "timeout": "5"}',
            ".timeout",
            "must be a number (got string '5')",
        ),
        ('{"type": "command", "command": "x", "timeout": 0}', ".timeout", "must be > 0"),
        ('{"type": "command", "command": "x", "timeout": -2.5}', ".timeout", "must be > 0"),
        (
            '{"type": "command", "command": "x", "async": "yes"}',
            ".async",
            "must be true or false (got string 'yes')",
        ),
        (
            '{"type": "command", "command": "x", "shell": "zsh"}',
            ".shell",
            "must be 'bash' or 'powershell' (got string 'zsh')",
        ),
        ('{"type": "command", "command": ""}', ".command", "must not be empty"),
        ('{"type": "command", "command": "x", "args": "a b"}', ".args", "must be a list (got string 'a b')"),
        ('{"type": "command"}', "", "missing required field 'command'"),
        (
            '{"type": "http", "url": "https://h", "headers": {"A": 1}}',
            ".headers.A",
            "must be a string (got integer 1)",
        ),
        (
            '{"type": "http", "url": "https://h", "allowedEnvVars": [""]}',
            ".allowedEnvVars[0]",
            "must not be empty",
        ),
        ('{"type": "prompt"}', "", "missing required field 'prompt'"),
        ('{"type": "mcp_tool", "server": "s"}', "", "missing required field 'tool'"),
        (
            '{"type": "command", "command": "x", "failMode": "maybe"}',
            ".failMode",
            "must be 'open' or 'closed' (got string 'maybe')",
        ),
        (
            '{"type": "function", "function": "not a callable"}',
            ".function",
            "must name a Python callable as 'module:attr' (got 'not a callable')",
        ),
        (
            '{"type": "foo"}',
            "",
            "unknown handler type 'foo' (expected command, http, prompt, agent, mcp_tool, rule, function)",
        ),
        (
            '{"command": "x"}',
            "",
            "missing required field 'type' (one of command, http, prompt, agent, mcp_tool, rule, function)",
        ),
    ],
)
def test_bad_handler_is_reported_on_its_line(handler: str, path: str, message: str) -> None:
    text = "\n".join(
        [
            "{",
            '  "hooks": {',
            '    "PreToolUse": [',
            "      {",
            '        "hooks": [',
            '          {"type": "command", "command": "ok"},',
            f"          {handler}",  # line 7
            "        ]",
            "      }",
            "    ]",
            "  }",
            "}",
        ]
    )
    problem = only_problem(text, "settings.json")
    assert (problem.line, problem.path, problem.message) == (
        7,
        f"hooks.PreToolUse[0].hooks[1]{path}",
        message,
    )


@pytest.mark.parametrize(
    "handler",
    [
        {"type": "command", "command": "x", "bogus": 1},
        {"type": "command", "command": "x", "timeout": 0},
        {"type": "command", "command": "x", "shell": "zsh"},
        {"type": "command", "command": ""},
        {"type": "command"},
        {"type": "http", "url": "https://h", "headers": {"A": 1}},
        {"type": "prompt", "prompt": "p", "timeout": "5"},
        {"type": "prompt", "prompt": ""},
        {"type": "mcp_tool", "server": "s", "tool": "t", "input": []},
        {"type": "http", "url": ""},
        {"type": "agent", "prompt": "p", "model": 3},
        {"type": "command", "command": "x", "args": ["a", 1]},
    ],
)
def test_at_least_as_strict_as_the_schemastore_schema(handler: dict[str, Any]) -> None:
    settings = {"hooks": {"PreToolUse": [{"hooks": [handler]}]}}
    assert parse_policy_text(json.dumps(settings), "s.json").problems
    assert list(schema_validator().iter_errors(settings)), "the schema accepts it: the case is wrong"


@pytest.mark.parametrize(
    ("text", "line", "path", "message"),
    [
        ("hooks: [1]\n", 1, "hooks", "must be a mapping of events to matcher groups (got list)"),
        ("hooks:\n  Stop: {hooks: []}\n", 2, "hooks.Stop", "must be a list of matcher groups (got mapping)"),
        ("hooks:\n  Stop:\n    - {matcher: x}\n", 3, "hooks.Stop[0]", "missing required field 'hooks'"),
        (
            "hooks:\n  Stop:\n    - hooks: []\n      unless: always\n",
            4,
            "hooks.Stop[0]",
            "unknown field 'unless'",
        ),
        ("hooks:\n  Stop:\n    - hooks: x\n", 3, "hooks.Stop[0].hooks", "must be a list (got string 'x')"),
        (
            "hooks:\n  Stop:\n    - matcher: 5\n      hooks: []\n",
            3,
            "hooks.Stop[0].matcher",
            "must be a string (got integer 5)",
        ),
        ("- 1\n", 1, "", "the top level must be a mapping (got list)"),
        ("hookbus: 3\n", 1, "hookbus", "must be a mapping (got integer 3)"),
        ("hook: {}\n", 1, "", "unknown key 'hook' (did you mean 'hooks'?)"),
        ("# a\n# b\nhookbus:\n  deadline_seconds: 3\n", 4, "hookbus", "unknown key 'deadline_seconds'"),
        ("hookbus:\n  http:\n    proxy: x\n", 3, "hookbus.http", "unknown key 'proxy'"),
        ("hookbus:\n  stopBlockLimit: -1\n", 2, "hookbus.stopBlockLimit", "must be >= 0"),
        ("hookbus:\n  deadlineSeconds: 0\n", 2, "hookbus.deadlineSeconds", "must be > 0"),
        (
            "hookbus:\n  deadlines:\n    Stop: 1\n    pretooluse: 1\n",
            4,
            "hookbus.deadlines.pretooluse",
            "unknown event 'pretooluse' (did you mean 'PreToolUse'?)",
        ),
        ("hookbus:\n  deadlines:\n    Deploy: 1\n", 3, "hookbus.deadlines.Deploy", "unknown event 'Deploy'"),
        (
            "hookbus:\n  http:\n    allowedNetworks:\n      - 10.0.0.0/8\n      - 300.1.1.1/8\n",
            5,
            "hookbus.http.allowedNetworks[1]",
            "not a network in CIDR notation: '300.1.1.1/8'",
        ),
        (
            "hookbus:\n  llm:\n    baseUrl: api.anthropic.com\n",
            3,
            "hookbus.llm.baseUrl",
            "must be an http(s) URL (got 'api.anthropic.com')",
        ),
        ("disableAllHooks: 'true'\n", 1, "disableAllHooks", "must be true or false (got string 'true')"),
        ("allowedHttpHookUrls:\n  - https://a/*\n  - ''\n", 3, "allowedHttpHookUrls[1]", "must not be empty"),
        (
            "httpHookAllowedEnvVars: TOKEN\n",
            1,
            "httpHookAllowedEnvVars",
            "must be a list (got string 'TOKEN')",
        ),
        ("$schema: 5\n", 1, "$schema", "must be a string (got integer 5)"),
    ],
)
def test_structural_problems_have_line_path_and_message(text: str, line: int, path: str, message: str) -> None:
    problem = only_problem(text)
    assert (problem.line, problem.path, problem.message) == (line, path, message)


def test_matcher_and_permission_rules_are_checked() -> None:
    found = problems_of("""
        hooks:
          PreToolUse:
            - matcher: "mcp__(memory"
              hooks:
                - type: command
                  command: ./a.sh
                  if: "Bash(git *"
                - type: rule
                  deny: ["Bash(rm -rf *)", "Bash(curl *"]
                  allow: ["Read"]
    """)
    assert [(p.line, p.path) for p in found] == [
        (3, "hooks.PreToolUse[0].matcher"),
        (7, "hooks.PreToolUse[0].hooks[0].if"),
        (9, "hooks.PreToolUse[0].hooks[1].deny[1]"),
    ]
    assert "'mcp__(memory'" in found[0].message
    assert "'Bash(git *'" in found[1].message and "'Bash(curl *'" in found[2].message


def test_function_handler_is_not_imported_at_load_time() -> None:
    policy = inline("""
        hooks:
          PreToolUse:
            - hooks: [{type: function, function: "no_such_module_xyz.sub:check"}]
    """)
    assert policy.entries("PreToolUse")[0].handler.function == "no_such_module_xyz.sub:check"


def test_syntax_errors_carry_their_line() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy([HERE / "syntax_error.json", HERE / "syntax_error.yaml"])
    json_problem, yaml_problem = caught.value.problems
    assert (json_problem.line, json_problem.file) == (4, str(HERE / "syntax_error.json"))
    assert json_problem.message.startswith("invalid JSON: Expecting property name")
    assert (yaml_problem.line, yaml_problem.file) == (6, str(HERE / "syntax_error.yaml"))
    assert yaml_problem.message.startswith("invalid YAML:")


def test_problems_of_several_files_are_raised_together(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.json"
    first.write_text("hooks:\n  Stop:\n    - hooks: [{type: command, command: ''}]\n")
    second.write_text('{\n  "hoks": 1,\n  "hookbus": {"stopBlockLimit": -3}\n}\n')
    with pytest.raises(PolicyError) as caught:
        load_policy([first, tmp_path / "missing.yaml", second])
    got = [(Path(p.file).name, p.line, p.path) for p in caught.value.problems]
    assert got == [
        ("a.yaml", 3, "hooks.Stop[0].hooks[0].command"),
        ("missing.yaml", None, ""),
        ("b.json", 2, ""),
        ("b.json", 3, "hookbus.stopBlockLimit"),
    ]
    assert caught.value.problems[1].message.startswith("cannot read:")


def test_json_with_tab_indentation_keeps_line_numbers() -> None:
    handler = '{"type": "command", "command": "x", "timeout": 0}'
    text = f'{{\n\t"hooks": {{\n\t\t"Stop": [\n\t\t\t{{"hooks": [{handler}]}}\n\t\t]\n\t}}\n}}\n'
    problem = only_problem(text, "tabs.json")
    assert (problem.line, problem.path) == (4, "hooks.Stop[0].hooks[0].timeout")


@pytest.mark.parametrize(
    "text",
    [
        '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}}',
        "hooks:\n  Stop:\n    - hooks: [{type: command, command: x}]\n",
    ],
)
def test_unknown_extension_tries_json_then_yaml(text: str) -> None:
    policy = policy_from_text(text, "policy.conf")
    assert [e.handler.type for e in policy.entries("Stop")] == ["command"]


def test_empty_yaml_file_is_an_empty_policy_with_a_note() -> None:
    policy = policy_from_text("# nothing yet\n", "empty.yaml")
    assert policy.events() == frozenset() and policy.notes == ("empty.yaml: empty policy file",)


# --- events and handler types -------------------------------------------------------------------


def test_unknown_event_is_accepted_with_a_note() -> None:
    policy = inline("""
        hooks:
          DeployFinished:
            - hooks: [{type: command, command: ./notify.sh}]
    """)
    assert [e.event for e in policy.entries("DeployFinished")] == ["DeployFinished"]
    assert policy.notes == (
        "policy.yaml:2: unknown event 'DeployFinished' accepted as non-blocking (Claude Code never fires it)",
    )


@pytest.mark.parametrize(
    ("typo", "known"),
    [
        ("pretooluse", "PreToolUse"),
        ("PRETOOLUSE", "PreToolUse"),
        ("PreToolUses", "PreToolUse"),
        ("SessionStarted", "SessionStart"),
        ("Posttooluse", "PostToolUse"),
        ("UserPromptSubmitt", "UserPromptSubmit"),
    ],
)
def test_likely_typo_of_a_known_event_is_an_error(typo: str, known: str) -> None:
    problem = only_problem(f"# fleet policy\nhooks:\n  {typo}:\n    - hooks: [{{type: command, command: x}}]\n")
    assert (problem.line, problem.path) == (3, f"hooks.{typo}")
    assert problem.message == f"unknown event {typo!r} (did you mean {known!r}?)"


@pytest.mark.parametrize(
    ("event", "handler"),
    [
        ("SessionStart", "{type: prompt, prompt: p}"),
        ("SessionStart", "{type: agent, prompt: p}"),
        ("SessionStart", "{type: http, url: 'https://h'}"),
        ("Setup", "{type: http, url: 'https://h'}"),
        ("Setup", "{type: prompt, prompt: p}"),
        ("SubagentStart", "{type: prompt, prompt: p}"),
        ("PermissionRequest", "{type: agent, prompt: p}"),
        ("Notification", "{type: agent, prompt: p}"),
    ],
)
def test_handler_type_not_allowed_on_event_is_an_error(event: str, handler: str) -> None:
    problem = only_problem(f"hooks:\n  {event}:\n    - hooks:\n        - {handler}\n")
    kind = re.search(r"type: (\w+)", handler).group(1)  # type: ignore[union-attr]
    assert (problem.line, problem.path) == (4, f"hooks.{event}[0].hooks[0].type")
    assert problem.message.startswith(f"handler type {kind!r} not allowed on {event} (allowed: command")


@pytest.mark.parametrize(
    ("event", "handler"),
    [
        ("SessionStart", "{type: command, command: x}"),
        ("SessionStart", "{type: mcp_tool, server: s, tool: t}"),
        ("SessionStart", "{type: rule, deny: [Bash]}"),
        ("Setup", "{type: function, function: 'pkg.mod:fn'}"),
        ("PermissionRequest", "{type: prompt, prompt: p}"),
        ("PreToolUse", "{type: agent, prompt: p}"),
        ("Stop", "{type: http, url: 'https://h'}"),
        ("SomeFutureEvent", "{type: agent, prompt: p}"),
    ],
)
def test_handler_type_allowed_on_event_loads(event: str, handler: str) -> None:
    policy = policy_from_text(f"hooks:\n  {event}:\n    - hooks:\n        - {handler}\n")
    assert len(policy.entries(event)) == 1


def test_notes_for_if_and_matcher_that_can_never_apply() -> None:
    policy = inline("""
        hooks:
          UserPromptSubmit:
            - matcher: Bash
              hooks:
                - {type: command, command: x, if: "Bash(git *)"}
    """)
    assert policy.notes == (
        "policy.yaml:3: UserPromptSubmit has no matcher: matcher 'Bash' is ignored",
        "policy.yaml:5: 'if' is only evaluated on tool events: this never runs on UserPromptSubmit",
    )


# --- ids, order and layering ----------------------------------------------------------------


def test_handler_id_depends_on_event_matcher_and_handler_only() -> None:
    policy = inline("""
        hooks:
          PreToolUse:
            - matcher: Bash
              hooks:
                - {type: command, command: ./a.sh, timeout: 5}
                - {type: command, command: ./a.sh, timeout: 6}
            - matcher: Edit
              hooks:
                - {type: command, command: ./a.sh, timeout: 5}
          PostToolUse:
            - matcher: Bash
              hooks:
                - {type: command, command: ./a.sh, timeout: 5}
    """)
    entries = [*policy.entries("PreToolUse"), *policy.entries("PostToolUse")]
    assert len({e.handler_id for e in entries}) == 4
    assert all(re.fullmatch(r"[0-9a-f]{16}", e.handler_id) for e in entries)
    assert policy.entry(entries[2].handler_id) is entries[2] and policy.entry("0" * 16) is None
    same = policy_from_text(
        '{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", '
        '"command": "./a.sh", "timeout": 5.0, "async": false, "failMode": "open"}]}]}}',
        "x.json",
    )
    assert same.entries("PreToolUse")[0].handler_id == entries[0].handler_id


def test_identical_handlers_in_one_file_run_once() -> None:
    policy = inline("""
        hooks:
          Stop:
            - hooks: [{type: command, command: ./s.sh}, {type: command, command: ./t.sh}]
            - hooks: [{type: command, command: ./s.sh}]
    """)
    assert [(e.group_index, e.handler_index) for e in policy.entries("Stop")] == [(0, 0), (0, 1)]
    assert policy.notes == ("policy.yaml: hooks.Stop[1].hooks[0] duplicates a handler of policy.yaml: it runs once",)


def test_two_files_layer_hooks_append_and_hookbus_overrides() -> None:
    base, team = HERE / "layer_base.yaml", HERE / "layer_team.json"
    policy = load_policy([base, team])
    assert policy.sources == (str(base), str(team))
    pre = policy.entries("PreToolUse")
    assert [(Path(e.source).name, e.group_index, e.handler_index, e.matcher, e.handler.type) for e in pre] == [
        ("layer_base.yaml", 0, 0, "Bash", "rule"),
        ("layer_base.yaml", 0, 1, "Bash", "command"),  # team's identical ./audit.sh is deduplicated
        ("layer_team.json", 1, 0, "Edit|Write", "command"),
    ]
    assert isinstance(pre[0].handler, RuleHandler) and pre[0].handler.deny == ["Bash(rm -rf *)"]
    assert [Path(e.source).name for e in policy.entries("Stop")] == ["layer_team.json"]
    assert any("duplicates a handler of" in note for note in policy.notes)
    settings = policy.settings
    assert settings.deadline_seconds == 3.0 and settings.stop_block_limit == 4  # from base, not overridden
    assert settings.deadlines == {"PreToolUse": 1.5, "Stop": 5.0}  # deadlines merge key by key
    assert settings.deadline_for("Stop") == 5.0 and settings.deadline_for("PostToolUse") == 3.0
    assert settings.llm.base_url == "http://llm.team.test:8080"
    assert settings.llm.model == "claude-haiku-4-5"  # llm is replaced as a whole (shallow per key)
    assert policy.allowed_http_hook_urls == ("https://hooks.acme.test/*", "https://hooks.team.test/*")
    assert policy.http_hook_allowed_env_vars == ("TEAM_TOKEN",)
    assert policy.disable_all_hooks is False


def test_three_files_disable_all_hooks_last_wins() -> None:
    policy = load_policy([HERE / "layer_base.yaml", HERE / "layer_team.json", HERE / "layer_local.yaml"])
    assert policy.disable_all_hooks is True
    assert policy.entries("PreToolUse") == () and policy.entries("Stop") == () and policy.events() == frozenset()
    assert policy.settings.stop_block_limit == 2 and policy.settings.deadlines["Stop"] == 5.0
    assert "disableAllHooks is true: no handler runs" in policy.notes


def test_later_disable_all_hooks_false_turns_hooks_back_on(tmp_path: Path) -> None:
    enable = tmp_path / "project.yaml"
    enable.write_text("disableAllHooks: false\n")
    off = load_policy([HERE / "layer_base.yaml", HERE / "layer_local.yaml"])
    on = load_policy([HERE / "layer_base.yaml", HERE / "layer_local.yaml", enable])
    assert off.events() == frozenset() and len(on.entries("PreToolUse")) == 2
    assert (off.disable_all_hooks, on.disable_all_hooks) == (True, False)


def test_http_allow_lists_are_none_unless_some_file_defines_them(tmp_path: Path) -> None:
    none = tmp_path / "none.yaml"
    none.write_text("hooks: {}\n")
    block_all = tmp_path / "block.json"
    block_all.write_text('{"allowedHttpHookUrls": []}')
    assert load_policy([none]).allowed_http_hook_urls is None
    assert load_policy([none]).http_hook_allowed_env_vars is None
    assert load_policy([none, block_all]).allowed_http_hook_urls == ()  # defined and empty: blocks all
    assert load_policy([block_all, HERE / "layer_base.yaml"]).allowed_http_hook_urls == ("https://hooks.acme.test/*",)


def test_hookbus_section_defaults() -> None:
    for policy in (empty_policy(), inline("hooks: {}\n"), inline("hookbus: {}\n")):
        assert policy.settings.deadline_seconds == 2.0
        assert policy.settings.stop_block_limit == 8
        assert policy.settings.deadline_for("PreToolUse") == 2.0
        assert policy.settings.llm.base_url == "https://api.anthropic.com"
        assert policy.disable_all_hooks is False and policy.events() == frozenset()
    assert empty_policy().sources == () and re.fullmatch(r"[0-9a-f]{12}", empty_policy().revision)


def test_hookbus_section_values_are_read() -> None:
    policy = inline("""
        hookbus:
          deadlineSeconds: 1
          deadlines: {PreToolUse: 0.5}
          stopBlockLimit: 0
          http: {allowedNetworks: [10.0.0.0/8, "fd00::/8", 192.168.1.7]}
          llm: {baseUrl: "http://localhost:4000/v1", model: my-model}
    """)
    settings = policy.settings
    assert (settings.deadline_seconds, settings.stop_block_limit) == (1.0, 0)
    assert settings.deadline_for("PreToolUse") == 0.5 and settings.deadline_for("Stop") == 1.0
    assert settings.http.allowed_networks == ["10.0.0.0/8", "fd00::/8", "192.168.1.7"]
    assert (settings.llm.base_url, settings.llm.model) == ("http://localhost:4000/v1", "my-model")


# --- the committed list of Claude Code settings keys ------------------------------------------


def test_settings_keys_match_the_schema() -> None:
    assert json.loads(SCHEMA.read_text())["properties"].keys() == claude_settings.SETTINGS_KEYS
    module = Path(claude_settings.__file__).read_text(encoding="utf-8")
    assert claude_settings.render(SCHEMA) == module


def test_hook_keys_are_settings_keys() -> None:
    assert claude_settings.HOOK_KEYS <= claude_settings.SETTINGS_KEYS
    assert {"permissions", "env", "model", "statusLine", "hooks"} <= claude_settings.SETTINGS_KEYS
    assert "hookbus" not in claude_settings.SETTINGS_KEYS


# --- what fails at run time is caught at load time -------------------------------------------


def test_unknown_top_level_keys_are_notes_but_near_typos_are_errors() -> None:
    parsed = parse_policy_text("frobnicate: true\nnewClaudeSetting: {a: 1}\nhooks: {}\n", "policy.yaml")
    assert parsed.problems == []
    assert parsed.notes == [
        "policy.yaml:1: ignored unknown top-level key 'frobnicate' (not a Claude Code setting hookbus knows)",
        "policy.yaml:2: ignored unknown top-level key 'newClaudeSetting' (not a Claude Code setting hookbus knows)",
    ]
    assert str(only_problem("hoks: {}\n")) == "policy.yaml:1: unknown key 'hoks' (did you mean 'hooks'?)"
    assert only_problem("hooks:\n  PreToolUsee: []\n").message == (
        "unknown event 'PreToolUsee' (did you mean 'PreToolUse'?)"
    )
    assert only_problem("hookbus:\n  plugin: []\n").message == "unknown key 'plugin'"  # hookbus: stays strict


@pytest.mark.parametrize("url", ["ftp://audit.internal/x", "audit.internal/x", "http:///path", "https://"])
@pytest.mark.parametrize("kind", ["http", "mcp_tool"])
def test_hook_urls_must_be_http_urls_with_a_host(url: str, kind: str) -> None:
    extra = ", server: s, tool: t" if kind == "mcp_tool" else ""
    problem = only_problem(f"hooks:\n  PreToolUse:\n    - hooks:\n        - {{type: {kind}, url: '{url}'{extra}}}\n")
    assert (problem.line, problem.path) == (4, "hooks.PreToolUse[0].hooks[0].url")
    assert problem.message == f"must be an http(s) URL like https://host/path (got {url!r})"
    inline(f"hooks:\n  PreToolUse:\n    - hooks:\n        - {{type: {kind}, url: 'https://a.example:8443/x'{extra}}}\n")


def test_a_command_naming_a_missing_absolute_program_is_a_note(tmp_path: Path) -> None:
    present = tmp_path / "guard.sh"
    present.write_text("#!/bin/sh\n")
    policy = inline(f"""
        hooks:
          PreToolUse:
            - hooks:
                - {{type: command, command: "FOO=1 /opt/nowhere/guard.sh --strict"}}
                - {{type: command, command: /opt/nowhere/exec, args: [a]}}
                - {{type: command, command: "{present} x"}}
                - {{type: command, command: "$HOME/bin/guard.sh"}}
                - {{type: command, command: "python3 /opt/nowhere/audit.py"}}
    """)
    assert [n for n in policy.notes if "does not exist" in n] == [
        "policy.yaml:4: /opt/nowhere/guard.sh does not exist on this machine (the hook fails where it does not)",
        "policy.yaml:5: /opt/nowhere/exec does not exist on this machine (the hook fails where it does not)",
    ]


def test_handler_count_and_empty() -> None:
    assert empty_policy().empty and empty_policy().handler_count == 0
    assert inline("hookbus: {plugins: [x]}\n").empty is False
    policy = inline("hooks:\n  Stop:\n    - hooks: [{type: command, command: a}, {type: command, command: b}]\n")
    assert (policy.empty, policy.handler_count) == (False, 2)
    assert inline("disableAllHooks: true\nhooks:\n  Stop:\n    - hooks: [{type: command, command: a}]\n").empty


def test_exec_form_that_reparses_placeholders_is_warned_about() -> None:
    risky = policy_from_text(
        yaml.safe_dump(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "hooks": [
                                {"type": "command", "command": "/bin/sh", "args": ["-c", "echo ${tool_input.command}"]},
                                {
                                    "type": "command",
                                    "command": "bash",
                                    "args": ["-c", 'eval "$1"', "x", "${tool_input.command}"],
                                },
                                {"type": "command", "command": "sh", "args": ["-c", "eval", "${tool_input.command}"]},
                            ]
                        }
                    ]
                }
            }
        )
    )
    warned = [note for note in risky.notes if "inject" in note]
    assert len(warned) == 2  # the positional argument ($1) is safe; -c with the value and eval are not
    safe = policy_from_text(
        yaml.safe_dump(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": "sh",
                                    "args": ["-c", 'printf %s "$1"', "x", "${tool_input.command}"],
                                },
                            ]
                        }
                    ]
                }
            }
        )
    )
    assert not [note for note in safe.notes if "inject" in note]
