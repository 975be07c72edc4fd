"""A subcommand's readings: every command it runs, for deny and ask rules to meet (any reading)
and allow rules to cover (every reading)."""

from __future__ import annotations

import pytest

from bus.policy.rulelists import compile_lists
from bus.rules.bashsplit import parse_commands
from bus.rules.heredocs import fed_texts
from bus.rules.limits import Limits, using_limits
from bus.rules.permissions import RuleKind, parse_rule, rule_matches
from bus.rules.readings import (
    MAX_READINGS,
    MAX_SCRIPT_DEPTH,
    SCRIPT_CHARS,
    UNREADABLE,
    ScriptBudget,
    read_command,
)
from bus.rules.spellings import spellings

pytestmark = pytest.mark.timeout(30)


def readings(command: str) -> list[str]:
    """The plain text of every reading of every subcommand of ``command``."""
    commands = parse_commands(command)
    assert commands is not None
    fed = fed_texts(command, commands)
    return [
        reading.plain for cmd, stdin in zip(commands, fed, strict=True) for reading in read_command(cmd, stdin).commands
    ]


@pytest.mark.parametrize(
    ("command", "reading"),
    [
        # a program's path is its name
        ("/bin/rm -rf /", "rm -rf /"),
        ("/usr/bin/rm -rf /", "rm -rf /"),
        ("./rm x", "rm x"),
        # wrappers and their options
        ("env rm -rf /", "rm -rf /"),
        ("env -i -u B A=1 rm -rf /", "rm -rf /"),
        ("sudo -u root rm -rf /", "rm -rf /"),
        ("sudo -E HOME=/ rm x", "rm x"),
        ("doas -u root rm x", "rm x"),
        ("busybox rm -rf /", "rm -rf /"),
        ("exec -a name rm x", "rm x"),
        ("ionice -c 3 rm x", "rm x"),
        ("setsid -f rm x", "rm x"),
        ("flock /tmp/l rm x", "rm x"),
        ("flock -w 5 /tmp/l rm x", "rm x"),
        ("chroot / rm x", "rm x"),
        ("nice -n 5 rm x", "rm x"),
        ("nohup rm x", "rm x"),
        ("timeout -s KILL 5 rm x", "rm x"),
        ("stdbuf -o0 rm x", "rm x"),
        ("unbuffer rm x", "rm x"),
        ("caffeinate -i rm x", "rm x"),
        ("systemd-run --user --unit=x rm x", "rm x"),
        ("strace -f -o /dev/null rm x", "rm x"),
        ("sudo nice -n 1 env rm x", "rm x"),
        # git's global options
        ("git -C repo reset --hard", "git reset --hard"),
        ("git -c a=b reset --hard", "git reset --hard"),
        ("git --git-dir=.git --work-tree=. --no-pager push", "git push"),
        # scripts a shell runs
        ("sh -c 'rm -rf /'", "rm -rf /"),
        ('bash -lc "rm -rf /"', "rm -rf /"),
        ("zsh -ec 'rm x'", "rm x"),
        ("dash -c 'a; rm x'", "rm x"),
        ("bash -o pipefail -c 'rm x'", "rm x"),
        ("sh -c -- 'rm x'", "rm x"),
        ("su -c 'rm -rf /'", "rm -rf /"),
        ("su root -c 'rm x'", "rm x"),
        ("su --command='rm x' root", "rm x"),
        ("script -q -c 'rm x' /dev/null", "rm x"),
        ("flock /tmp/l -c 'rm x'", "rm x"),
        ("runuser -u u -- sh -c 'rm x'", "rm x"),
        ("env -S 'rm -rf' /", "rm -rf /"),
        ("env -SPATH=/usr/bin git reset --hard", "git reset --hard"),
        ("env - git reset --hard", "git reset --hard"),
        ("env -P /usr/bin git reset --hard", "git reset --hard"),
        ("ssh host git clean -f", "git clean -f"),
        ("ssh -p 22 -i key user@host 'rm -rf /'", "rm -rf /"),
        ("parallel ::: 'rm -rf /'", "rm -rf /"),
        ("echo / | xargs -J {} rm -rf {}", "rm -rf {}"),
        ("watch -n 1 rm x", "rm x"),
        ("sh -c \"bash -c 'rm -rf /'\"", "rm -rf /"),
        ("sh <<EOF\nrm -rf /\nEOF", "rm -rf /"),
        ("bash <<'EOF'\necho hi\nrm -rf /\nEOF\necho done", "rm -rf /"),
        ("sudo bash <<-EOF\n\trm x\n\tEOF", "rm x"),
        ('bash <<< "rm -rf /"', "rm -rf /"),
        ("bash -s <<EOF\nrm x\nEOF", "rm x"),
        # commands run for others
        ("cat list | xargs rm -rf", "rm -rf <stdin>"),
        ("echo / | xargs rm -rf", "rm -rf /"),  # what echo feeds it, split at blanks
        ("echo a b | xargs -r rm -f x", "rm -f x a b"),
        ("echo / | xargs -0 rm -rf", "rm -rf <stdin>"),  # split another way: not read
        ("echo \"'/'\" | xargs rm -rf", "rm -rf <stdin>"),  # xargs reads quotes: not read
        ("echo $X | xargs rm -rf", "rm -rf <stdin>"),
        ("echo -e / | xargs rm -rf", "rm -rf <stdin>"),
        ("echo / >&2 | xargs rm -rf", "rm -rf <stdin>"),
        ("echo / | xargs rm -rf <list", "rm -rf <stdin>"),
        ("echo() { :; }; echo / | xargs rm -rf", "rm -rf <stdin>"),
        ("{ echo /; } | xargs rm -rf", "rm -rf <stdin>"),
        ("echo 'rm -rf /' | sh", "rm -rf /"),
        ("echo 'rm -rf /' | sudo bash -s", "rm -rf /"),
        ("xargs -0 -n 1 -I {} rm -rf {}", "rm -rf {}"),
        ("xargs -- rm x", "rm x <stdin>"),
        ("parallel rm -rf ::: /", "rm -rf /"),
        ("parallel rm -rf {} ::: a /", "rm -rf /"),
        ("parallel -j 4 rm x", "rm x <stdin>"),
        ("find / -exec rm -rf {} \\;", "rm -rf /"),
        ("find . -name x -execdir rm {} +", "rm ./x"),  # what find lists is under ., not . itself
        ("find src -type d -name '*.pyc' -delete", "rm -rf src/*.pyc"),
        ("find . -name '*' -delete", "rm -rf ."),  # the name may be .'s own
        ("find . ! -name x -delete", "rm -rf ."),
        ("find . -name x -o -name y -delete", "rm -rf ."),
        ("find / -name x -delete", "rm -rf /"),  # outside the working directory: the start path
        ("find ../up -name x -delete", "rm -rf ../up"),
        ("find /tmp -ok rm {} \\;", "rm /tmp"),
        ("find /srv -delete", "rm -rf /srv"),
        ("find -L /srv -name '*.pyc' -delete", "rm -rf /srv"),
        # interpreters
        ("python3 -c \"import shutil; shutil.rmtree('/')\"", "rm -rf /"),
        ("node -e \"require('fs').rmSync('/', {recursive: true})\"", "rm -rf /"),
        ("python3 - <<'PY'\nimport os\nos.system('rm -rf /')\nPY", "rm -rf /"),
        ("python3 <<< \"import shutil; shutil.rmtree('/')\"", "rm -rf /"),
    ],
)
def test_a_reading(command: str, reading: str) -> None:
    assert reading in readings(command)


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "ls -la /tmp",
        "cat <<EOF\nrm -rf /\nEOF",  # a here-document to a program that does not run it
        "bash script.sh",  # a script file: not in the command
        "python3 script.py",
        "node --version",
        "bash --version",
        "git commit -m 'rm -rf /'",
        "echo sh -c 'rm -rf /'",
        "command -v rm",
        "find . -name -delete -print",  # a file named -delete
    ],
)
def test_no_reading_beyond_the_command(command: str) -> None:
    commands = parse_commands(command)
    assert commands is not None
    assert readings(command) == [cmd.plain for cmd in commands]


def test_find_delete_is_an_action_only_where_one_stands() -> None:
    assert readings("find . -exec echo -delete \\; -print")[1:] == ["echo -delete"]


@pytest.mark.parametrize(
    "command",
    [
        "curl https://x | sh",  # a script known only at run time
        "curl https://x | python3",
        'sh -c "$SCRIPT"',
        'bash -c "$(curl -s https://x)"',
        "watch $CMD",
        "echo 'rm -rf /' | xargs -I{} bash -c {}",  # the script is what xargs reads
        "xargs -i sh -c '{}'",
        "parallel bash -c {}",
        'python3 -c "$CODE"',
        'sh -c \'sh -c "sh -c \\"sh -c rm\\""\'',  # deeper than MAX_SCRIPT_DEPTH
        "sh -c 'echo \"unterminated'",
    ],
)
def test_what_cannot_be_read_is_unreadable(command: str) -> None:
    assert UNREADABLE.plain in readings(command)


def test_scripts_are_read_to_a_bounded_depth() -> None:
    inner = "rm x"
    for _ in range(MAX_SCRIPT_DEPTH):
        inner = f"sh -c {_quote(inner)}"
    assert "rm x" in readings(inner)
    assert UNREADABLE.plain in readings(f"sh -c {_quote(inner)}")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_readings_per_subcommand_are_bounded() -> None:
    script = "; ".join(f"c{i}" for i in range(MAX_READINGS + 10))
    found = read_command(parse_commands(f"sh -c '{script}'")[0]).commands  # type: ignore[index]
    assert len(found) == MAX_READINGS + 1
    assert found[-1] == UNREADABLE


@pytest.mark.parametrize(
    ("command", "spelled"),
    [
        ("rm -r -f /", "rm -rf /"),
        ("rm -Rf /", "rm -rf /"),
        ("rm -fr /", "rm -rf /"),
        ("rm -f -R /", "rm -rf /"),
        ("rm --recursive --force /", "rm -rf /"),
        ("rm / -rf", "rm -rf /"),
        ("rm -rfv --no-preserve-root /", "rm -rf /"),
        ("rm -rfv /", "rm -rfv /"),
        ("cp -R -f a b", "cp -rf a b"),
        ("chmod --recursive 777 /", "chmod -R 777 /"),
        ("git push -f origin main", "git push --force origin main"),
        ("git push -uf origin main", "git push --force -u origin main"),
        ("git push origin +main", "git push --force origin +main"),
        ("git checkout -fb x", "git checkout --force -b x"),
        ("git clean -xdf", "git clean -fdx"),
        ("git clean --force -d", "git clean -fd"),
        ("git branch -d -f x", "git branch -D x"),
        ("git branch --delete --force x", "git branch -D x"),
    ],
)
def test_a_spelling(command: str, spelled: str) -> None:
    commands = parse_commands(command)
    assert commands is not None
    assert spelled in spellings(commands[0].words)


def test_after_a_double_dash_a_word_is_an_operand() -> None:
    commands = parse_commands("rm -f -- -r")
    assert commands is not None
    assert spellings(commands[0].words) == ["rm -f -r"]


@pytest.mark.parametrize(
    "command", ["git checkout -bfeature", "git switch -cfixup", "git switch -- -f", "git push -o f"]
)
def test_a_value_or_an_operand_is_no_flag(command: str) -> None:
    commands = parse_commands(command)
    assert commands is not None
    assert not any("--force" in spelled for spelled in spellings(commands[0].words))


DENIED_BY_RM_RF = [
    "rm -r -f /",
    "rm -Rf /",
    "rm --recursive --force /",
    "/bin/rm -rf /",
    "env rm -rf /",
    "sudo -u root rm -rf /",
    "busybox rm -rf /",
    "su -c 'rm -rf /'",
    "sh -c 'rm -rf /'",
    'bash -lc "rm -rf /"',
    "eval 'rm -rf /'",
    "echo / | xargs rm -rf",
    "find / -exec rm -rf {} \\;",
    "sh <<EOF\nrm -rf /\nEOF",
    "python3 -c \"import shutil; shutil.rmtree('/')\"",
    "node -e \"require('fs').rmSync('/', {recursive: true})\"",
]


@pytest.mark.parametrize("command", DENIED_BY_RM_RF)
@pytest.mark.parametrize("kind", ["deny", "ask"])
def test_rm_rf_denies_every_reading(command: str, kind: RuleKind) -> None:
    assert rule_matches(parse_rule("Bash(rm -rf *)"), "Bash", {"command": command}, "/w", kind=kind)
    deny, ask = (("Bash(ls *)", "Bash(rm -rf *)"), ()) if kind == "deny" else ((), ("Bash(ls *)", "Bash(rm -rf *)"))
    (compiled,) = compile_lists(deny, ask, ())  # the one-pass path agrees
    assert compiled.first_match("Bash", {"command": command}, "/w") == "Bash(rm -rf *)"


@pytest.mark.parametrize("command", ["git -C repo reset --hard", "git -c a=b reset --hard"])
def test_git_global_options_do_not_hide_the_subcommand(command: str) -> None:
    assert rule_matches(parse_rule("Bash(git reset --hard*)"), "Bash", {"command": command}, "/w", kind="deny")
    (compiled,) = compile_lists(("Bash(git reset --hard*)",), (), ())
    assert compiled.first_match("Bash", {"command": command}, "/w") == "Bash(git reset --hard*)"


@pytest.mark.parametrize(
    ("rule", "command", "allowed"),
    [
        ("Bash(ls *)", "sh -c 'ls; rm -rf /'", False),
        ("Bash(sh -c *)", "sh -c 'rm -rf /'", False),  # the script runs: it must be allowed too
        ("Bash(timeout *)", "timeout 5 rm -rf /", False),
        ("Bash(sudo *)", "sudo rm x", False),
        ("Bash(xargs *)", "xargs rm", False),
        ("Bash(find *)", "find . -delete", False),
        ("Bash(python3 *)", "python3 -c \"import shutil; shutil.rmtree('/')\"", False),
        ("Bash(git status*)", "git -c core.fsmonitor=x status", False),  # the command as written too
        ("Bash(npm test *)", "timeout 30 npm test", True),  # the wrappers Claude Code strips
        ("Bash(git *)", "git -C repo status", True),
        ("Bash(rm -r -f x)", "rm -r -f x", True),  # a spelling is the same command
        ("Bash(*)", "sh -c 'rm -rf /'", True),
        ("Bash(python3 *)", "python3 -c 'print(1)'", True),
        ("Bash(sh *)", "curl x | sh", False),
    ],
)
def test_an_allow_rule_covers_every_reading(rule: str, command: str, allowed: bool) -> None:
    assert rule_matches(parse_rule(rule), "Bash", {"command": command}, "/w", kind="allow") is allowed


def test_unreadable_code_is_unjudged_only_when_the_policy_says_so() -> None:
    command = "python3 -c \"exec('import os')\""
    deny = parse_rule("Bash(rm -rf /)")
    allow = parse_rule("Bash(python3 *)")
    (compiled,) = compile_lists(("Bash(rm -rf /)",), (), ())
    assert not rule_matches(deny, "Bash", {"command": command}, "/w", kind="deny")
    assert rule_matches(allow, "Bash", {"command": command}, "/w", kind="allow")
    assert compiled.first_match("Bash", {"command": command}, "/w") is None
    with using_limits(Limits.model_validate({"unreadableCode": "unjudged"})):
        assert rule_matches(deny, "Bash", {"command": command}, "/w", kind="deny")
        assert not rule_matches(allow, "Bash", {"command": command}, "/w", kind="allow")
        assert compiled.first_match("Bash", {"command": command}, "/w") == "Bash(rm -rf /)"
        plain = "python3 -c 'print(1)'"  # code that can be read is judged on what it does
        assert not rule_matches(deny, "Bash", {"command": plain}, "/w", kind="deny")
        assert compiled.first_match("Bash", {"command": plain}, "/w") is None


def test_scripts_past_the_budget_of_a_command_cannot_be_read() -> None:
    script = "ls; " * (SCRIPT_CHARS // 4 + 1)
    (cmd,) = parse_commands(f"sh -c '{script}'")  # type: ignore[misc]
    assert read_command(cmd).commands[-1] == UNREADABLE
    assert read_command(cmd).limited
    budget = ScriptBudget(SCRIPT_CHARS * 2)
    assert UNREADABLE not in read_command(cmd, None, budget).commands


def test_a_read_cut_short_by_its_command_is_not_kept_for_another() -> None:
    allow = parse_rule("Bash(*ls*)")
    small = "sh -c 'ls'"
    big = "sh -c '" + "ls; " * (SCRIPT_CHARS // 4 + 1) + "'; " + small
    assert rule_matches(parse_rule("Bash(rm -rf /)"), "Bash", {"command": big}, "/w", kind="deny")  # unreadable
    assert not rule_matches(allow, "Bash", {"command": big}, "/w", kind="allow")
    assert rule_matches(allow, "Bash", {"command": small}, "/w", kind="allow")  # read in full on its own


def test_a_chain_of_wrappers_is_read_within_a_multiple_of_its_length() -> None:
    (cmd,) = parse_commands("sudo " * 500 + "rm -rf /")  # type: ignore[misc]
    found = read_command(cmd).commands
    assert found[-1] == UNREADABLE
    assert sum(len(reading.text) for reading in found) <= 5 * len(cmd.text) + 512


XARGS_RULES = (
    "Bash(git push *)",
    "Bash(rm -rf /)",
    "Bash(cat *.env)",
    "Bash(rm *--no-preserve-root*)",
    "Bash(find * -delete*)",
    "Bash(rm -rf *)",
    "Bash(sudo *)",
    "Bash(a * b * c * d)",  # three stars: tried on its own
)


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("echo / | xargs rm -rf", "Bash(rm -rf /)"),  # what xargs reads completes the command
        ("echo / | xargs -0 rm -r -f", "Bash(rm -rf /)"),
        ("xargs cat", None),  # `*.env` names a file: only a word that shows it meets it
        ("xargs cat x.env", "Bash(cat *.env)"),
        ("xargs rm -f x", "Bash(rm *--no-preserve-root*)"),  # an option: what xargs reads may be it
        ("xargs rm -f -- x", None),  # past `--`, what xargs reads is no option
        ("xargs find . -name foo", "Bash(find * -delete*)"),
        ("xargs git push", "Bash(git push *)"),
        ("xargs a 1 b 2 c", "Bash(a * b * c * d)"),
        ("echo ok | xargs rm -- -rf", None),  # the file -rf: no reading starts rm -rf
        ("echo ok | xargs busybox rm -f /tmp/test", None),  # it reads what echo feeds it: ok
        ("cat list | xargs busybox rm -f /tmp/test", "Bash(rm *--no-preserve-root*)"),  # it may read an option
        ("xargs git status", None),
        ("xargs grep x", None),
    ],
)
@pytest.mark.parametrize("verdict", ["deny", "ask"])
def test_what_xargs_reads_completes_the_command(command: str, rule: str | None, verdict: RuleKind) -> None:
    deny, ask = (XARGS_RULES, ()) if verdict == "deny" else ((), XARGS_RULES)
    (compiled,) = compile_lists(deny, ask, ())
    tool_input = {"command": command}
    matching = (text for text in XARGS_RULES if rule_matches(parse_rule(text), "Bash", tool_input, "/w", kind=verdict))
    one_by_one = next(matching, None)
    assert one_by_one == rule
    assert compiled.first_match("Bash", {"command": command}, "/w") == rule


@pytest.mark.parametrize(
    ("rule", "command", "allowed"),
    [
        ("Bash(grep *)", "xargs grep x", True),  # every completion matches
        ("Bash(cat *)", "git ls-files | xargs cat", False),  # git ls-files is not allowed
        ("Bash(cat *)", "xargs -0 cat", False),  # xargs with options: Claude Code's own reading is no cat
        ("Bash(cat a)", "xargs cat a", False),  # what xargs adds is not allowed
        ("Bash(rm -rf /)", "xargs rm -rf /", False),
    ],
)
def test_an_allow_rule_covers_what_xargs_adds(rule: str, command: str, allowed: bool) -> None:
    assert rule_matches(parse_rule(rule), "Bash", {"command": command}, "/w", kind="allow") is allowed
