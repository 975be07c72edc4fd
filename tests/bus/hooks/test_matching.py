"""Group matchers, rule by rule of Claude Code's matcher semantics."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bus.hooks.matching import (
    Matcher,
    canonical_model_name,
    compile_matcher,
    js_regex_to_re2,
    matcher_value,
)


def _hits(matcher: str | None, event: str, value: str | None) -> bool:
    return compile_matcher(matcher, event).matches(value)


@pytest.mark.parametrize(
    ("matcher", "value", "expected"),
    [
        # wildcards: "*", "", omitted
        ("*", "Bash", True),
        ("", "Bash", True),
        (None, "Bash", True),
        ("*", None, True),
        (None, None, True),
        ("  ", "Bash", True),
        # exact names
        ("Bash", "Bash", True),
        ("Bash", "BashOutput", False),
        ("Bash", "MyBash", False),
        ("Edit", "NotebookEdit", False),
        # case-sensitive
        ("bash", "Bash", False),
        ("Bash", "bash", False),
        # lists with | and , and surrounding whitespace
        ("Edit|Write", "Write", True),
        ("Edit|Write", "Read", False),
        ("Edit,Write", "Edit", True),
        ("Edit , Write", "Write", True),
        (" Edit | Write ", "Edit", True),
        ("Edit| Write,MultiEdit", "MultiEdit", True),
        ("Edit|", "Edit", True),
        ("Edit|", "", False),
        # a space inside one name stays part of the name
        ("Edit Write", "Edit Write", True),
        ("Edit Write", "Edit", False),
        # hyphen is in the exact set: no unanchored regex
        ("code-reviewer", "code-reviewer", True),
        ("code-reviewer", "senior-code-reviewer", False),
        # anything else: unanchored JavaScript regex
        ("Edit.*", "NotebookEdit", True),
        ("Edit.*", "Edit", True),
        ("^Edit$", "NotebookEdit", False),
        ("^Edit$", "Edit", True),
        ("^Edit$", "Edit\n", False),  # JavaScript $ never matches before a final newline
        ("Notebook", "NotebookEdit", False),  # exact path, not a substring
        ("^Notebook", "NotebookEdit", True),
        ("Write|Edit.", "Writer", True),  # regex alternation, unanchored
        ("[Ee]dit", "NotebookEdit", True),
        ("^(Edit|Write)$", "Write", True),
        ("^(Edit|Write)$", "Writes", False),
        ("edit.*", "Edit", False),  # regexes are case-sensitive too
        # MCP tools
        ("mcp__memory__.*", "mcp__memory__create_entities", True),
        ("mcp__memory__.*", "mcp__memoryx__create", False),
        ("mcp__memory", "mcp__memory__create_entities", False),  # exact string: matches nothing
        ("mcp__.*__write.*", "mcp__github__write_file", True),
        ("mcp__plugin_tools_db__.*", "mcp__plugin_tools_db__query", True),
        ("mcp__github__get_issue", "mcp__github__get_issue", True),
    ],
)
def test_tool_matchers(matcher: str | None, value: str | None, expected: bool) -> None:
    assert _hits(matcher, "PreToolUse", value) is expected


@pytest.mark.parametrize(
    ("matcher", "value", "expected"),
    [
        # plugin-scoped agent types contain ':' -> regex path; anchor them
        ("my-plugin:reviewer", "my-plugin:reviewer", True),
        ("my-plugin:reviewer", "other-my-plugin:reviewer-2", True),
        ("^my-plugin:reviewer$", "other-my-plugin:reviewer", False),
        ("^my-plugin:reviewer$", "my-plugin:reviewer", True),
        ("Explore|Plan", "Plan", True),
        ("general-purpose", "general-purpose", True),
        ("Explore", "", False),
    ],
)
def test_agent_type_matchers(matcher: str, value: str, expected: bool) -> None:
    assert _hits(matcher, "SubagentStop", value) is expected


@pytest.mark.parametrize(
    ("matcher", "event", "value", "expected"),
    [
        ("startup|resume", "SessionStart", "resume", True),
        ("startup", "SessionStart", "clear", False),
        ("startup,clear", "SessionStart", "clear", True),
        ("permission_prompt", "Notification", "permission_prompt", True),
        ("permission_prompt", "Notification", "idle_prompt", False),
        ("auto", "PreCompact", "manual", False),
        ("user_settings|skills", "ConfigChange", "skills", True),
        ("session_start", "InstructionsLoaded", "session_start", True),
        ("github", "Elicitation", "github", True),
        ("clear", "SessionEnd", "logout", False),
    ],
)
def test_other_event_fields(matcher: str, event: str, value: str, expected: bool) -> None:
    assert _hits(matcher, event, value) is expected


@pytest.mark.parametrize(
    ("matcher", "event", "value", "expected"),
    [
        # narrow exact set: letters, digits, _ and | only
        ("rate_limit|overloaded", "StopFailure", "overloaded", True),
        ("rate_limit|overloaded", "StopFailure", "server_error", False),
        ("rate_limit", "StopFailure", "rate_limit_x", False),
        # a comma is not a separator there: regex "rate_limit,overloaded" matches neither name
        ("rate_limit,overloaded", "StopFailure", "rate_limit", False),
        ("rate_limit,overloaded", "StopFailure", "overloaded", False),
        # a space takes the regex path: unanchored, no trimming
        ("rate_limit | overloaded", "StopFailure", "rate_limit", False),
        ("rate_limit | overloaded", "StopFailure", "rate_limit ", True),
        # hyphen takes the regex path: unanchored
        ("server-a", "StopFailure", "my-server-a", True),
        ("envrc", "FileChanged", ".envrc", False),  # exact on the basename
        (".envrc|.env", "FileChanged", ".envrc", True),  # '.' -> regex
        (".envrc|.env", "FileChanged", "xenv", True),  # unanchored regex, '.' is any char
        ("Makefile|package_json", "FileChanged", "Makefile", True),
        ("Makefile", "FileChanged", "Makefile2", False),
        # the same matchers on a normal event use the wide exact set
        ("rate_limit,overloaded", "Notification", "overloaded", True),
        ("server-a", "Notification", "my-server-a", False),
    ],
)
def test_narrow_exact_set(matcher: str, event: str, value: str, expected: bool) -> None:
    assert _hits(matcher, event, value) is expected


@pytest.mark.parametrize(
    ("event", "hook_input", "expected"),
    [
        ("PreToolUse", {"tool_name": "Bash"}, "Bash"),
        ("PostToolUse", {"tool_name": "Edit"}, "Edit"),
        ("SessionStart", {"source": "startup"}, "startup"),
        ("Notification", {"notification_type": "idle_prompt"}, "idle_prompt"),
        ("SubagentStart", {"agent_type": "Explore"}, "Explore"),
        ("StopFailure", {"error": "rate_limit"}, "rate_limit"),
        ("UserPromptExpansion", {"command_name": "review"}, "review"),
        ("FileChanged", {"file_path": "/repo/.envrc"}, ".envrc"),
        ("FileChanged", {"file_path": "C:\\repo\\.env"}, ".env"),
        ("PreModelSwitch", {"to_model": "claude-opus-5[1m]"}, "claude-opus-5"),
        ("PostModelSwitch", {"to_model": "claude-sonnet-5"}, "claude-sonnet-5"),
        ("PreModelSwitch", {}, None),
        ("PreToolUse", {}, None),
        ("PreToolUse", {"tool_name": 3}, None),
        ("UserPromptSubmit", {"prompt": "hi"}, None),
        ("Stop", {"stop_hook_active": True}, None),
        ("NoSuchEvent", {"tool_name": "Bash"}, None),
    ],
)
def test_matcher_value(event: str, hook_input: dict[str, Any], expected: str | None) -> None:
    assert matcher_value(event, hook_input) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-opus-5[1m]", "claude-opus-5"),
        ("claude-opus-5 [1m]", "claude-opus-5"),
        ("claude-opus-5", "claude-opus-5"),
        ("", None),
        ("[1m]", None),
        (None, None),
        (42, None),
    ],
)
def test_canonical_model_name(model: object, expected: str | None) -> None:
    assert canonical_model_name(model) == expected


@pytest.mark.parametrize("event", ["PreModelSwitch", "PostModelSwitch"])
@pytest.mark.parametrize(
    ("matcher", "to_model", "expected"),
    [
        ("claude-opus-5", "claude-opus-5[1m]", True),  # [1m] ignored
        ("claude-opus-5", "claude-sonnet-5", False),
        ("claude-opus-5|claude-sonnet-5", "claude-sonnet-5", True),
        ("opus", "claude-opus-5", False),  # exact (hyphen in the exact set)
        ("opus.*", "claude-opus-5", True),  # regex, unanchored
        ("^claude-opus-5$", "claude-opus-5[1m]", True),
        ("claude-opus-5", None, True),  # no canonical name: every hook runs
        ("claude-opus-5", "", True),
    ],
)
def test_model_switch(event: str, matcher: str, to_model: str | None, expected: bool) -> None:
    hook_input = {} if to_model is None else {"to_model": to_model}
    assert compile_matcher(matcher, event).matches(matcher_value(event, hook_input)) is expected


@pytest.mark.parametrize(
    "event", ["UserPromptSubmit", "Stop", "PostToolBatch", "CwdChanged", "WorktreeCreate", "Unknown"]
)
@pytest.mark.parametrize("matcher", ["Bash", "^nothing$", "(", "x|y"])
def test_events_without_matcher_field_ignore_the_matcher(event: str, matcher: str) -> None:
    compiled = compile_matcher(matcher, event)
    assert compiled.kind == "all"
    assert compiled.matches(None)
    assert compiled.matches("anything")


@pytest.mark.parametrize("matcher", ["Bash", "Edit|Write", "Edit.*", "^Bash$"])
def test_missing_value_does_not_match_a_specific_matcher(matcher: str) -> None:
    assert not _hits(matcher, "PreToolUse", None)
    assert _hits(matcher, "PreModelSwitch", None)


@pytest.mark.parametrize("matcher", ["(", "Edit[", "*Edit", "a{2,1}", "(?<n>a)\\k<m>"])
def test_invalid_regex_raises_with_reason(matcher: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(matcher))):
        compile_matcher(matcher, "PreToolUse")


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("^(?<tool>Edit|Write)$", "Edit", True),  # named group
        ("^(?<tool>Edit|Write)$", "EditWrite", False),
        ("^Edit[^]$", "Edits", True),  # [^] is any character
        ("^Edit[]", "Edits", False),  # [] matches nothing
        ("^\\e", "e", True),  # identity escape
        ("[[]x", "[x", True),  # '[' inside a class is literal
        ("a[&|]b", "a|b", True),
        ("\\d+", "٣", False),  # \d is ASCII only, as in JavaScript
        ("\\cJ", "\n", True),
    ],
)
def test_javascript_regex_translation(pattern: str, value: str, expected: bool) -> None:
    assert _hits(pattern, "PreToolUse", value) is expected


def test_translation_passes_plain_patterns_through() -> None:
    assert js_regex_to_re2("mcp__memory__*") == "mcp__memory__*"
    assert js_regex_to_re2("^Edit$") == "^Edit\\z"


def test_compiled_matchers_are_cached_and_frozen() -> None:
    first = compile_matcher("Edit|Write", "PreToolUse")
    assert compile_matcher("Edit|Write", "PreToolUse") is first
    assert first.kind == "exact"
    assert first.names == frozenset({"Edit", "Write"})
    with pytest.raises(AttributeError):
        first.kind = "all"  # type: ignore[misc]
    assert isinstance(compile_matcher("Edit.*", "PreToolUse"), Matcher)
