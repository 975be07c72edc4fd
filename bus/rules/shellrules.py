"""Bash and PowerShell patterns of permission rules (``Bash(git push *)``), matched against a
command's subcommands (see :mod:`bus.rules.permissions` for the rules' semantics).

Each subcommand is matched as written, unquoted and with wrappers removed (its *variants*);
one with run-time expansions also matches a pattern more specific than a command name whose
first word matches its program. :class:`ShellView` gathers all of that for a whole command in
one pass, so that a compiled list of patterns costs one combined match per text
(:mod:`bus.policy.rulelists`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from bus.rules.bashsplit import CACHED_COMMAND_CHARS, SimpleCommand, parse_commands, strip_wrappers
from bus.rules.globs import Glob, glob, glob_regex

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

    def fullmatch(self, text: str) -> bool:
        if self.regex is not None:
            return self.regex.fullmatch(text) is not None
        assert self.glob is not None
        return self.glob.fullmatch(text)


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
    return _ShellPattern(regex, linear, glob(head, ignore_case), name_only, pattern == "*")


def shell_matches(content: str, command: str, powershell: bool, fail_open: bool, every: bool) -> bool:
    pattern = _shell_pattern(content, powershell)
    if pattern.match_all:
        return True
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return fail_open
    if every:  # allow rules: every subcommand, no unsafe leading assignment
        return bool(commands) and all(
            _SAFE_ENV.issuperset(cmd.assigned) and _command_matches(pattern, cmd, powershell, fail_open)
            for cmd in commands
        )
    return any(_command_matches(pattern, cmd, powershell, fail_open) for cmd in commands)


def _command_matches(pattern: _ShellPattern, cmd: SimpleCommand, powershell: bool, fail_open: bool) -> bool:
    if any(pattern.fullmatch(text) for text in _variants(cmd, powershell)):
        return True
    return fail_open and cmd.dynamic and _dynamic_could_match(pattern, cmd)


def _variants(cmd: SimpleCommand, powershell: bool) -> frozenset[str]:
    """The texts a subcommand is matched as: as written, unquoted, and with wrappers removed."""
    if len(cmd.text) > CACHED_COMMAND_CHARS:  # a long one is not kept (the cache stays small)
        return _make_variants(cmd, powershell)
    return _cached_variants(cmd, powershell)


def _make_variants(cmd: SimpleCommand, powershell: bool) -> frozenset[str]:
    forms = [cmd]
    stripped = strip_wrappers(cmd.words)
    if stripped != cmd.words:
        forms.append(SimpleCommand(stripped))
    texts: set[str] = set()
    for form in forms:
        texts.update((form.text, form.plain, " ".join(form.text.split())))
        alias = _PS_ALIASES.get(form.words[0].value.lower()) if powershell else None
        if alias is not None:
            texts.add(" ".join((alias, *(word.value for word in form.words[1:]))))
    return frozenset(texts)


_cached_variants = functools.lru_cache(maxsize=4096)(_make_variants)


def _dynamic_could_match(pattern: _ShellPattern, cmd: SimpleCommand) -> bool:
    """Spec: patterns more specific than the command name run anyway when expansions are present."""
    heads = {cmd.words[0], strip_wrappers(cmd.words)[0]}
    if any(word.dynamic for word in heads):
        return True  # the program itself is only known at run time
    return not pattern.name_only and any(pattern.head.fullmatch(word.value) for word in heads)


def shell_texts(command: str, powershell: bool = False) -> frozenset[str] | None:
    """Every text the subcommands of ``command`` are matched as, for a combined pre-check.

    ``None`` when that is not enough to decide: the command cannot be parsed, or run-time
    expansions make its final text unknowable (then see :func:`shell_view`).
    """
    commands = parse_commands(command, powershell=powershell)
    if commands is None or any(cmd.dynamic for cmd in commands):
        return None
    return frozenset().union(*(_variants(cmd, powershell) for cmd in commands))


@dataclass(frozen=True, slots=True)
class ShellView:
    """What every ``deny``/``ask`` shell pattern is checked against, worked out in one pass over
    the subcommands, so that a list of patterns costs one combined match per text whatever the
    number of its rules (see :func:`rule_matches` for the rules it stands for).

    A pattern matches the command when it matches one of ``texts``; or, when a subcommand's
    program is only known at run time (``dynamic_program``), always; or, when it is more
    specific than a command name, when its first word matches one of ``dynamic_heads``.
    """

    #: Every text of every subcommand (as written, unquoted, wrappers removed), sorted.
    texts: tuple[str, ...]
    #: The program names of the subcommands with run-time expansions (both forms), sorted.
    dynamic_heads: tuple[str, ...]
    #: Some subcommand's program itself is an expansion.
    dynamic_program: bool
    #: How many subcommands the command has.
    subcommands: int


def shell_view(command: str, powershell: bool = False) -> ShellView | None:
    """The :class:`ShellView` of ``command``; ``None`` when it cannot be parsed."""
    commands = parse_commands(command, powershell=powershell)
    if commands is None:
        return None
    texts: set[str] = set()
    heads: set[str] = set()
    dynamic_program = False
    for cmd in commands:
        texts.update(_variants(cmd, powershell))
        if cmd.dynamic and cmd.words:
            for word in (cmd.words[0], strip_wrappers(cmd.words)[0]):
                if word.dynamic:
                    dynamic_program = True
                else:
                    heads.add(word.value)
    return ShellView(tuple(sorted(texts)), tuple(sorted(heads)), dynamic_program, len(commands))


def shell_head_regex(content: str, powershell: bool = False) -> re.Pattern[str] | None:
    """The regex a dynamic subcommand's program name is matched with for a ``deny``/``ask`` rule
    (:attr:`ShellView.dynamic_heads`); ``None`` for a pattern no more specific than a command
    name, which an expansion never makes match."""
    pattern = _shell_pattern(content, powershell)
    if pattern.name_only:
        return None
    return glob_regex("*".join(pattern.head.parts), powershell)


def shell_regex(content: str, powershell: bool = False) -> re.Pattern[str] | None:
    """The regex a ``Bash(...)``/``PowerShell(...)`` rule's content is matched with; ``None`` when
    it is matched another way (three or more ``*``, which a regex would match in quadratic time)."""
    return _shell_pattern(content, powershell).regex


__all__ = ["ShellView", "shell_head_regex", "shell_matches", "shell_regex", "shell_texts", "shell_view"]
