"""Commands read as what they mean: ``$TMPDIR`` with its known values, a force push beside a
lease, an operand after ``--``; and words known only at run time against patterns that name a
file. Each case compares the compiled lists with one rule at a time."""

from __future__ import annotations

import pytest

from bus.policy.rulelists import compile_lists
from bus.rules.permissions import RuleKind, parse_rule, rule_matches
from bus.rules.shellread import read_shell

pytestmark = pytest.mark.timeout(30)

RULES = (
    "Bash(rm -rf /)",
    "Bash(rm -rf /usr*)",
    "Bash(rm -rf /tmp)",
    "Bash(git push *--force)",
    "Bash(git push *--force *)",
    "Bash(git push *-f)",
    "Bash(git worktree remove * -f*)",
    "Bash(cat *.env)",
    "Bash(rm *--no-preserve-root*)",
    "Bash(dd * of=/dev/*)",
    "Bash(rm -rf *)",
    "Bash(git push *)",
)


def first_rule(command: str, verdict: RuleKind = "deny") -> str | None:
    """The first of :data:`RULES` that meets ``command``, one rule at a time; the compiled list
    must name the same."""
    deny, ask = (RULES, ()) if verdict == "deny" else ((), RULES)
    (compiled,) = compile_lists(deny, ask, ())
    tool_input = {"command": command}
    one_by_one = next(
        (text for text in RULES if rule_matches(parse_rule(text), "Bash", tool_input, "/w", kind=verdict)), None
    )
    assert compiled.first_match("Bash", tool_input, "/w") == one_by_one
    return one_by_one


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        # $TMPDIR: a temporary directory, or unset
        ("rm -rf $TMPDIR/test-dir", "Bash(rm -rf *)"),
        ("rm -rf ${TMPDIR}/test-dir", "Bash(rm -rf *)"),
        ('rm -rf "$TMPDIR/test-dir"', "Bash(rm -rf *)"),
        ("rm -rf ${TMPDIR:-/tmp}/build", "Bash(rm -rf *)"),
        ("TMPDIR=/tmp/subdir rm -rf $TMPDIR/test-dir", "Bash(rm -rf *)"),  # expanded before it is set
        ("rm -rf $TMPDIR/usr", "Bash(rm -rf /usr*)"),  # unset: /usr
        ("rm -rf $TMPDIR", "Bash(rm -rf /tmp)"),
        # ... unless the command can change it
        ("export TMPDIR=/etc; rm -rf $TMPDIR/x", "Bash(rm -rf /)"),
        ("TMPDIR=/etc; rm -rf $TMPDIR/x", "Bash(rm -rf /)"),
        ('declare TMP""DIR=/etc; rm -rf $TMPDIR/x', "Bash(rm -rf /)"),
        ('read -r TMP""DIR; rm -rf $TMPDIR/x', "Bash(rm -rf /)"),
        ("rm -rf ${TMPDIR:=/etc}/x", "Bash(rm -rf /)"),
        ("sh -c 'TMPDIR=/etc; rm -rf $TMPDIR/x'", "Bash(rm -rf /)"),
        ("TMPDIR=/etc eval 'rm -rf $TMPDIR/x'", "Bash(rm -rf /)"),
        ("rm -rf '$TMPDIR'$X", "Bash(rm -rf /)"),
        ("$TMPDIR/rm -rf x", "Bash(rm -rf /)"),  # the program itself stays unknown
        # $PWD: the working directory, where the command does not change it
        ('rm -rf "$PWD/build"', "Bash(rm -rf *)"),
        ("rm -rf $PWD/../x", "Bash(rm -rf *)"),
        ("cd / && rm -rf $PWD/usr", "Bash(rm -rf /)"),
        ("PWD=/; rm -rf $PWD/usr", "Bash(rm -rf /)"),
        # a force push beside a bare lease pushes with the lease
        ("git push --force --force-with-lease", "Bash(git push *)"),
        ("git push -f --force-with-lease origin main", "Bash(git push *)"),
        ("git -C repo push --force-with-lease --force", "Bash(git push *)"),
        ("git push --force --force-with-lease=main origin main dev", "Bash(git push *--force *)"),
        ("git push --force-with-lease --no-force-with-lease --force", "Bash(git push *--force)"),
        # an operand after -- is a file
        ("git worktree remove -- -f", None),
        ("git worktree remove wt -f", "Bash(git worktree remove * -f*)"),
        ("rm -- -rf", None),
        ("rm -rf -- /", "Bash(rm -rf /)"),
        # a word known only at run time, against a pattern that names a file
        ("cat $F", None),
        ("cat $(ls *.txt)", None),
        ("xargs cat", None),
        ("xargs -I {} cat {}", None),
        ("cat $HOME/.env", "Bash(cat *.env)"),
        ("xargs cat .env", "Bash(cat *.env)"),
        ("xargs rm -f x", "Bash(rm *--no-preserve-root*)"),  # an option: it may be read
        ("xargs rm -f -- x", None),  # past --, no option
        ("rm -f -- $X", None),
        ("xargs dd if=/dev/zero", "Bash(dd * of=/dev/*)"),  # another word: it may be read
        ("xargs rm -rf", "Bash(rm -rf /)"),
        ("git push origin $B", "Bash(git push *--force)"),
    ],
)
def test_what_a_command_means(command: str, rule: str | None) -> None:
    assert first_rule(command) == rule


def test_an_unparsable_command_says_why() -> None:
    read = read_shell("echo 'unterminated")
    assert read.unjudged is not None and "unterminated single quote" in read.unjudged
    assert first_rule("echo 'unterminated") == RULES[0]  # it cannot be judged: every deny rule meets it
    assert read_shell("echo ok").unjudged is None
