"""Bash and PowerShell patterns of permission rules (``Bash(git push *)``), matched against a
command's subcommands (see :mod:`bus.rules.permissions` for the rules' semantics).

Each subcommand is read as every command it runs (its *readings*, :mod:`bus.rules.readings`:
itself, the command a wrapper or ``sh -c`` runs, ``/bin/rm`` as ``rm``, what a ``python -c``
one-liner does...), and each reading is matched as written, unquoted, with the wrappers Claude
Code knows removed and with its flags in a canonical spelling (its *variants*). A ``deny``,
``ask`` or ``if`` pattern matches when it matches a variant of any reading; an ``allow`` pattern
only when it matches a variant of every reading. A reading with run-time expansions also
matches a pattern more specific than a command name whose first word matches its program.
:class:`ShellView` gathers all of that for a whole command in one pass (the readings of a
subcommand are worked out once and cached with it), so that a compiled list of patterns costs
one combined match per text (:mod:`bus.policy.rulelists`).
"""

from __future__ import annotations

import contextvars
import functools
import re
from dataclasses import dataclass
from typing import Final

from bus.rules import knownvars
from bus.rules.bashsplit import CACHED_COMMAND_CHARS, SimpleCommand, Word, parse_commands, strip_wrappers
from bus.rules.globs import Glob, glob, glob_regex
from bus.rules.heredocs import fed_texts
from bus.rules.limits import current_limits
from bus.rules.readings import STDIN_ARGS, ScriptBudget, read_command
from bus.rules.spellings import spellings

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
#: Leading assignments an ``allow`` rule may match past (any is stripped for ``if``/deny/ask).
_SAFE_ENV: Final = frozenset(
    {
        "NODE_ENV",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "CI",
        "NO_COLOR",
        "FORCE_COLOR",
        "TZ",
        "LANG",
        "LC_ALL",
        "PYTHONUNBUFFERED",
        "DEBUG",
    }
)


@dataclass(frozen=True, slots=True)
class _ShellPattern:
    #: The pattern as a regex when one matches in linear time (at most two ``*``), else ``None``.
    regex: re.Pattern[str] | None
    glob: Glob | None  # the pattern, when it has no regex
    head: Glob  # the pattern's first word, for the "$VAR present" rule
    name_only: bool  # no more specific than a command name: ``git``, ``git *``, ``git*``
    match_all: bool
    first: str  # the text before the pattern's first ``*`` (all of it without one)
    stars: int
    tail_star: bool  # its one ``*`` ends it: ``cat *``
    #: What its first ``*`` is followed by: what words known only at run time meet (:func:`_floats`).
    floats: str

    def fullmatch(self, text: str) -> bool:
        if self.regex is not None:
            return self.regex.fullmatch(text) is not None
        assert self.glob is not None
        return self.glob.fullmatch(text)

    def extends(self, start: str, operands: bool = False) -> bool:
        """Whether a reading whose words after ``start`` are known only at run time (``$VAR``,
        ``xargs``'s arguments; ``operands``: after a ``--``, so no options) meets the pattern:
        its literal text goes on from ``start`` (``rm -rf /`` from ``"rm -rf "``: the word may
        be ``/``), or a ``*`` that ``start`` has reached takes what follows (:attr:`floats`)."""
        if len(self.first) > len(start) and self.first.startswith(start):
            return True
        if not start.startswith(self.first):
            return False
        return self.floats == FLOATS_ANY or (self.floats == FLOATS_OPTION and not operands)

    def covers(self, start: str) -> bool:
        """Whether every text that starts with ``start`` matches (``cat *`` covers ``cat x ...``)."""
        return self.tail_star and start.startswith(self.first)


@functools.lru_cache(maxsize=4096)
def _shell_pattern(content: str, ignore_case: bool) -> _ShellPattern:
    pattern = " ".join(content.split())
    if pattern.endswith(":*"):  # legacy prefix form: ``npm run test:*`` == ``npm run test *``
        pattern = (pattern[:-2].rstrip() + " *").lstrip()
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    regex: re.Pattern[str] | None = None
    linear: Glob | None = None
    if pattern.endswith(" *") and pattern.count("*") == 1:
        regex = re.compile(re.escape(pattern[:-2]) + r"(?: .*)?", flags)
    elif pattern.count("*") <= 2:  # ``a.*b.*`` backtracks linearly; a third ``.*`` makes it quadratic
        regex = glob_regex(pattern, ignore_case)
    else:
        linear = glob(pattern, ignore_case)
    head = pattern.split(" ", 1)[0]
    name_only = " " not in pattern.removesuffix(" *")
    first = pattern.split("*", 1)[0]
    first = first.lower() if ignore_case else first
    stars = pattern.count("*")
    tail_star = stars == 1 and pattern.endswith("*")
    floats = _floats(pattern, tail_star)
    return _ShellPattern(
        regex, linear, glob(head, ignore_case), name_only, pattern == "*", first, stars, tail_star, floats
    )


#: A pattern's first ``*`` takes whatever follows (``rm -rf *``) or is followed by other words
#: (``dd * of=/dev/*``): a word known only at run time meets it.
FLOATS_ANY: Final = "any"
#: Its first ``*`` is followed, within the word, by an option (``rm *--no-preserve-root*``):
#: a word known only at run time meets it, unless it stands after ``--``, where options end.
FLOATS_OPTION: Final = "option"
#: Its first ``*`` is followed, within the word, by part of a name (``cat *.env``,
#: ``cat *id_rsa*``): it names a file, and only a word that shows that name meets it. Such a
#: pattern would otherwise meet every command of its program with an expansion or read
#: arguments (``cat $(ls)``, ``git ls-files | xargs cat``) and decide on the program alone.
FLOATS_NAME: Final = "name"
#: No ``*``.
FLOATS_NONE: Final = ""


def _floats(pattern: str, tail_star: bool) -> str:
    if "*" not in pattern:
        return FLOATS_NONE
    after = pattern.split("*", 2)[1]
    if tail_star or not after or after[0] == " ":
        return FLOATS_ANY
    return FLOATS_OPTION if after[0] == "-" else FLOATS_NAME


def shell_matches(content: str, command: str, powershell: bool, fail_open: bool, every: bool) -> bool:
    pattern = _shell_pattern(content, powershell)
    if pattern.match_all:
        return True
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return fail_open
    reads = _reads(command, commands, powershell)
    if every:  # allow rules: every reading of every subcommand, no unsafe leading assignment
        return bool(reads) and all(_every_reading_matches(pattern, read) for read in reads)
    return any(_any_reading_matches(pattern, read, fail_open) for read in reads)


def _any_reading_matches(pattern: _ShellPattern, read: _Read, fail_open: bool) -> bool:
    if fail_open and read.opaque and unreadable_code_unjudged():
        return True
    return any(_reading_matches(pattern, reading, fail_open) for reading in read.readings)


def _every_reading_matches(pattern: _ShellPattern, read: _Read) -> bool:
    if read.opaque and unreadable_code_unjudged():
        return False
    return all(
        _SAFE_ENV.issuperset(reading.command.assigned)
        and (
            any(pattern.covers(start) for start in reading.starts)
            if reading.starts
            else _reading_matches(pattern, reading, False)
        )
        for reading in read.readings
    )


def _reading_matches(pattern: _ShellPattern, reading: _Reading, fail_open: bool) -> bool:
    if any(pattern.fullmatch(text) for text in reading.texts):
        return True
    if fail_open and any(pattern.extends(start, reading.operands) for start in reading.starts):
        return True
    if not fail_open or not reading.command.dynamic:
        return False
    return reading.dynamic_program or any(pattern.extends(start, reading.operands) for start in reading.dynamic_starts)


def unreadable_code_unjudged() -> bool:
    """Whether interpreter code that cannot be read cannot be judged, in the current context
    (``hookbus.limits.unreadableCode``)."""
    return current_limits().unreadable_code == "unjudged"


@dataclass(frozen=True, slots=True)
class _Reading:
    """One reading and the texts it is matched as."""

    command: SimpleCommand
    texts: frozenset[str]
    #: When the program gets more words at run time (``xargs CMD``: what it reads): the texts the
    #: command starts with, each ending in a space.
    starts: frozenset[str] = frozenset()
    #: With run-time expansions (``git log $BRANCH``): each text up to the word where its first
    #: expansion is (``"git log "``, ending in a space); a deny or ask pattern meets the reading
    #: when some text that starts so can match it (:meth:`_ShellPattern.extends`).
    dynamic_starts: frozenset[str] = frozenset()
    #: The program itself is an expansion (``$CMD -rf /``): every pattern meets it.
    dynamic_program: bool = False
    #: The words known only at run time stand after a ``--``: they are no options.
    operands: bool = False


@dataclass(frozen=True, slots=True)
class _Read:
    """A subcommand's readings."""

    readings: tuple[_Reading, ...]
    opaque: bool


#: What is left of the scripts budget of the command being read (:func:`_reads`).
_BUDGET: Final[contextvars.ContextVar[ScriptBudget | None]] = contextvars.ContextVar("hookbus_scripts", default=None)


def _reads(command: str, commands: tuple[SimpleCommand, ...], powershell: bool) -> list[_Read]:
    """The readings of each subcommand of ``command``, their scripts parsed within one budget
    for the whole command (:data:`bus.rules.readings.SCRIPT_CHARS`)."""
    fed = _fed(command, commands, powershell)
    token = _BUDGET.set(ScriptBudget())
    try:
        reads = [_read(cmd, stdin, powershell) for cmd, stdin in zip(commands, fed, strict=True)]
    finally:
        _BUDGET.reset(token)
    return reads if powershell or not knownvars.mentioned(command) else _known_values(command, commands, reads)


def _known_values(command: str, commands: tuple[SimpleCommand, ...], reads: list[_Read]) -> list[_Read]:
    """The readings that expand ``$TMPDIR`` read with its known values instead, where the
    command cannot change it (:mod:`bus.rules.knownvars`)."""
    everywhere = knownvars.known(command, commands, (r.command for read in reads for r in read.readings))
    if everywhere is False:
        return reads
    out = []
    for cmd, read in zip(commands, reads, strict=True):
        readings: list[_Reading] = []
        for k, reading in enumerate(read.readings):
            mine = everywhere or (k == 0 and knownvars.NAME in cmd.assigned)
            found = knownvars.read_known(reading.command) if mine and not reading.starts else None
            readings.extend([reading] if found is None else (_reading(c) for c in found))
        out.append(_Read(tuple(readings), read.opaque))
    return out


def _fed(command: str, commands: tuple[SimpleCommand, ...], powershell: bool) -> list[str | None]:
    """What a here-document or here-string feeds each subcommand."""
    return [None] * len(commands) if powershell else fed_texts(command, commands)


class _Unkept(Exception):  # not an error: a read cut short by its command's budget, not to be cached
    def __init__(self, read: _Read) -> None:
        self.read = read


def _read(cmd: SimpleCommand, stdin: str | None, powershell: bool) -> _Read:
    """The readings of a subcommand (fed ``stdin`` by a here-document) and their variants,
    worked out once (one cut short by its command's budget is not kept)."""
    cache = _cached_read if len(cmd.text) + len(stdin or "") <= CACHED_COMMAND_CHARS else _long_reads
    try:
        return cache(cmd, stdin, powershell)
    except _Unkept as unkept:
        return unkept.read


def _make_read(cmd: SimpleCommand, stdin: str | None, powershell: bool) -> _Read:
    if powershell:
        return _Read((_reading(cmd, powershell=True),), False)
    read = read_command(cmd, stdin, _BUDGET.get())
    found = _Read(tuple(_reading(reading) for reading in read.commands), read.opaque)
    if read.limited:
        raise _Unkept(found)
    return found


def _reading(command: SimpleCommand, *, powershell: bool = False) -> _Reading:
    if powershell or command.words[-1] is not STDIN_ARGS:
        texts = _make_variants(command, powershell)
        if not command.dynamic:
            return _Reading(command, texts)
        # PowerShell's patterns are matched in lower case (:func:`_shell_pattern`).
        starts = {_dynamic_start(text.lower() if powershell else text) for text in texts}
        operands = _after_options(command.words[: next(k for k, w in enumerate(command.words) if w.dynamic)])
        return _Reading(command, texts, frozenset(), frozenset(starts - {""}), "" in starts, operands)
    known = SimpleCommand(command.words[:-1], command.assigned)  # and what it reads, at run time
    texts = _make_variants(known, False)
    return _Reading(known, texts, frozenset(text + " " for text in texts), operands=_after_options(known.words))


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
        texts.update((form.text, form.plain, " ".join(form.text.split())))
        if powershell:
            alias = _PS_ALIASES.get(form.words[0].value.lower())
            if alias is not None:
                texts.add(" ".join((alias, *(word.value for word in form.words[1:]))))
        else:
            texts.update(spellings(form.words))
    return frozenset(texts)


def shell_texts(command: str, powershell: bool = False) -> frozenset[str] | None:
    """Every text the subcommands of ``command`` are matched as, for a combined pre-check.

    ``None`` when that is not enough to decide: the command cannot be parsed, or run-time
    expansions make its final text unknowable (then see :func:`shell_view`).
    """
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return None
    texts: set[str] = set()
    for read in _reads(command, commands, powershell):
        if read.opaque or any(reading.command.dynamic or reading.starts for reading in read.readings):
            return None
        for reading in read.readings:
            texts.update(reading.texts)
    return frozenset(texts)


@dataclass(frozen=True, slots=True)
class ShellView:
    """What every ``deny``/``ask`` shell pattern is checked against, worked out in one pass over
    the subcommands, so that a list of patterns costs one combined match per text whatever the
    number of its rules (see :func:`rule_matches` for the rules it stands for).

    A pattern matches the command when it matches one of ``texts``; or, when a reading's
    program is only known at run time (``dynamic_program``), always; or when some text that
    starts with one of ``starts`` can match it (a reading with run-time expansions, up to the
    word of its first one; ``xargs CMD``, whose words are still to come).
    """

    #: Every text of every reading of every subcommand (its variants), sorted.
    texts: tuple[str, ...]
    #: Some reading's program itself is an expansion (or cannot be read).
    dynamic_program: bool
    #: How many subcommands the command has.
    subcommands: int
    #: Some subcommand runs interpreter code that cannot be read (see
    #: :func:`unreadable_code_unjudged`: then it meets every pattern).
    opaque: bool = False
    #: The texts the readings with run-time expansions or that get more words at run time start
    #: with (``rm -rf $DIR`` and ``xargs rm -rf`` both: ``"rm -rf "``), sorted; a pattern meets
    #: one when a text that starts so can match it (see :func:`shell_start`).
    starts: tuple[str, ...] = ()
    #: The same, for the readings whose words known at run time stand after a ``--``: no
    #: pattern that needs an option there meets them.
    operand_starts: tuple[str, ...] = ()


def shell_view(command: str, powershell: bool = False) -> ShellView | None:
    """The :class:`ShellView` of ``command``; ``None`` when it cannot be parsed."""
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return None
    texts: set[str] = set()
    starts: set[str] = set()
    operand_starts: set[str] = set()
    dynamic_program = opaque = False
    for read in _reads(command, commands, powershell):
        opaque |= read.opaque
        for found in read.readings:
            texts.update(found.texts)
            (operand_starts if found.operands else starts).update(found.starts | found.dynamic_starts)
            dynamic_program |= found.dynamic_program
    found_starts = tuple(sorted(starts)), tuple(sorted(operand_starts))
    return ShellView(tuple(sorted(texts)), dynamic_program, len(commands), opaque, *found_starts)


def shell_start(content: str, powershell: bool = False) -> tuple[str, str]:
    """A ``deny``/``ask`` pattern's text before its first ``*`` (all of it without one), and
    what that ``*`` is followed by (:data:`FLOATS_ANY`, ...): it meets a reading that starts
    with ``start`` (:attr:`ShellView.starts`) when that text is longer and starts with
    ``start``, or ``start`` starts with it and the ``*`` takes what follows
    (:meth:`_ShellPattern.extends`)."""
    pattern = _shell_pattern(content, powershell)
    return pattern.first, pattern.floats


def shell_regex(content: str, powershell: bool = False) -> re.Pattern[str] | None:
    """The regex a ``Bash(...)``/``PowerShell(...)`` rule's content is matched with; ``None`` when
    it is matched another way (three or more ``*``, which a regex would match in quadratic time)."""
    return _shell_pattern(content, powershell).regex


__all__ = [
    "FLOATS_ANY",
    "FLOATS_NAME",
    "FLOATS_NONE",
    "FLOATS_OPTION",
    "ShellView",
    "shell_matches",
    "shell_regex",
    "shell_start",
    "shell_texts",
    "shell_view",
    "unreadable_code_unjudged",
]
