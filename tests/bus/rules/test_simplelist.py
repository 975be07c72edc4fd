"""The short way to split commands of plain and quoted words gives exactly what the parser gives."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

import pytest

from bus.rules.bashsplit import parse_commands
from bus.rules.shellparser import SimpleCommand, Unparsable, _Parser
from bus.rules.simplelist import split_simple
from tests.bus.rules.test_plainread import commands as corpus_commands

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

#: Pieces generated commands are made of: words the parser reads in every way it can, and the
#: characters that end the short way.
_WORDS = (
    "rm", "-rf", "/", "git", "push", "--force", "ls", "a", "x y", "A=1", "B+=2", "C[1]=3", "!", "{", "}",
    "if", "then", "fi", "do", "done", "while", "time", "-p", "--", "coproc", "function", "f", "case", "esac",
    "in", "[[", "]]", "[", "]", "eval", "command", "builtin", "trap", "alias", "exec", "xargs", "sh", "-c",
    "/bin/rm", "r*", "/???/r?", "~", "~/x", "a,b", "{a,b}", "x{1..3}", "*.py", "#", "a#b", "é", "2", "1",
    "'a b'", "''", '""', '"a b"', "'it''s'", "a'b'c", '"a\'b"', "'a\"b'", "'$x'", '"$x"', '"a\\"b"', "'a|b'",
    '"a;b"', "'{a,b}'", "$x", "`a`", "$(a)", "\\a", "a\\", "'a", '"a', "a=(x)", "(a)", "2>x", ">x", "<x",
    "<<E", "&", "|&", "&>", "\t", "\r", "\n", "\xa0", "'\n'",
)  # fmt: skip
_OPERATORS = (" ", " ", " ", "  ", "\t", " | ", "|", " || ", " && ", "&&", "; ", ";", " & ", " ;; ", " |& ", "")


def parser(command: str) -> tuple[SimpleCommand, ...] | None:
    try:
        return tuple(_Parser(command, False).parse(None))
    except Unparsable:
        return None


def generated(count: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 9)):
            parts += [rng.choice(_WORDS), rng.choice(_OPERATORS)]
        yield "".join(parts).strip(" ") if rng.random() < 0.8 else "".join(parts)


def test_the_short_way_splits_as_the_parser_on_the_corpus_and_the_oracles_cases() -> None:
    taken = 0
    for command in corpus_commands():
        found = split_simple(command)
        if found is not None:
            taken += 1
            assert found == parser(command), command
    assert taken > 1000  # the corpus's commands take it often


def test_the_short_way_splits_as_the_parser_on_generated_commands() -> None:
    taken = 0
    for command in generated(30_000, 7):
        found = split_simple(command)
        if found is not None:
            taken += 1
            assert found == parser(command), repr(command)
    assert taken > 3000


@pytest.mark.parametrize(
    ("command", "texts", "piped"),
    [
        ("grep -rn 'TODO' src | head -20", ["grep -rn 'TODO' src", "head -20"], [None, "grep -rn 'TODO' src"]),
        ('git commit -m "fix: a; b" && git push', ['git commit -m "fix: a; b"', "git push"], [None, None]),
        ("a || b; c", ["a", "b", "c"], [None, None, None]),
        ("A=1 rm -rf /", ["rm -rf /"], [None]),
    ],
)
def test_what_the_short_way_gives(command: str, texts: list[str], piped: list[str | None]) -> None:
    found = split_simple(command)
    assert found is not None
    assert [cmd.text for cmd in found] == texts
    assert [None if cmd.piped_from is None else cmd.piped_from.text for cmd in found] == piped
    assert parse_commands(command) == found


@pytest.mark.parametrize(
    "command",
    [
        "echo $HOME",
        "a > x",
        "a & b",
        "a |& b",
        "(a)",
        "{ a; }",
        "a # c",
        "eval 'rm -rf /'",
        "command rm -rf /",
        "[[ a ]] && b",
        "case a in a) b;; esac",
        "echo {a,b}",
        "a\nb",
        "echo 'unterminated",
        'echo "a\\"b"',
        "echo a\\ b",
        "time eval x",
    ],
)
def test_what_the_short_way_leaves_to_the_parser(command: str) -> None:
    assert split_simple(command) is None


@pytest.mark.parametrize("unit", ["'a' ", '"a" ', "a | ", "a && ", "a || ", "a; ", "'", "'a", '"|', "a'b' "])
def test_large_inputs_split_as_the_parser(unit: str) -> None:
    command = unit * 20_000 + "rm -rf /"
    assert split_simple(command) in (None, parser(command))


def test_a_simple_command_is_built_of_the_fields_the_short_way_sets() -> None:
    # The short way builds a piped command field by field (dataclasses.replace costs three times
    # as much): a field added to SimpleCommand must be set there too.
    assert [field.name for field in dataclasses.fields(SimpleCommand)] == ["words", "assigned", "written", "piped_from"]
