"""The commands a program runs for its caller, one reading at a time (:mod:`bus.rules.readings`).

:func:`derive` gives what follows from one reading: a path read as the program's name, the
command a wrapper (``sudo``, ``env``, ``nice``...) or ``xargs``/``parallel``/``find -exec``
runs, ``git`` without its global options, the script a shell (``sh -c``, ``su -c``, ``ssh``,
``watch``...) runs, and what interpreter code does (:mod:`bus.rules.codereadings`). Each is
read from the words in one pass.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Final

from bus.rules.codereadings import INTERPRETERS, CodeReading, read_code
from bus.rules.shellwords import Word

#: The most commands one program is read to run (``find`` with many paths and ``-exec``s).
MAX_DERIVED: Final = 256
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
#: ``xargs`` options that change neither how its input is split nor into how many commands.
_XARGS_PLAIN: Final = frozenset("-r --no-run-if-empty -t --verbose -x --exit -p --interactive -o --open-tty --".split())
#: Input ``xargs`` splits only at blanks: printable ASCII but its quotes and backslash, spaces, newlines.
_XARGS_INPUT: Final = re.compile(r"[\x21\x23-\x26\x28-\x5b\x5d-\x7e \n]*")
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


#: What follows from a reading: the words of a command it runs, a script a shell runs (``None``:
#: one known only at run time), or what interpreter code does.
Derived = tuple[Word, ...] | str | None | CodeReading


def derive(words: tuple[Word, ...], stdin: str | None) -> list[Derived]:
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
        return _xargs(words, stdin)
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
    if command and i < n and words[i].value == "--":
        i += 1
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


def _xargs(words: tuple[Word, ...], stdin: str | None) -> list[Derived]:
    """``xargs [options] COMMAND``: the arguments it reads end the command, or, with ``-I R``
    (``-i``, ``--replace``), stand where ``R`` does. They are known when what it reads is known
    (``stdin``: ``echo / | xargs rm -rf``), plain, and split the default way (no option that
    changes how or how many)."""
    i, n = 1, len(words)
    replace: str | None = None
    plain = True
    while i < n and words[i].value.startswith("-") and words[i].value != "-":
        flag = words[i].value
        plain = plain and flag in _XARGS_PLAIN
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
        known = _read_args(stdin) if plain else None
        return [(*words[i:], *known) if known is not None else (*words[i:], STDIN_ARGS)]
    return [tuple(Word(w.raw, w.value, True) if replace in w.value else w for w in words[i:])]


def _read_args(stdin: str | None) -> list[Word] | None:
    """The arguments ``xargs`` reads from ``stdin`` split at blanks, when they hold nothing its
    quoting reads (quotes, backslashes) and no character other than printable ASCII."""
    if stdin is None or not _XARGS_INPUT.fullmatch(stdin):
        return None
    return [Word(arg, arg) for arg in stdin.split()][:MAX_DERIVED]


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
        return [None if w.dynamic else w.value for w in words[end:][:MAX_DERIVED] if not w.value.startswith(":::")]
    args = [w for w in words[end:] if not w.value.startswith(":::")][:MAX_DERIVED] if separators else [STDIN_ARGS]
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
    starts = _found(list(words[first:i]) or [Word(".", ".")], words[i:])
    derived: list[Derived] = []
    while i < n:
        flag = words[i].value
        i += 1
        if len(derived) >= MAX_DERIVED:
            break  # the readings stop there anyway
        if flag in _FIND_VALUES:
            i += 1  # ``-name -delete`` names a file
        elif flag == "-delete":
            derived.extend((Word("rm", "rm"), Word("-rf", "-rf"), start) for start in starts[:MAX_DERIVED])
        elif flag in _FIND_EXEC:
            end = i
            while end < n and words[end].value not in (";", "+"):
                end += 1
            inner = words[i:end]
            for start in starts[: MAX_DERIVED if inner else 0]:
                derived.append(tuple(start if w.value == "{}" else w for w in inner))
            i = end + 1
    return derived


#: find operators after which a test no longer decides alone what is listed.
_FIND_OPERATORS: Final = frozenset({"-o", "-or", "!", "-not", ",", "(", ")"})


def _found(starts: list[Word], expression: tuple[Word, ...]) -> list[Word]:
    """What ``{}`` and ``-delete`` stand for: each start path, or, for a path in the working
    directory (relative, no ``..``) whose own name a ``-name``/``-iname`` test before the first
    action excludes, with no operator (``-o``, ``!``...) that could let it in, a path under it
    with that name (``find . -name build -delete`` deletes ``./build``s, not ``.``)."""
    name: str | None = None
    fold = False
    for k, word in enumerate(expression):
        if word.value in _FIND_OPERATORS or word.dynamic or word.value in _FIND_EXEC or word.value == "-delete":
            name = name if word.value in _FIND_EXEC or word.value == "-delete" else None
            break
        if word.value in ("-name", "-iname") and name is None and k + 1 < len(expression):
            if expression[k + 1].dynamic:
                return starts
            name, fold = expression[k + 1].value, word.value == "-iname"
    if not name or "/" in name:
        return starts
    found = []
    for start in starts:
        path = start.value
        inside = not start.dynamic and not path.startswith(("/", "~")) and ".." not in path.split("/")
        base = path.rstrip("/").rsplit("/", 1)[-1] or path
        if inside and not fnmatch.fnmatchcase(base.lower() if fold else base, name.lower() if fold else name):
            under = path.rstrip("/") + "/" + name
            found.append(Word(under, under))
        else:
            found.append(start)
    return found


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


__all__ = ["MAX_DERIVED", "STDIN_ARGS", "Derived", "derive"]
