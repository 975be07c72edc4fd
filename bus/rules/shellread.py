"""The read stage's last room: a shell command read once into what its rules are matched against.

:func:`read_shell` splits a ``Bash`` or ``PowerShell`` command (:mod:`bus.rules.bashsplit`),
reads each subcommand as every command it runs (its *readings*, :mod:`bus.rules.readings`:
itself, the command a wrapper or ``sh -c`` runs, ``/bin/rm`` as ``rm``, what a ``python -c``
one-liner does, ``$TMPDIR`` with its known values, :mod:`bus.rules.knownvars`...), and writes
each reading as the texts it is matched as: as written, unquoted, with the wrappers Claude Code
knows removed and with its flags in a canonical spelling (its *variants*), and, where words are
known only at run time, the text up to them. The answer, a :class:`ShellRead`, is plain data,
worked out once per command (and kept for the most recent commands): every rule of every list
and handler of the event is matched against it (:mod:`bus.rules.shellrules`,
:mod:`bus.policy.rulelists`) without reading the command again. When the command cannot be
judged (unparsable, past ``hookbus.limits``), the :class:`ShellRead` says why.
"""

from __future__ import annotations

import contextvars
import functools
import re
from dataclasses import dataclass
from typing import Final

from bus.rules import knownvars
from bus.rules.bashsplit import (
    CACHED_COMMAND_CHARS,
    SPLIT_CACHE_SIZE,
    SimpleCommand,
    Word,
    parse_commands,
    strip_wrappers,
    unjudged,
    unsplit_reason,
)
from bus.rules.heredocs import fed_texts
from bus.rules.launchers import derive
from bus.rules.readings import STDIN_ARGS, ScriptBudget, read_command
from bus.rules.spellings import as_meant, spellings

_PS_ALIASES: Final = {
    alias: cmdlet
    for cmdlet, aliases in {
        "get-childitem": "ls dir gci",
        "remove-item": "rm del erase rd rmdir ri",
        "copy-item": "cp copy cpi",
        "move-item": "mv move mi",
        "get-content": "cat gc type",
        "set-content": "sc",
        "new-item": "ni",
        "set-location": "cd chdir sl",
        "get-location": "pwd gl",
        "write-output": "echo write",
        "invoke-webrequest": "iwr curl wget",
        "invoke-restmethod": "irm",
        "invoke-expression": "iex",
        "start-process": "saps start",
        "stop-process": "kill spps",
    }.items()
    for alias in aliases.split()
}


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading and the texts it is matched as."""

    #: The reading's command (for the read stage: matching uses the fields below).
    command: SimpleCommand
    texts: frozenset[str]
    #: Run-time expansions make its final text unknowable (``$VAR``, ``$(...)``).
    dynamic: bool
    #: The names of its leading ``VAR=value`` assignments.
    assigned: tuple[str, ...]
    #: When the program gets more words at run time (``xargs CMD``: what it reads): the texts the
    #: command starts with, each ending in a space.
    starts: frozenset[str] = frozenset()
    #: With run-time expansions (``git log $BRANCH``): each text up to the word where its first
    #: expansion is (``"git log "``, ending in a space); a deny or ask pattern meets the reading
    #: when some text that starts so can match it (:meth:`bus.rules.shellrules.ShellPattern.extends`).
    dynamic_starts: frozenset[str] = frozenset()
    #: The program itself is an expansion (``$CMD -rf /``): every pattern meets it.
    dynamic_program: bool = False
    #: The words known only at run time stand after a ``--``: they are no options.
    operands: bool = False


@dataclass(frozen=True, slots=True)
class SubcommandRead:
    """A subcommand's readings."""

    readings: tuple[Reading, ...]
    opaque: bool


#: What is left of the scripts budget of the command being read (:func:`_reads`).
_BUDGET: Final[contextvars.ContextVar[ScriptBudget | None]] = contextvars.ContextVar("hookbus_scripts", default=None)


def _reads(command: str, commands: tuple[SimpleCommand, ...], powershell: bool) -> list[SubcommandRead]:
    """The readings of each subcommand of ``command``, their scripts parsed within one budget
    for the whole command (:data:`bus.rules.readings.SCRIPT_CHARS`)."""
    fed = _fed(command, commands, powershell)
    token = _BUDGET.set(ScriptBudget())
    try:
        reads = [_read(cmd, stdin, powershell) for cmd, stdin in zip(commands, fed, strict=True)]
    finally:
        _BUDGET.reset(token)
    if not powershell:
        for variable in knownvars.mentioned(command):
            reads = _known_values(variable, command, commands, reads)
    return reads


def _known_values(
    variable: knownvars.KnownVariable, command: str, commands: tuple[SimpleCommand, ...], reads: list[SubcommandRead]
) -> list[SubcommandRead]:
    """The readings that expand ``variable`` read with its known values instead, where the
    command cannot change it (:mod:`bus.rules.knownvars`)."""
    everywhere = knownvars.known(variable, command, commands, (r.command for read in reads for r in read.readings))
    if everywhere is False:
        return reads
    out = []
    for cmd, read in zip(commands, reads, strict=True):
        readings: list[Reading] = []
        for k, reading in enumerate(read.readings):
            mine = everywhere or (k == 0 and variable.name in cmd.assigned)
            found = knownvars.read_known(variable, reading.command) if mine and not reading.starts else None
            readings.extend([reading] if found is None else (_reading(c) for c in found))
        out.append(SubcommandRead(tuple(readings), read.opaque))
    return out


def _fed(command: str, commands: tuple[SimpleCommand, ...], powershell: bool) -> list[str | None]:
    """What a here-document, a here-string or a pipe from ``echo`` feeds each subcommand."""
    return [None] * len(commands) if powershell else fed_texts(command, commands)


class _Unkept(Exception):  # not an error: a read cut short by its command's budget, not to be cached
    def __init__(self, read: SubcommandRead) -> None:
        self.read = read


def _read(cmd: SimpleCommand, stdin: str | None, powershell: bool) -> SubcommandRead:
    """The readings of a subcommand (fed ``stdin`` by a here-document) and their variants,
    worked out once (one cut short by its command's budget is not kept)."""
    if stdin is None and not powershell:
        plain = plain_read(cmd)
        if plain is not None:
            return plain
    cache = _cached_read if len(cmd.text) + len(stdin or "") <= CACHED_COMMAND_CHARS else _long_reads
    try:
        return cache(cmd, stdin, powershell)
    except _Unkept as unkept:
        return unkept.read


def plain_read(cmd: SimpleCommand) -> SubcommandRead | None:
    """The short path for a subcommand that runs only itself: one whose program no reading
    derives from (no wrapper, shell, interpreter, ``xargs``, ``find``, path, ``git`` global
    option...) and whose words say what it does, fed nothing; ``None`` for any other. Its
    read is the general path's (:func:`bus.rules.readings.read_command` would find the
    subcommand alone), without the queue of readings and the cache's hashing of its words."""
    if as_meant(cmd.words) is not None or derive(cmd.words, None):
        return None
    return SubcommandRead((_reading(cmd),), False)


def _make_read(cmd: SimpleCommand, stdin: str | None, powershell: bool) -> SubcommandRead:
    if powershell:
        return SubcommandRead((_reading(cmd, powershell=True),), False)
    read = read_command(cmd, stdin, _BUDGET.get())
    found = SubcommandRead(tuple(_reading(reading) for reading in read.commands), read.opaque)
    if read.limited:
        raise _Unkept(found)
    return found


def _reading(command: SimpleCommand, *, powershell: bool = False) -> Reading:
    if powershell or command.words[-1] is not STDIN_ARGS:
        texts = _make_variants(command, powershell)
        if not command.dynamic:
            return Reading(command, texts, False, command.assigned)
        # PowerShell's patterns are matched in lower case (:func:`bus.rules.shellrules._shell_pattern`).
        starts = {_dynamic_start(text.lower() if powershell else text) for text in texts}
        operands = _after_options(command.words[: next(k for k, w in enumerate(command.words) if w.dynamic)])
        dynamic_starts = frozenset(starts - {""})
        return Reading(command, texts, True, command.assigned, frozenset(), dynamic_starts, "" in starts, operands)
    known = SimpleCommand(command.words[:-1], command.assigned)  # and what it reads, at run time
    texts = _make_variants(known, False)
    read_on = frozenset(text + " " for text in texts)
    return Reading(known, texts, known.dynamic, known.assigned, read_on, operands=_after_options(known.words))


def _after_options(words: tuple[Word, ...]) -> bool:
    """Whether the words that follow these stand after a ``--``, where options end."""
    return any(word.value == "--" and not word.dynamic for word in words[1:])


#: Where an expansion (or a pattern bash expands) can begin in a command's text.
_EXPANSION = re.compile(r"[$`*?\[{]|[<>]\(")


def _dynamic_start(text: str) -> str:
    """``text`` up to the word where its first expansion is, ending in a space; ``""`` when that
    is the program itself (or when no expansion shows in this form of the text: then only the
    program is known to be what it says)."""
    found = _EXPANSION.search(text)
    end = text.rfind(" ", 0, found.start()) if found is not None else text.find(" ")
    return text[: end + 1] if end >= 0 else ""


_cached_read = functools.lru_cache(maxsize=4096)(_make_read)
#: The few long subcommands in flight, kept apart so that they never push the common ones out.
_long_reads = functools.lru_cache(maxsize=64)(_make_read)


def _make_variants(cmd: SimpleCommand, powershell: bool) -> frozenset[str]:
    """The texts a reading is matched as: as written, unquoted, with wrappers removed, and its
    flags spelled canonically."""
    forms = [cmd]
    stripped = strip_wrappers(cmd.words)
    if stripped != cmd.words:
        forms.append(SimpleCommand(stripped))
    texts: set[str] = set()
    for form in forms:
        text = form.text
        texts.update((text, form.plain, " ".join(text.split())))
        if powershell:
            alias = _PS_ALIASES.get(form.words[0].value.lower())
            if alias is not None:
                texts.add(" ".join((alias, *(word.value for word in form.words[1:]))))
        else:
            texts.update(spellings(form.words))
    return frozenset(texts)


@dataclass(frozen=True, slots=True)
class ShellRead:
    """A command read once: what every shell pattern is matched against.

    ``subcommands`` holds each subcommand's readings (an allow pattern must match them all, one
    by one); the fields after it gather them for the whole command, so that a compiled list of
    ``deny``/``ask`` patterns costs one combined match per text whatever the number of its rules
    (:mod:`bus.policy.rulelists`). ``unjudged`` says why the command cannot be judged (then there
    is nothing else: every deny and ask pattern meets it, no allow pattern does).

    A deny or ask pattern matches the command when it matches one of ``texts``; or, when a reading's
    program is only known at run time (``dynamic_program``), always; or when some text that
    starts with one of ``starts`` can match it (a reading with run-time expansions, up to the
    word of its first one; ``xargs CMD``, whose words are still to come).
    """

    #: Each subcommand's readings.
    subcommands: tuple[SubcommandRead, ...] = ()
    #: Every text of every reading of every subcommand (its variants), sorted.
    texts: tuple[str, ...] = ()
    #: Some reading's program itself is an expansion (or cannot be read).
    dynamic_program: bool = False
    #: Some subcommand runs interpreter code that cannot be read (see
    #: :func:`bus.rules.shellrules.unreadable_code_unjudged`: then it meets every pattern).
    opaque: bool = False
    #: The texts the readings with run-time expansions or that get more words at run time start
    #: with (``rm -rf $DIR`` and ``xargs rm -rf`` both: ``"rm -rf "``), sorted; a pattern meets
    #: one when a text that starts so can match it (see :func:`bus.rules.shellrules.shell_start`).
    starts: tuple[str, ...] = ()
    #: The same, for the readings whose words known at run time stand after a ``--``: no
    #: pattern that needs an option there meets them.
    operand_starts: tuple[str, ...] = ()
    #: Why the command cannot be judged (unparsable, past ``hookbus.limits``), or ``None``.
    unjudged: str | None = None


def read_shell(command: str, powershell: bool = False) -> ShellRead:
    """``command`` read (see :class:`ShellRead`): once per command, kept for the most recent
    ones; a judgement made for the event (:func:`bus.rules.bashsplit.prepare`) comes first."""
    why = unjudged(command, powershell)
    if why is not None:
        return ShellRead(unjudged=why)
    return _reads_kept(command, powershell) if len(command) <= CACHED_COMMAND_CHARS else _long_kept(command, powershell)


def read_ahead(command: str, powershell: bool) -> None:
    """Read ``command`` now, so that matching it later finds it kept: called for a long command in
    the worker thread that split it, so that none of that work falls on the event loop."""
    read_shell(command, powershell)


def _read_shell(command: str, powershell: bool) -> ShellRead:
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return ShellRead(unjudged=unsplit_reason(command, powershell))
    texts: set[str] = set()
    starts: set[str] = set()
    operand_starts: set[str] = set()
    dynamic_program = opaque = False
    reads = _reads(command, commands, powershell)
    for read in reads:
        opaque |= read.opaque
        for found in read.readings:
            texts.update(found.texts)
            (operand_starts if found.operands else starts).update(found.starts | found.dynamic_starts)
            dynamic_program |= found.dynamic_program
    found_starts = tuple(sorted(starts)), tuple(sorted(operand_starts))
    return ShellRead(tuple(reads), tuple(sorted(texts)), dynamic_program, opaque, *found_starts)


#: Long commands' reads kept: each is worked out in the thread that split the command and
#: matched on the event loop soon after, so the room holds every long command a dispatcher has
#: in flight (each tenant has at most 9 in the judging threads).
LONG_READS: Final = 64
#: Every list of every rule handler on an event, and every ``if``, asks for the same command's
#: read: all but the first ask cost a lookup (commands up to ``CACHED_COMMAND_CHARS``; the few
#: longer ones in flight are kept apart, so that they never push the fleet's common commands out).
_reads_kept = functools.lru_cache(maxsize=SPLIT_CACHE_SIZE)(_read_shell)
_long_kept = functools.lru_cache(maxsize=LONG_READS)(_read_shell)


def texts_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the cache of commands read, the first a shell rule looks in (its
    misses go on to the split cache, :func:`bus.rules.bashsplit.split_cache_info`)."""
    return _reads_kept.cache_info()


__all__ = [
    "LONG_READS",
    "Reading",
    "ShellRead",
    "SubcommandRead",
    "read_ahead",
    "read_shell",
    "texts_cache_info",
]
