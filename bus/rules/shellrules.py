"""The match stage for shell commands: Bash and PowerShell patterns of permission rules
(``Bash(git push *)``) matched against a command read once (:class:`bus.rules.shellread.ShellRead`;
see :mod:`bus.rules.permissions` for the rules' semantics).

A ``deny``, ``ask`` or ``if`` pattern matches when it matches a variant of any reading of any
subcommand; an ``allow`` pattern only when it matches a variant of every reading. A reading
with words known only at run time (``$VAR``, what ``xargs`` reads) also meets a deny or ask
pattern that a text starting with its known words can match (:meth:`ShellPattern.extends`).
Nothing here reads the command: a new rule feature goes here or in
:mod:`bus.policy.rulelists`, a new way of reading a command in the read stage.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from bus.rules.globs import Glob, glob, glob_regex
from bus.rules.limits import current_limits
from bus.rules.shellread import Reading, ShellRead, SubcommandRead

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
class ShellPattern:
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
def _shell_pattern(content: str, ignore_case: bool) -> ShellPattern:
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
    return ShellPattern(
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


def shell_matches(content: str, read: ShellRead, powershell: bool, fail_open: bool, every: bool) -> bool:
    """Whether the pattern ``content`` matches the command ``read``: a reading of it (``every``:
    every reading); ``fail_open`` is the answer when it cannot be judged, and whether words known
    only at run time meet the pattern where they can (deny and ask, not allow)."""
    pattern = _shell_pattern(content, powershell)
    if pattern.match_all:
        return True
    if read.unjudged is not None:
        return fail_open
    reads = read.subcommands
    if every:  # allow rules: every reading of every subcommand, no unsafe leading assignment
        return bool(reads) and all(_every_reading_matches(pattern, read) for read in reads)
    return any(_any_reading_matches(pattern, read, fail_open) for read in reads)


def _any_reading_matches(pattern: ShellPattern, read: SubcommandRead, fail_open: bool) -> bool:
    if fail_open and read.opaque and unreadable_code_unjudged():
        return True
    return any(_reading_matches(pattern, reading, fail_open) for reading in read.readings)


def _every_reading_matches(pattern: ShellPattern, read: SubcommandRead) -> bool:
    if read.opaque and unreadable_code_unjudged():
        return False
    return all(
        _SAFE_ENV.issuperset(reading.assigned)
        and (
            any(pattern.covers(start) for start in reading.starts)
            if reading.starts
            else _reading_matches(pattern, reading, False)
        )
        for reading in read.readings
    )


def _reading_matches(pattern: ShellPattern, reading: Reading, fail_open: bool) -> bool:
    if any(pattern.fullmatch(text) for text in reading.texts):
        return True
    if fail_open and any(pattern.extends(start, reading.operands) for start in reading.starts):
        return True
    if not fail_open or not reading.dynamic:
        return False
    return reading.dynamic_program or any(pattern.extends(start, reading.operands) for start in reading.dynamic_starts)


def unreadable_code_unjudged() -> bool:
    """Whether interpreter code that cannot be read cannot be judged, in the current context
    (``hookbus.limits.unreadableCode``)."""
    return current_limits().unreadable_code == "unjudged"


def shell_start(content: str, powershell: bool = False) -> tuple[str, str]:
    """A ``deny``/``ask`` pattern's text before its first ``*`` (all of it without one), and
    what that ``*`` is followed by (:data:`FLOATS_ANY`, ...): it meets a reading that starts
    with ``start`` (:attr:`bus.rules.shellread.ShellRead.starts`) when that text is longer and starts with
    ``start``, or ``start`` starts with it and the ``*`` takes what follows
    (:meth:`ShellPattern.extends`)."""
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
    "ShellPattern",
    "shell_matches",
    "shell_regex",
    "shell_start",
    "unreadable_code_unjudged",
]
