"""A subcommand's *readings*: every command it runs, as bash and the programs it starts read it.

Claude Code matches a rule against a subcommand as written. Bash runs more than that text shows:
``sudo -u root rm -rf /`` runs ``rm``, ``sh -c 'rm -rf /'`` runs the script it is given. The first
reading of a subcommand is itself; from each reading follow, in turn:

* the program a path names read as its name: ``/bin/rm`` and ``./rm`` are ``rm``;
* the command a wrapper runs: ``env``, ``sudo``, ``doas``, ``busybox``, ``exec``, ``nice``,
  ``ionice``, ``setsid``, ``flock``, ``chroot``, ``timeout``, ``nohup``, ``stdbuf``, ``unbuffer``,
  ``caffeinate``, ``systemd-run``, ``strace``, ``taskset`` ... with their options;
* ``git`` without its global options: ``git -C repo -c k=v reset --hard`` is ``git reset --hard``;
* the script a shell runs, parsed and read in turn: ``sh -c``, ``bash -lc``, ``su -c``,
  ``script -c``, ``flock -c``, ``runuser -c``, ``watch``, ``ssh HOST CMD``, and a here-document
  or here-string fed to a shell (``sh <<EOF``, ``bash <<< "..."``); ``env -S`` splits its string;
* the command ``xargs`` and ``parallel`` run, ending in :data:`STDIN_ARGS` for the arguments
  they read at run time (with ``xargs -I R`` they stand where ``R`` does, an expansion;
  ``parallel``'s ``:::`` arguments go in its ``{}`` or after it), and ``find -exec``/
  ``-execdir``/``-ok`` run with ``{}`` read as each of find's start paths; ``find -delete``
  reads as ``rm -rf`` of those paths;
* what an interpreter one-liner or a script fed to an interpreter does to files and which
  commands it runs (:mod:`bus.rules.codereadings`).

The work is bounded: at most :data:`MAX_READINGS` readings per subcommand and scripts read
:data:`MAX_SCRIPT_DEPTH` deep; past either, or when a script cannot be parsed or is itself an
expansion, the reading is :data:`UNREADABLE` (a program known only at run time: every deny and
ask rule meets it, no allow rule does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from bus.rules.bashsplit import SimpleCommand, Word, parse_commands
from bus.rules.codereadings import INTERPRETERS, CodeReading, read_code
from bus.rules.heredocs import fed_texts

#: The most readings one subcommand has before it cannot be judged.
MAX_READINGS: Final = 256
#: How many scripts deep (``sh -c "bash -c '...'"``) readings are followed.
MAX_SCRIPT_DEPTH: Final = 3
#: Characters of scripts (``sh -c``, here-documents, at any depth) parsed for one command: past
#: them a script cannot be read (:class:`ScriptBudget`).
SCRIPT_CHARS: Final = 32 * 1024
#: What a command runs when that cannot be told: its program is known only at run time.
UNREADABLE: Final = SimpleCommand((Word("<unreadable>", "<unreadable>", True),))

_SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "rbash", "pdksh", "fish"})
#: Shell options that take a value (``bash -o pipefail -c ...``).
_SHELL_VALUES: Final = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

#: Wrappers: options taking a value, and how many operands come before the command.
_WRAPPERS: Final[dict[str, tuple[frozenset[str], int]]] = {
    name: (frozenset(values.split()), positionals)
    for name, values, positionals in (
        ("env", "-u --unset -C --chdir -P", 0),
        (
            "sudo",
            "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir -r --role -t --type "
            "-U --other-user -T --command-timeout -R --chroot",
            0,
        ),
        ("doas", "-u -C", 0),
        ("busybox", "", 0),
        ("exec", "-a", 0),
        ("nice", "-n --adjustment", 0),
        ("ionice", "-c --class -n --classdata -p --pid -P --pgid -u --uid", 0),
        ("setsid", "", 0),
        ("flock", "-w --wait --timeout -E --conflict-exit-code", 1),
        ("chroot", "--userspec --groups --skip-chdir", 1),
        ("timeout", "-s --signal -k --kill-after", 1),
        ("time", "-f --format -o --output", 0),
        ("nohup", "", 0),
        ("stdbuf", "-i --input -o --output -e --error", 0),
        ("unbuffer", "", 0),
        ("caffeinate", "-w -t", 0),
        (
            "systemd-run",
            "-u --unit -p --property -E --setenv -M --machine -H --host --uid --gid --nice "
            "--working-directory --description --slice -D",
            0,
        ),
        ("strace", "-o -e -p -s -u -E -a -I -O -S -X -P -b", 0),
        ("ltrace", "-o -e -p -s -u -a -n", 0),
        ("taskset", "", 1),
        ("chrt", "", 1),
        ("numactl", "-C -m -N -i -p --physcpubind --membind --cpunodebind --interleave --preferred", 0),
        ("nsenter", "-t --target -S --setuid -G --setgid", 0),
        ("unshare", "", 0),
        ("firejail", "", 0),
        ("proxychains", "-f", 0),
        ("proxychains4", "-f", 0),
        ("torsocks", "-u -p -a -P", 0),
        ("runuser", "-u --user -g --group -G --supp-group -s --shell", 0),
        ("pkexec", "--user", 0),
        ("command", "", 0),
        ("builtin", "", 0),
        ("noglob", "", 0),
        ("catchsegv", "", 0),
        ("valgrind", "", 0),
        ("rlwrap", "", 0),
        ("fakeroot", "", 0),
        ("sg", "", 1),
    )
}
#: Wrappers whose option ``-c`` (``su``: also ``--command``) gives a script a shell runs.
_SCRIPT_OPTION: Final = frozenset({"su", "script", "flock", "runuser", "sg"})
_XARGS_VALUES: Final = frozenset(
    "-I -J -R -S -L -l -n -P -s -d -E -a --arg-file --delimiter --max-args --max-lines --max-procs --max-chars --eof "
    "--replace --process-slot-var".split()
)
_PARALLEL_VALUES: Final = frozenset(
    "-j --jobs -P -S --sshlogin -N -n -L --delay --joblog --results --tmpdir --timeout --retries -I -X --colsep "
    "--sshloginfile --workdir --env --halt".split()
)
_GIT_VALUES: Final = frozenset(
    "-C -c --git-dir --work-tree --namespace --super-prefix --config-env --exec-path --list-cmds".split()
)
#: What ``xargs`` and ``parallel`` add: the arguments they read, known only at run time.
STDIN_ARGS: Final = Word("<stdin>", "<stdin>", True)
_FIND_EXEC: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
#: find's tests and actions that take a value (the value is no action: ``-name -delete``).
_FIND_VALUES: Final = frozenset(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -lname -ilname -type -xtype -perm -size "
    "-user -group -uid -gid -newer -anewer -cnewer -mtime -atime -ctime -mmin -amin -cmin -used -maxdepth "
    "-mindepth -inum -links -fstype -samefile -context -printf -fprint -fprint0 -fprintf -fls -regextype "
    "-newermt -newerat -newerct -newermm".split()
)
_WATCH_VALUES: Final = frozenset({"-n", "--interval", "-d", "--differences", "-q", "--equexit"})
_PYTHON: Final = re.compile(r"(?:python|pypy)[0-9.]*")
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class Readings:
    """What a subcommand runs: itself first, then every command read from it."""

    commands: tuple[SimpleCommand, ...]
    #: It runs interpreter code that could not be read (``exec(...)``, decoded strings...).
    opaque: bool = False
    #: A script was left unread for want of :class:`ScriptBudget` (so this holds for this
    #: command only: not to be kept for another).
    limited: bool = False


@dataclass(slots=True)
class ScriptBudget:
    """How many characters of scripts (``sh -c``, here-documents) are still to be parsed for the
    command being judged: reading a command's scripts costs at most a split of this many
    characters, however they are nested."""

    chars: int = SCRIPT_CHARS


def read_command(cmd: SimpleCommand, stdin: str | None = None, budget: ScriptBudget | None = None) -> Readings:
    """The readings of ``cmd``; ``stdin`` is what a here-document or here-string feeds it
    (:func:`bus.rules.heredocs.fed_texts`; without it a shell reading its input runs what
    cannot be read); its scripts are parsed within ``budget`` (past it they cannot be read)."""
    budget = ScriptBudget() if budget is None else budget
    found: list[SimpleCommand] = [cmd]
    seen = {cmd.words}
    queue: list[tuple[SimpleCommand, int, str | None]] = [(cmd, 0, stdin)]
    opaque = False
    #: The readings' text stays within a multiple of the command's (``sudo sudo sudo ... rm``).
    chars_left = 4 * (len(cmd.text) + len(stdin or "")) + 256
    for reading, depth, fed in queue:  # grows while it is read: breadth first
        for derived in _derive(reading.words, fed):
            more: list[tuple[SimpleCommand, int, str | None]]
            if isinstance(derived, CodeReading):
                opaque |= derived.opaque
                more = [(SimpleCommand(words), depth, None) for words in derived.commands]
                more += _scripts(derived.scripts, depth, budget)
            elif derived is None or isinstance(derived, str):
                more = _scripts((derived,), depth, budget)
            else:
                more = [(SimpleCommand(derived), depth, fed)]
            for item in more:
                if item[0].words in seen:
                    continue
                chars_left -= sum(len(word.raw) + 1 for word in item[0].words)
                if len(found) >= MAX_READINGS or chars_left < 0:
                    return Readings((*found, UNREADABLE), opaque, budget.chars < 0)
                seen.add(item[0].words)
                found.append(item[0])
                queue.append(item)
    return Readings(tuple(found), opaque, budget.chars < 0)


def _scripts(
    scripts: tuple[str | None, ...], depth: int, budget: ScriptBudget
) -> list[tuple[SimpleCommand, int, str | None]]:
    """The commands of each script a shell runs (``None``: one known only at run time)."""
    found: list[tuple[SimpleCommand, int, str | None]] = []
    for script in scripts:
        commands = None
        if script is not None and depth < MAX_SCRIPT_DEPTH:
            if len(script) > budget.chars:
                budget.chars = -1  # past the budget: unread, and the answer is this command's only
            else:
                budget.chars -= len(script)
                commands = parse_commands(script)
        if commands is None:
            found.append((UNREADABLE, depth + 1, None))
            continue
        fed = fed_texts(script, commands)  # type: ignore[arg-type]
        found.extend((command, depth + 1, text) for command, text in zip(commands, fed, strict=True))
    return found


Derived = tuple[Word, ...] | str | None | CodeReading


def _derive(words: tuple[Word, ...], stdin: str | None) -> list[Derived]:
    """The readings that follow from one reading: its words, a script (``None``: unknowable) or code."""
    head = words[0]
    if head.dynamic:
        return []
    name = head.value
    if "/" in name:
        base = name.rsplit("/", 1)[1]
        return [(Word(base, base), *words[1:])] if base else []
    if name in _SHELLS:
        return _shell(words, stdin)
    if name in INTERPRETERS or _PYTHON.fullmatch(name):
        return [read_code(words, stdin)]
    if name == "git":
        return _git(words)
    if name == "xargs":
        return _xargs(words)
    if name == "parallel":
        return _parallel(words)
    if name == "find":
        return _find(words)
    if name == "watch":
        return _watch(words)
    if name == "eval":  # the parser reads eval's argument: only its stdin-less form is left
        return []
    if name == "env":
        return _env(words)
    if name in ("ssh", "dbclient"):
        return _ssh(words)
    script = _script_option(words) if name in _SCRIPT_OPTION else None
    if script is not None:
        return [script[0]]
    if name == "command" and any(w.value in ("-v", "-V") for w in words[1:2]):
        return []  # says what the name is, runs nothing
    if name in _WRAPPERS:
        inner = _after_options(words, *_WRAPPERS[name], assignments=name in ("env", "sudo", "doas"))
        return [inner] if inner else []
    return []


def _after_options(
    words: tuple[Word, ...], values: frozenset[str], positionals: int, *, assignments: bool = False, start: int = 1
) -> tuple[Word, ...]:
    """The words after a program's options (``values``: those taking the next word) and its
    first ``positionals`` operands: the command it runs; empty when there is none."""
    i, n = start, len(words)
    while i < n and words[i].value.startswith("-") and words[i].value != "-":
        flag = words[i].value
        i += 1
        if flag == "--":
            break
        if flag in values:
            i += 1
    while assignments and i < n and _ASSIGNMENT.match(words[i].value):
        i += 1
    i += positionals
    return words[i:] if i < n else ()


def _env(words: tuple[Word, ...]) -> list[Derived]:
    """``env [-i|-] [-u NAME] [-S STRING] [NAME=VALUE]... COMMAND``: ``-S`` splits its string
    into more words (``env -S 'rm -rf' /``)."""
    for k, word in enumerate(words[1:], start=1):
        value = word.value
        if not value.startswith("-") or value == "--":
            break
        split = value[2:] if value.startswith("-S") and len(value) > 2 else None
        if value.startswith("--split-string="):
            split = value.partition("=")[2]
        if split is None and value in ("-S", "--split-string") and k + 1 < len(words):
            split, word = words[k + 1].value, words[k + 1]
            k += 1
        if split is not None:
            if word.dynamic:
                return [None]
            return [(words[0], *(Word(w, w) for w in split.split()), *words[k + 1 :])]
    dashless = tuple(w for w in words if w.value != "-")  # ``env -`` is ``env -i``
    inner = _after_options(dashless, *_WRAPPERS["env"], assignments=True)
    return [inner] if inner else []


_SSH_VALUES: Final = frozenset("-B -b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w".split())


def _ssh(words: tuple[Word, ...]) -> list[Derived]:
    """``ssh [options] HOST COMMAND...``: the remote shell runs the words joined."""
    i, n = 1, len(words)
    while i < n and words[i].value.startswith("-"):
        flag = words[i].value
        i += 2 if flag in _SSH_VALUES else 1
        if flag == "--":
            break
    rest = words[i + 1 :]
    if not rest:
        return []
    return [None if any(w.dynamic for w in rest) else " ".join(w.value for w in rest)]


def _script_option(words: tuple[Word, ...]) -> tuple[str | None] | None:
    """The script of ``su -c CMD``, ``script -c CMD``, ``env -S STRING``...; ``None`` without one."""
    for i, word in enumerate(words[1:-1], start=1):
        value = word.value
        if value in ("-c", "--command") or (
            value.startswith("-") and not value.startswith("--") and value.endswith("c") and words[0].value == "su"
        ):
            script = words[i + 1]
            return (None if script.dynamic else script.value,)
        for prefix in ("--command=",):
            if value.startswith(prefix) and len(value) > len(prefix):
                return (None if word.dynamic else value[len(prefix) :],)
    return None


def _shell(words: tuple[Word, ...], stdin: str | None) -> list[Derived]:
    """``sh -c SCRIPT``, ``bash -lc SCRIPT``; ``sh``, ``sh -s`` or ``sh -`` run what comes on
    standard input (a here-document's script, else one known only at run time)."""
    i, n, command, from_stdin = 1, len(words), False, False
    while i < n and words[i].value[:1] in "-+" and words[i].value not in ("-", "--"):
        flag = words[i].value
        i += 1
        if flag in _SHELL_VALUES:
            i += 1
        elif not flag.startswith("--"):
            command |= "c" in flag[1:]
            from_stdin |= "s" in flag[1:]
    if command:
        return [None if words[i].dynamic else words[i].value] if i < n else []
    if i < n and words[i].value == "--":
        i += 1
    if i < n and words[i].value != "-" and not from_stdin:
        return []  # a script file: what it holds is not in the command
    if any(word.value in ("--version", "--help", "-n") for word in words[1:i]):
        return []  # says something about itself, or reads without running
    return [stdin]


def _git(words: tuple[Word, ...]) -> list[Derived]:
    i, n = 1, len(words)
    while i < n and words[i].value.startswith("-"):
        i += 2 if words[i].value in _GIT_VALUES else 1
    return [(words[0], *words[i:])] if 1 < i < n else []


def _xargs(words: tuple[Word, ...]) -> list[Derived]:
    """``xargs [options] COMMAND``: the arguments it reads end the command, or, with ``-I R``
    (``-i``, ``--replace``), stand where ``R`` does."""
    i, n = 1, len(words)
    replace: str | None = None
    while i < n and words[i].value.startswith("-") and words[i].value != "-":
        flag = words[i].value
        if flag in ("-I", "-J") and i + 1 < n:
            replace = words[i + 1].value
        elif flag.startswith(("-I", "-J")) or flag.startswith("--replace="):
            replace = flag[2:] if flag[1] != "-" else flag.partition("=")[2]
        elif flag in ("-i", "--replace"):
            replace = "{}"
        elif flag.startswith("-i"):
            replace = flag[2:]
        i += 2 if flag in _XARGS_VALUES else 1
        if flag == "--":
            break
    if i >= n:
        return []
    if not replace:
        return [(*words[i:], STDIN_ARGS)]
    return [tuple(Word(w.raw, w.value, True) if replace in w.value else w for w in words[i:])]


def _parallel(words: tuple[Word, ...]) -> list[Derived]:
    i, n = 1, len(words)
    while i < n and words[i].value.startswith("-"):
        i += 2 if words[i].value in _PARALLEL_VALUES else 1
    separators = [k for k in range(i, n) if words[k].value.startswith(":::")]
    end = separators[0] if separators else n
    if end <= i and not separators:
        return []
    command = words[i:end]
    if not command:  # ``parallel ::: 'rm -rf /'``: each argument is a command line
        return [None if w.dynamic else w.value for w in words[end:][:MAX_READINGS] if not w.value.startswith(":::")]
    args = [w for w in words[end:] if not w.value.startswith(":::")][:MAX_READINGS] if separators else [STDIN_ARGS]
    if not any(w.value == "{}" for w in command):
        return [(*command, *args)]
    return [tuple(arg if w.value == "{}" else w for w in command) for arg in args] or [command]


def _find(words: tuple[Word, ...]) -> list[Derived]:
    i, n = 1, len(words)
    while i < n and (words[i].value in ("-H", "-L", "-P", "-D") or words[i].value.startswith("-O")):
        i += 2 if words[i].value == "-D" else 1
    first = i
    while i < n and not words[i].value.startswith(("-", "(", "!")):
        i += 1
    starts = list(words[first:i]) or [Word(".", ".")]
    derived: list[Derived] = []
    while i < n:
        flag = words[i].value
        i += 1
        if len(derived) >= MAX_READINGS:
            break  # the readings stop there anyway
        if flag in _FIND_VALUES:
            i += 1  # ``-name -delete`` names a file
        elif flag == "-delete":
            derived.extend((Word("rm", "rm"), Word("-rf", "-rf"), start) for start in starts[:MAX_READINGS])
        elif flag in _FIND_EXEC:
            end = i
            while end < n and words[end].value not in (";", "+"):
                end += 1
            inner = words[i:end]
            for start in starts[: MAX_READINGS if inner else 0]:
                derived.append(tuple(start if w.value == "{}" else w for w in inner))
            i = end + 1
    return derived


def _watch(words: tuple[Word, ...]) -> list[Derived]:
    i, n, exec_form = 1, len(words), False
    while i < n and words[i].value.startswith("-"):
        flag = words[i].value
        exec_form |= flag in ("-x", "--exec")
        i += 2 if flag in _WATCH_VALUES else 1
    if i >= n:
        return []
    if exec_form:
        return [words[i:]]
    rest = words[i:]
    return [None if any(w.dynamic for w in rest) else " ".join(w.value for w in rest)]


#: Programs whose short flags are read merged and long flags as their short form: the long
#: options with a short form, and the flags a canonical spelling puts first (``rm -rf``).
_FLAGS: Final[dict[str, tuple[dict[str, str], str]]] = {
    "rm": ({"--recursive": "r", "--force": "f", "--dir": "d", "--verbose": "v", "-R": "r"}, "rf"),
    "cp": ({"--recursive": "r", "--force": "f", "-R": "r"}, "rf"),
    "mv": ({"--force": "f"}, "f"),
    "rmdir": ({"--parents": "p"}, "p"),
    "chmod": ({"--recursive": "R"}, "R"),
    "chown": ({"--recursive": "R"}, "R"),
    "chgrp": ({"--recursive": "R"}, "R"),
    "git clean": ({"--force": "f", "--dry-run": "n", "--quiet": "q"}, "f"),
    "git branch": ({"--delete": "d", "--force": "f"}, "D"),
}
#: git subcommands whose short flags have a long form the rules are written with.
#: Their short flags' long forms, and the short options that take a value (``-bNAME``).
_GIT_LONG: Final = {
    "push": ({"f": "--force", "d": "--delete"}, "o"),
    "checkout": ({"f": "--force"}, "bB"),
    "switch": ({"f": "--force"}, "cC"),
}


def spellings(words: tuple[Word, ...]) -> list[str]:
    """Other ways to write the same command, for rules written one way: flags merged and in a
    canonical order (``rm -r -f x``, ``rm -fR x``, ``rm --recursive --force x`` are ``rm -rf x``,
    and ``rm -rfv x`` is also ``rm -rf x``), git's short flags in their long form
    (``git push -f`` is ``git push --force``, as is a ``+branch`` refspec)."""
    if not words or words[0].dynamic:
        return []
    name = words[0].value
    start = 1
    if name == "git" and len(words) > 1:
        if words[1].value in _GIT_LONG:
            return _git_long(words)
        name, start = f"git {words[1].value}", 2
    table = _FLAGS.get(name)
    if table is None:
        return []
    longs, lead = table
    flags: list[str] = []
    kept: list[str] = []
    operands: list[str] = []
    done = False
    for word in words[start:]:
        value = word.value
        if done or not value.startswith("-") or value == "-" or word.dynamic:
            operands.append(word.raw if word.dynamic else value)
        elif value == "--":
            done = True
        elif value.startswith("--"):
            (flags if value in longs else kept).append(longs.get(value, value))
        else:
            flags.extend(longs.get("-" + letter, letter) for letter in value[1:])
    if not flags:
        return []
    if name == "git branch" and "d" in flags and "f" in flags:
        flags = [flag for flag in flags if flag not in "df"] + ["D"]
    present = "".join(letter for letter in lead if letter in flags)
    canonical = present + "".join(sorted(set(flags) - set(lead)))
    found = [" ".join((name, "-" + canonical, *kept, *operands))]
    if (present and present != canonical) or kept:
        found.append(" ".join((name, "-" + present, *operands)) if present else " ".join((name, *operands)))
    return found


def _git_long(words: tuple[Word, ...]) -> list[str]:
    longs, values = _GIT_LONG[words[1].value]
    added: list[str] = []
    rest: list[str] = []
    operands = False
    for word in words[2:]:
        value = word.value
        operands |= value == "--"
        if (
            value.startswith("-")
            and not value.startswith("--")
            and len(value) > 1
            and not word.dynamic
            and not operands
        ):
            cluster = value[1:]
            cut = next((k for k, letter in enumerate(cluster) if letter in values), len(cluster))
            added.extend(longs[letter] for letter in cluster[:cut] if letter in longs)  # then a value: -bNAME
            kept = "".join(letter for letter in cluster[:cut] if letter not in longs) + cluster[cut:]
            if kept:
                rest.append("-" + kept)
        else:
            rest.append(word.raw if word.dynamic else value)
            if words[1].value == "push" and value.startswith("+") and len(value) > 1:
                added.append("--force")
    if not added:
        return []
    return [" ".join(("git", words[1].value, *dict.fromkeys(added), *rest))]


__all__ = [
    "MAX_READINGS",
    "MAX_SCRIPT_DEPTH",
    "SCRIPT_CHARS",
    "STDIN_ARGS",
    "UNREADABLE",
    "Readings",
    "ScriptBudget",
    "read_command",
    "spellings",
]
