"""What here-documents and here-strings feed the commands of a command line."""

from __future__ import annotations

import pytest

from bus.rules.bashsplit import parse_commands
from bus.rules.heredocs import fed_texts
from bus.rules.permissions import parse_rule, rule_matches

pytestmark = pytest.mark.timeout(30)


def fed(command: str) -> list[str | None]:
    commands = parse_commands(command)
    assert commands is not None
    return fed_texts(command, commands)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sh <<EOF\nrm -rf /\nEOF", ["rm -rf /\n"]),
        ("sh <<'EOF'\nrm $x\nEOF", ["rm $x\n"]),
        ("sh <<-EOF\n\trm x\n\tEOF", ["\trm x\n"]),
        ('bash <<< "rm -rf /"', ["rm -rf /"]),
        ("bash <<<$X", [None]),  # known only at run time
        ("ls", [None]),
        # the k-th body of a delimiter is the k-th command's that opens one
        ("sh <<EOF\necho hi\nEOF\nsh <<EOF\nrm -rf /\nEOF", ["echo hi\n", "rm -rf /\n"]),
        ("cat <<A; sh <<B\na\nA\nrm x\nB", ["a\n", "rm x\n"]),
        ("sh <<A <<<'rm x'\nbody\nA", ["rm x"]),  # the last redirection is the input
        # an opener inside quotes: which body is whose cannot be told
        ('echo "<<EOF"; sh <<EOF\nrm x\nEOF', [None, None]),
    ],
)
def test_fed_texts(command: str, expected: list[str | None]) -> None:
    assert fed(command) == expected


def test_a_second_body_of_the_same_delimiter_is_read() -> None:
    command = "sh <<EOF\necho hi\nEOF\nsh <<EOF\nrm -rf /\nEOF"
    assert rule_matches(parse_rule("Bash(rm -rf *)"), "Bash", {"command": command}, "/w", kind="deny")


def test_a_body_that_cannot_be_placed_is_a_script_that_cannot_be_read() -> None:
    command = 'echo "<<EOF"; sh <<EOF\nls\nEOF'
    assert rule_matches(parse_rule("Bash(rm -rf /)"), "Bash", {"command": command}, "/w", kind="deny")


def test_many_here_documents_are_read_in_one_pass() -> None:
    command = "sh <<EOF\nls\nEOF\n" * 2000
    assert fed(command) == ["ls\n"] * 2000
