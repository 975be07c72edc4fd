"""``hookbus.redact.patterns`` run on RE2: linear in the text, Python's syntax, a clear refusal
for what RE2 cannot run."""

from __future__ import annotations

import pytest

from bus.errors import PolicyError
from bus.policy.loading import policy_from_text
from bus.redaction.redact import Redactor, compile_pattern, re2_syntax


def test_nested_quantifiers_take_linear_time_on_a_long_text() -> None:
    redactor = Redactor(patterns=[("n", r"^(a+)+$"), ("m", r"(x+x+)+y")], builtins=False)
    assert redactor.text("a" * 100_000 + "!") == ("a" * 100_000 + "!", [])
    assert redactor.text("x" * 100_000) == ("x" * 100_000, [])
    assert redactor.text("a" * 100_000) == ("[REDACTED:n]", ["n"])


def test_secret_group_and_offsets_past_non_ascii_text() -> None:
    redactor = Redactor(patterns=[("ticket", r"ticket=(?P<secret>[a-z0-9]+)")], builtins=False)
    assert redactor.text("é ticket=abc, ünd ticket=x9") == (
        "é ticket=[REDACTED:ticket], ünd ticket=[REDACTED:ticket]",
        ["ticket", "ticket"],
    )
    assert redactor.text("\ud800 ticket=abc") == ("\ud800 ticket=[REDACTED:ticket]", ["ticket"])


@pytest.mark.parametrize(
    ("regex", "text", "masked"),
    [
        (r"key\Z", "a key", True),  # Python's \Z
        (r"key\Z", "a key!", False),
        (r"k{,2}ey", "kkey", True),  # Python's {,n} is {0,n}
        (r"[]x]+y", "]xy", True),  # a leading ']' is literal
        (r"[^]x]y", "]y", False),
        (r"[^]x]y", "ay", True),
        (r"[[:alpha:]]+z", "a]]z", True),  # the class [[:alph] then "]+z" (no POSIX classes)
        (r"[[:alpha:]]+z", "bz", False),
        (r"a[\b]b", "a\bb", True),
    ],
)
def test_python_syntax_is_kept(regex: str, text: str, masked: bool) -> None:
    assert bool(Redactor(patterns=[("p", regex)], builtins=False).text(text)[1]) is masked


def test_translation() -> None:
    assert re2_syntax(r"EMP-\d{6}\Z") == r"EMP-\d{6}\z"


@pytest.mark.parametrize(
    ("regex", "reason"),
    [
        ("(?<=key=)\\w+", "lookbehind '(?<=' (RE2 has no look-around)"),
        ("key(?!s)", "lookahead '(?!' (RE2 has no look-around)"),
        ("(a)\\1", "back-reference '\\\\1' (RE2 has none)"),
        ("(?P<q>a)(?P=q)", "back-reference '(?P=' (RE2 has none)"),
        ("(?>ab)c", "atomic group '(?>' (RE2 has none)"),
    ],
)
def test_what_re2_cannot_run_is_refused_with_the_reason(regex: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        compile_pattern(regex)
    assert str(caught.value) == f"regex {regex!r} is not supported: {reason}"


def test_policy_check_names_the_pattern_and_its_line() -> None:
    text = "hookbus:\n  redact:\n    patterns:\n      - {name: k, regex: 'key(?=s)'}\nhooks: {}\n"
    with pytest.raises(PolicyError) as caught:
        policy_from_text(text)
    assert str(caught.value) == (
        "policy.yaml:4: hookbus.redact.patterns[0].regex: regex 'key(?=s)' is not supported:"
        " lookahead '(?=' (RE2 has no look-around)"
    )
