"""Matcher regexes run on RE2: linear in the value, JavaScript's meaning, and a clear refusal for
what RE2 cannot run (look-around, back-references)."""

from __future__ import annotations

import pytest

from bus.errors import PolicyError
from bus.hooks.matching import compile_matcher
from bus.policy.loading import policy_from_text


def _hits(matcher: str, value: str) -> bool:
    return compile_matcher(matcher, "PreToolUse").matches(value)


def test_nested_quantifiers_take_linear_time_on_a_long_tool_name() -> None:
    # On a backtracking engine each extra character doubled the time (25 characters: ~1 s).
    assert not _hits("^(a+)+$", "a" * 100_000 + "!")
    assert _hits("^(a+)+$", "a" * 100_000)
    assert not _hits("^(a|aa)*$", "a" * 100_000 + "!")
    assert not _hits("(x+x+)+y", "x" * 100_000)


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("^Edit.$", "Edit\r", False),  # JavaScript's . stops at every line terminator
        ("^Edit.$", "Edit\u2028", False),
        ("^Edit.$", "Edits", True),
        ("^a\\sb$", "a\u00a0b", True),  # JavaScript's \s takes Unicode spaces
        ("^a\\sb$", "a\vb", True),
        ("^a[\\s]b$", "a\u3000b", True),
        ("^a\\Sb$", "a\u00a0b", False),
        ("^a[\\b]b$", "a\bb", True),  # backspace inside a class
        ("^\\u0041$", "A", True),
        ("^\\x41$", "A", True),
        ("^\\xZ$", "xZ", True),  # not a hex escape: the letter
        ("^[\\1]$", "\x01", True),  # legacy octal inside a class
        ("^\\cJ$", "\n", True),
        ("^a\\c1$", "a\\c1", True),  # not a control letter: a backslash and a 'c'
        ("^\\é$", "é", True),
        ("^[[:alpha:]]+$", "p]]", True),  # JavaScript: the class [[:alph] then "]+" (no POSIX classes)
        ("^[[:alpha:]]+$", "b", False),
        ("^a{,3}$", "a{,3}", True),  # not a repeat in JavaScript: literal
        ("^(?:Edit|Write)$", "Write", True),
        ("\\.py$", "x.py\n", False),
    ],
)
def test_javascript_meaning_is_kept(pattern: str, value: str, expected: bool) -> None:
    assert _hits(pattern, value) is expected


def test_a_lone_surrogate_in_the_value_does_not_break_matching() -> None:
    assert _hits("^x.$", "x\ud800")
    assert not _hits("^y", "x\ud800")


@pytest.mark.parametrize(
    ("matcher", "reason"),
    [
        ("(?<=Notebook)Edit", "lookbehind '(?<=' is not supported (RE2 has no look-around)"),
        ("(?<!Notebook)Edit", "lookbehind '(?<!' is not supported (RE2 has no look-around)"),
        ("Edit(?=s)", "lookahead '(?=' is not supported (RE2 has no look-around)"),
        ("^(?!Bash)", "lookahead '(?!' is not supported (RE2 has no look-around)"),
        ("(Edit)\\1", "back-reference '\\\\1' is not supported (RE2 has none)"),
        ("(?<t>Edit)\\k<t>", "back-reference '\\\\k<t>' is not supported (RE2 has none)"),
    ],
)
def test_what_re2_cannot_run_is_refused_with_the_reason(matcher: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        compile_matcher(matcher, "PreToolUse")
    assert str(caught.value) == f"unsupported matcher regex {matcher!r} on PreToolUse: {reason}"


def test_the_policy_check_names_the_pattern_with_its_line() -> None:
    text = "hooks:\n  PreToolUse:\n    - matcher: 'Edit(?=s)'\n      hooks: [{type: command, command: 'true'}]\n"
    with pytest.raises(PolicyError) as caught:
        policy_from_text(text)
    assert str(caught.value) == (
        "policy.yaml:3: hooks.PreToolUse[0].matcher: unsupported matcher regex 'Edit(?=s)' on PreToolUse:"
        " lookahead '(?=' is not supported (RE2 has no look-around)"
    )


def test_an_overlong_repeat_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^invalid matcher regex 'a\{1001\}' on PreToolUse: invalid repetition size"):
        compile_matcher("a{1001}", "PreToolUse")
