"""The shell reader reads commands as bash runs them, or says it cannot (tests/bus/rules/test_bash_oracle.py
checks the same against bash itself)."""

from __future__ import annotations

import pytest

from bus.rules.bashsplit import parse_commands, split_within
from bus.rules.permissions import parse_rule, rule_matches
from bus.rules.shellwords import MAX_BRACE_WORDS

pytestmark = pytest.mark.timeout(30)


def plains(command: str) -> list[str] | None:
    commands = parse_commands(command)
    return None if commands is None else [cmd.plain for cmd in commands]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # redirections are not words, wherever they stand
        (">/dev/null rm -rf /", ["rm -rf /"]),
        ("rm 2>/dev/null -rf /", ["rm -rf /"]),
        ("rm -rf</dev/null /", ["rm -rf /"]),
        ("2>&1 git reset --hard", ["git reset --hard"]),
        ("git push --force>/dev/null", ["git push --force"]),
        ("&>/dev/null rm -rf /", ["rm -rf /"]),
        ("{fd}>&- rm x", ["rm x"]),
        ("rm a2>x b", ["rm a2 b"]),  # ``a2>``: the 2 belongs to the word
        ("rm 2 >x b", ["rm 2 b"]),
        ("rm 2\\\n>x b", ["rm b"]),  # a line continuation between the fd and the operator
        ("cat <<<$(rm -rf /)", ["cat", "rm -rf /"]),  # a substitution in a target still runs
        ("cat > >(rm -rf /)", ["cat", "rm -rf /"]),
        # ANSI-C and locale strings
        ("$'\\x72\\x6d' -rf /", ["rm -rf /"]),
        ("$'\\162\\155' -rf /", ["rm -rf /"]),
        ("git $'\\x72eset' --hard", ["git reset --hard"]),
        ("$'\\u0072\\U0000006d' -rf /", ["rm -rf /"]),
        ("echo $'a\\'b'", ["echo a'b"]),
        ("echo $'a\\0b'c", ["echo ac"]),  # a NUL ends the string
        ("echo $'\\q\\n'", ["echo \\q\n"]),
        ('$"rm" -rf /', ["rm -rf /"]),
        # brace expansion
        ("{rm,-rf,/}", ["rm -rf /"]),
        ("rm -{r,f} /", ["rm -r -f /"]),
        ("echo a{b,c}d{e,f}", ["echo abde abdf acde acdf"]),
        ("echo {a}{b,c} {a{b,c}} {,a} x{,a}", ["echo {a}b {a}c {ab} {ac} a x xa"]),
        ("echo {1..3} {a..c} {1..10..4} {01..03} {3..1}", ["echo 1 2 3 a b c 1 5 9 01 02 03 3 2 1"]),
        ('echo {"a,b",c} \\{a,b} {a,b\\}', ["echo a,b c {a,b} {a,b}"]),
        ("echo ${x} {} {a} a{ }b", ["echo ${x} {} {a} a{ }b"]),
        ("a={x,y} rm z", ["rm z"]),  # an assignment is not expanded
        ("git {/,}'' x", ["git /  x"]),  # a quoted empty word stays
        # functions, groups and keywords
        ("f() { rm -rf /; }; f", ["rm -rf /", "f"]),
        ("function f { git reset --hard; }; f", ["git reset --hard", "f"]),
        ("function f() ( rm x ); f", ["rm x", "f"]),
        ("if true; then g() { rm x; }; fi", ["true", "rm x"]),
        ("time { rm -rf /; }", ["rm -rf /"]),
        ("time -p rm x", ["rm x"]),
        ("time (rm x)", ["rm x"]),
        ("! (rm x)", ["rm x"]),
        ("coproc rm -rf /", ["rm -rf /"]),
        ("coproc NAME { rm x; }", ["rm x"]),
        ("coproc NAME (rm x)", ["rm x"]),
        ("exec rm -rf /", ["exec rm -rf /"]),  # exec is a wrapper: stripped when matching
        # case statements: every clause, and the substitutions in the word and the patterns
        ("case x in a) ls;; esac", ["ls"]),
        ("case $x in\n a|b) rm x;;\n (c) rm y ;&\n *) rm z ;;&\nesac; ls", ["rm x", "rm y", "rm z", "ls"]),
        ("case x in a) echo esac;; esac", ["echo esac"]),
        ("case x in a) case y in b) rm z;; esac;; esac", ["rm z"]),
        ("case x in a) case y in b) rm z\nesac;; c) rm w;; esac", ["rm z", "rm w"]),
        ("a=(<(rm x) y)", ["rm x"]),
        ("case $(rm a) in $(rm b)) ;; esac", ["rm a", "rm b"]),
        ("case x in esac", []),
        ("coproc case x in x) rm y;; esac", ["rm y"]),
        ("a=1 case x in x) rm y;; esac; case z in z) rm w;; esac", ["rm y", "rm w"]),
        # [[ ]]: its operators are not separators or redirections, a regex may hold ( | )
        ("[[ ( x == y ) && a < b ]] && rm x", ["[[ ( x == y ) && a < b ]]", "rm x"]),
        ("[[ x =~ ^(a|b)$ ]] || rm x", ["[[ x =~ ^(a|b)$ ]]", "rm x"]),
        ("[[ -n $(rm y) ]]", ["[[ -n $(rm y) ]]", "rm y"]),
        ("[[ 'a[$(rm y)]' -eq 1 ]]", ["[[ a[$(rm y)] -eq 1 ]]", "rm y"]),
        ("echo $[1 + $(rm y)]", ["echo $[1 + $(rm y)]", "rm y"]),
        ("time -p -- rm x", ["rm x"]),
        ("time -- rm x", ["rm x"]),
        ("time time nice rm x", ["nice rm x"]),
        ("time -f x rm y", ["-f x rm y"]),  # time is bash's keyword: this runs ``-f``
        (">/dev/null time rm y", ["time rm y"]),  # not after a redirection: the program ``time``
        ("2>&1 X=1 rm y", ["rm y"]),
        ("rm x\r", ["rm x\r"]),  # a carriage return is part of a word
        # eval's argument is a command
        ("eval 'rm -rf /'", ["eval rm -rf /", "rm -rf /"]),
        ("eval \"eval 'rm x'\"", ["eval eval 'rm x'", "eval rm x", "rm x"]),
        ("builtin eval -- rm x", ["builtin eval -- rm x", "rm x"]),
        ('eval "$x"', ["eval $x", "$x"]),  # what it runs is known only at run time
        # so are trap's action and alias's values
        ("trap 'rm -rf /' EXIT", ["trap rm -rf / EXIT", "rm -rf /"]),
        ("trap - EXIT", ["trap - EXIT"]),
        ("alias a='rm x' b=ls", ["alias a=rm x b=ls", "rm x", "ls"]),
        # a substitution stored as text in a variable runs when bash reads it as arithmetic or a prompt
        ("x='a[$(rm -rf /)]'; echo $((x))", ["rm -rf /", "echo $((x))"]),
        ('declare x="\\$(rm x)"', ["declare x=$(rm x)", "rm x"]),
        ("echo '$(rm x)'", ["echo $(rm x)"]),  # not assigned: only printed
        ("let 'a[$(rm x)]=1'", ["let a[$(rm x)]=1", "rm x"]),  # a subscript: arithmetic
        ("echo ${a['$(rm x)']}", ["echo ${a['$(rm x)']}", "rm x"]),
        # a script from a stream is known only at run time; mapfile's callback runs
        ("source <(echo x)", ["source <(echo x)", "echo x", "<(echo x)"]),
        ("echo x | . /dev/stdin", ["echo x", ". /dev/stdin", "/dev/stdin"]),
        ("source venv/bin/activate", ["source venv/bin/activate"]),
        ("mapfile -C 'rm x' -c 1 a", ["mapfile -C rm x -c 1 a", "rm x ${index} ${line}"]),
        # substitutions in arithmetic and parameter expansion
        ("echo $(( $(rm -rf /) + 1 ))", ["echo $(( $(rm -rf /) + 1 ))", "rm -rf /"]),
        ("echo ${x:-$(rm -rf /)}", ["echo ${x:-$(rm -rf /)}", "rm -rf /"]),
        ("echo ${x:-${y:-`rm x`}}", ["echo ${x:-${y:-`rm x`}}", "rm x"]),
        ("(( $(rm x) ))", ["rm x"]),
        ("for ((i=0; i<$(rm x); i++)); do ls; done", ["rm x", "ls"]),
        # brackets honour quotes and escapes
        (": ${x:-\\{} ; rm -rf / ; echo }", [": ${x:-\\{}", "rm -rf /", "echo }"]),
        (": ${x:-'}'} ; rm -rf / ; echo }", [": ${x:-'}'}", "rm -rf /", "echo }"]),
        ("a=(x \\( y) ; rm -rf / ; echo \\)", ["rm -rf /", "echo )"]),
        ("a=(x ')' \"$(rm y)\") ; rm x", ["rm y", "rm x"]),
        # << inside (( )) is a shift, not a here-document
        ("(( x <<= 1 ))\nrm -rf /", ["rm -rf /"]),
        ("echo $(( 1 << 2 ))\nrm x", ["echo $(( 1 << 2 ))", "rm x"]),
        # an unquoted here-document's substitutions run; a quoted one's do not
        ("cat <<EOF\n$(rm -rf /)\nEOF", ["cat", "rm -rf /"]),
        ("cat <<-EOF\n\t`rm x`\n\tEOF\nls", ["cat", "ls", "rm x"]),
        ("cat <<'EOF'\n$(rm -rf /)\nEOF", ["cat"]),
        ("cat <<E\\OF\n$(rm -rf /)\nEOF", ["cat"]),
        # in a substitution, a line that starts with the delimiter ends the body; the rest is read
        ("x=$(cat <<EOF\nhi\nEOF) ; rm x", ["cat", "rm x"]),
        ("x=$(cat <<'EOF'\nhi\nEOFrm -rf /)", ["cat", "rm -rf /"]),
    ],
)
def test_commands_are_read_as_bash_runs_them(command: str, expected: list[str]) -> None:
    assert plains(command) == expected


def test_redirections_stay_in_the_written_text() -> None:
    commands = parse_commands("rm 2>/dev/null -rf / >|out")
    assert commands is not None
    (cmd,) = commands
    assert [word.value for word in cmd.words] == ["rm", "-rf", "/"]
    assert cmd.text == "rm 2>/dev/null -rf / >|out"


def test_a_program_named_by_a_pattern_is_known_only_at_run_time() -> None:
    commands = parse_commands("/???/r? -rf / && ls *.py && [ -f x ]")
    assert commands is not None
    assert [cmd.words[0].dynamic for cmd in commands] == [True, False, False]


def test_too_many_braces_are_known_only_at_run_time() -> None:
    words = ",".join("x" * 2 for _ in range(MAX_BRACE_WORDS + 1))
    for command in (f"rm {{{words}}}", "rm {1..100000}", "rm {a,b}{c,d}{e,f}{g,h}{i,j}{k,l}"):
        commands = parse_commands(command)
        assert commands is not None
        assert commands[0].words[1].dynamic, command


@pytest.mark.parametrize(
    "command",
    [
        "((cd a); ls)",  # (( that may be nested subshells
        "echo $(( 'x' ))",
        "ls >",
        "ls > ;",
        "ls 2>",
        "echo ${x",
        "echo ${x:-'}",
        "a=(x ; y)",
        "x y() { ls; }",
        "eval " + "'eval " * 6 + "ls" + "'" * 6,  # eval nested past the bound
        "echo $'unterminated",
        "case x in a) ls",
        "case x in a ls;; esac",
        "case x a) ls;; esac",
        "ls; esac",
        "[[ x ; ]]",
        "[[ x",
    ],
)
def test_what_the_reader_is_not_sure_of_cannot_be_judged(command: str) -> None:
    assert parse_commands(command) is None


DENY_RM = parse_rule("Bash(rm -rf /)")
DENY_RESET = parse_rule("Bash(git reset --hard)")
DENY_FORCE = parse_rule("Bash(git push *--force)")


@pytest.mark.parametrize(
    ("rule", "command"),
    [
        (DENY_RM, ">/dev/null rm -rf /"),
        (DENY_RM, "rm 2>/dev/null -rf /"),
        (DENY_RM, "rm -rf</dev/null /"),
        (DENY_RESET, "2>&1 git reset --hard"),
        (DENY_FORCE, "git push --force>/dev/null"),
        (DENY_RM, "$'\\x72\\x6d' -rf /"),
        (DENY_RM, "$'\\162\\155' -rf /"),
        (DENY_RESET, "git $'\\x72eset' --hard"),
        (DENY_RM, '$"rm" -rf /'),
        (DENY_RM, "{rm,-rf,/}"),
        (DENY_RM, "f() { rm -rf /; }; f"),
        (DENY_RESET, "function f { git reset --hard; }; f"),
        (DENY_RM, "time { rm -rf /; }"),
        (DENY_RM, "coproc rm -rf /"),
        (DENY_RM, "exec rm -rf /"),
        (DENY_RM, "eval 'rm -rf /'"),
        (DENY_RM, 'eval "$cmd"'),
        (DENY_RM, "echo $(( $(rm -rf /) + 1 ))"),
        (DENY_RM, "echo ${x:-$(rm -rf /)}"),
        (DENY_RM, ": ${x:-\\{} ; rm -rf / ; echo }"),
        (DENY_RM, "a=(x \\( y) ; rm -rf / ; echo \\)"),
        (DENY_RM, "(( x <<= 1 ))\nrm -rf /"),
        (DENY_RM, "cat <<EOF\n$(rm -rf /)\nEOF"),
    ],
)
def test_deny_rules_meet_what_bash_runs(rule: object, command: str) -> None:
    assert rule_matches(rule, "Bash", {"command": command}, kind="deny")  # type: ignore[arg-type]


def test_allow_rules_never_meet_what_cannot_be_judged() -> None:
    allow = parse_rule("Bash(echo *)")
    assert rule_matches(allow, "Bash", {"command": "echo $'\\x41'"}, kind="allow")
    assert not rule_matches(allow, "Bash", {"command": "echo $(( 'x' ))"}, kind="allow")
    assert not rule_matches(allow, "Bash", {"command": "echo {a,b} ; eval 'rm -rf /'"}, kind="allow")


def test_long_commands_of_the_new_constructs_split_within_their_budget() -> None:
    # Linear work: 64 KiB of each construct splits (a budget of seconds is never reached here).
    units = ["$'\\x72' ", "{a,b} ", "2>/dev/null ", "f() { a; }; ", "$(( $(a) )) ", "${x:-$(a)} ", "eval a; "]
    for unit in units:
        command = unit * (64 * 1024 // len(unit)) + "\nrm -rf /"
        found = split_within(command, False, 30.0)
        assert not isinstance(found, str), (unit, found)
        assert found[-1].plain == "rm -rf /" or any(cmd.plain == "rm -rf /" for cmd in found), unit
