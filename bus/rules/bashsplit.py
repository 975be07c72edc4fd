"""Split a shell command line into the simple commands a permission rule is checked against.

Claude Code checks a ``Bash(...)`` / ``PowerShell(...)`` rule against every subcommand of a
compound command: the parts between ``&&``, ``||``, ``;``, ``|``, ``|&``, ``&`` and newlines,
plus the commands inside ``$(...)``, backticks, ``<(...)``/``>(...)`` and ``( ... )`` subshells.
Its small, dependency-free tokenizer (:mod:`bus.rules.shellparser`) does exactly that: it respects
single and double quotes, backslash escapes, line continuations, comments and here-documents, drops
leading ``VAR=value`` assignments and shell keywords (``if``, ``then``, ``do``, ``{`` ...), and
records whether a command contains run-time expansions (``$VAR``, ``$(...)``, backticks) that
make its final text unknowable before it runs.

It is not a shell: anything it cannot read with confidence (an unterminated quote or
substitution, a stray ``)``, a dangling backslash) makes :func:`parse_commands` return ``None``:
the command cannot be judged (deny and ask rules match it, allow rules never do). With
``powershell=True`` the backtick is the escape character, ``&`` alone is the call operator and
``@(...)`` is a subexpression.

The command comes from the agent, so the work is linear in its length: runs of ordinary
characters are taken with one regex step each, nothing is sliced or rescanned in a loop, and a
parser given a ``deadline`` gives up (``None``, as for anything unreadable) once it passes.
Callers that judge one event can :func:`prepare` its command (split off the event loop, or
refused as too long) so that every later :func:`parse_commands` of that event returns the
same answer without splitting it again.
"""

from __future__ import annotations

import contextvars
import functools
import re
import time
from typing import Final

from bus.rules.shellparser import READ_FURTHER, OutOfTime, SimpleCommand, Unparsable, Word, _Parser
from bus.rules.shellwords import finalize
from bus.rules.simplelist import split_simple

#: Wrappers Claude Code strips before matching: name -> (options taking a value, positionals).
_WRAPPERS: Final[dict[str, tuple[frozenset[str], int]]] = {
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "exec": (frozenset({"-a"}), 0),
    **dict.fromkeys(("nohup", "command", "builtin", "noglob", "xargs"), (frozenset[str](), 0)),
}


#: Commands made only of these characters have no quotes, expansions, operators or globs.
_PLAIN: Final = re.compile(r"[A-Za-z0-9_./:,@%+=\- \t-]*")


#: Commands longer than this are parsed every time, never cached: a heredoc writing a file can
#: be megabytes, and the caches keyed by commands must stay small whatever the agents send.
CACHED_COMMAND_CHARS: Final = 4096


#: A command's commands, or why it cannot be judged.
Judged = tuple[SimpleCommand, ...] | str
Prepared = dict[tuple[str, bool], Judged]
#: The commands judged ahead for the event being evaluated (see :func:`prepare`), by ``(command, powershell)``.
_PREPARED: Final[contextvars.ContextVar[Prepared | None]] = contextvars.ContextVar("hookbus_prepared", default=None)


def parse_commands(command: str, *, powershell: bool = False) -> tuple[SimpleCommand, ...] | None:
    """Every simple command in ``command`` (nested ones after their parent); ``None`` if unparsable."""
    prepared = _PREPARED.get()
    if prepared is not None and (found := prepared.get((command, powershell))) is not None:
        return None if isinstance(found, str) else found
    if len(command) > CACHED_COMMAND_CHARS:
        return _parse(command, powershell)
    return _parse_cached(command, powershell)


def _parse(command: str, powershell: bool, deadline: float | None = None) -> tuple[SimpleCommand, ...] | None:
    if not powershell and _PLAIN.fullmatch(command):  # the common case, ten times cheaper
        command_ = finalize([Word(w, w) for w in command.split()], False)
        if command_ is None:
            return ()
        if command_.words[0].value not in READ_FURTHER:
            return (command_,)
    elif not powershell and (simple := split_simple(command)) is not None:  # words and list operators
        return simple
    try:
        return tuple(_Parser(command, powershell, deadline=deadline).parse(None))
    except (Unparsable, RecursionError):
        return None


#: Fleets repeat the same commands all day (``git status``, ``npm test``): each distinct one is
#: split once while it stays among the most recent ``SPLIT_CACHE_SIZE``.
SPLIT_CACHE_SIZE: Final = 2048
_parse_cached = functools.lru_cache(maxsize=SPLIT_CACHE_SIZE)(_parse)


def split_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the split cache (commands up to ``CACHED_COMMAND_CHARS``)."""
    return _parse_cached.cache_info()


def split_within(command: str, powershell: bool, budget_s: float | None) -> Judged:
    """``command`` split, or why it cannot be judged: unreadable, or not done within ``budget_s``."""
    deadline = None if budget_s is None else time.perf_counter() + budget_s
    try:
        return tuple(_Parser(command, powershell, deadline=deadline).parse(None))
    except OutOfTime:
        return f"the command could not be split within {budget_s:g} s"
    except Unparsable as exc:
        return f"the command cannot be split ({exc})"
    except RecursionError:
        return "the command cannot be split (nested too deep)"


def unsplit_reason(command: str, powershell: bool = False) -> str:
    """Why ``command``, which :func:`parse_commands` could not split, cannot be split."""
    found = split_within(command, powershell, None)
    return found if isinstance(found, str) else "the command cannot be split"


def prepare(judged: Prepared) -> contextvars.Token[Prepared | None]:
    """Judge these commands this way in the current context (an event's task): each maps to its
    commands, or to the reason it cannot be judged (then :func:`parse_commands` returns ``None``:
    deny and ask rules match it, allow rules never do). Returns the token to reset it with."""
    return _PREPARED.set(judged)


def unjudged(command: str, powershell: bool = False) -> str | None:
    """Why ``command`` cannot be judged in the current context, or ``None`` when it can."""
    prepared = _PREPARED.get()
    found = prepared.get((command, powershell)) if prepared is not None else None
    return found if isinstance(found, str) else None


def reset_prepared(token: contextvars.Token[Prepared | None]) -> None:
    """Undo :func:`prepare`."""
    _PREPARED.reset(token)


def split_bash(command: str) -> list[str] | None:
    """The subcommands of a Bash command line as normalised text; ``None`` when it can't be parsed.

    >>> split_bash("FOO=1 git add . && git commit -m 'x'; echo $(date)")
    ['git add .', "git commit -m 'x'", 'echo $(date)', 'date']
    """
    commands = parse_commands(command)
    return None if commands is None else [cmd.text for cmd in commands]


def strip_wrappers(words: tuple[Word, ...]) -> tuple[Word, ...]:
    """Remove the wrappers Claude Code looks through (``timeout 30``, ``nohup``, bare ``xargs`` ...)."""
    start, n = 0, len(words)  # one pass: the words are sliced once, at the end
    while start < n and words[start].raw in _WRAPPERS:
        name = words[start].raw
        takes_value, positionals = _WRAPPERS[name]
        i = start + 1
        while i < n and words[i].value.startswith("-") and words[i].value != "-":
            flag = words[i].value
            if name == "xargs" or (name == "command" and flag in ("-v", "-V")):
                return words[start:]
            i += 1
            if flag == "--":
                break
            if flag in takes_value:
                i += 1
        i += positionals
        if i >= n:
            return words[start:]
        start = i
    return words[start:] if start else words


__all__ = [
    "CACHED_COMMAND_CHARS",
    "SPLIT_CACHE_SIZE",
    "Judged",
    "OutOfTime",
    "Prepared",
    "SimpleCommand",
    "Unparsable",
    "Word",
    "parse_commands",
    "prepare",
    "reset_prepared",
    "split_bash",
    "split_cache_info",
    "split_within",
    "strip_wrappers",
    "unjudged",
    "unsplit_reason",
]
