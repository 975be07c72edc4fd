"""Variables whose value is known well enough to read a command that expands them.

A word with an expansion is known only at run time: ``rm -rf $DIR/x`` may delete ``/usr/x``, so
it meets every deny rule its words so far can go on to match. ``$TMPDIR`` is not any variable:
the system sets it to a temporary directory, or leaves it unset. So a command that expands it,
and that cannot change it, is read twice instead, once with each value it can have: ``/tmp``
(standing for a temporary directory) and nothing. ``rm -rf $TMPDIR/build`` reads as
``rm -rf /tmp/build`` and as ``rm -rf /build`` (both asked by a pack that asks before a
recursive delete), ``rm -rf $TMPDIR/usr`` as ``rm -rf /usr`` too (denied), and
``${TMPDIR:-/tmp}`` as ``/tmp``. ``$PWD`` is the working directory: read as ``.`` (``rm -rf
"$PWD/build"`` is ``rm -rf ./build``) in a command that does not change directory (``cd``,
``pushd``, ``popd``: the rules could not tell where ``.`` is after one, nor can they for
``cd / && rm -rf usr``, so such a command keeps ``$PWD`` unknown).

A command can change such a variable in ways its text hides (``export TMP""DIR=/``, ``read``,
``printf -v``, ``eval``, a sourced file), so it is read so only when the name shows nowhere in
it (at any depth of its scripts) but in one of those expansions, and it runs none of the
builtins that set a variable by a name they are given. ``TMPDIR=/x cmd $TMPDIR`` expands the
value from before the assignment (bash expands the words first): such a command is read so,
and nothing else in that command line is. The program's own word is never replaced
(``$TMPDIR/bin/rm`` stays unknown). A shell that keeps variables from one command to the
next (a persistent session) could have set one in an earlier command: that is not seen here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from bus.rules.shellwords import SimpleCommand, Word


@dataclass(frozen=True, slots=True)
class KnownVariable:
    """A variable whose values are known: each is read in turn (``None``: unset)."""

    name: str
    values: tuple[str | None, ...]
    #: ``$NAME``, ``${NAME}``, and ``${NAME:-DEFAULT}``/``${NAME-DEFAULT}`` with a plain default.
    expansion: re.Pattern[str]
    #: A leading assignment of it (its value is set for that command only).
    assignment: re.Pattern[str]
    #: Programs that change it without naming it.
    changers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, name: str, values: tuple[str | None, ...], changers: str = "") -> KnownVariable:
        expansion = re.compile(rf"\${name}(?![A-Za-z0-9_])|\$\{{{name}(?:(:?-)([^}}$`\\'\"]*))?\}}")
        assignment = re.compile(rf"(?<![A-Za-z0-9_$]){name}=")
        return cls(name, values, expansion, assignment, frozenset(changers.split()))


#: What ``$TMPDIR`` is read as when it is set.
TEMPORARY: Final = "/tmp"  # noqa: S108 (a name for any temporary directory, not a file made here)
#: The variables read with their known values.
VARIABLES: Final = (
    KnownVariable.of("TMPDIR", (TEMPORARY, None)),
    KnownVariable.of("PWD", (".",), changers="cd pushd popd"),
)
#: Builtins that set a variable by a name given to them (which the text may hide).
_SETTERS: Final = frozenset(
    "declare typeset export local readonly read printf mapfile readarray getopts unset eval source . let".split()
)


def mentioned(command: str) -> list[KnownVariable]:
    """The known variables ``command`` names at all (there is nothing to read for the others)."""
    return [variable for variable in VARIABLES if variable.name in command]


def known(
    variable: KnownVariable, command: str, commands: tuple[SimpleCommand, ...], readings: Iterable[SimpleCommand]
) -> bool | None:
    """Whether ``variable`` in ``command`` can be read with its known values: ``True`` in every
    reading, ``None`` only in the subcommands that assign it themselves (``TMPDIR=/x cmd``),
    ``False`` nowhere. ``commands`` are its subcommands, ``readings`` every reading of them."""
    name = variable.name
    text = command.replace("\\\n", "")
    assignments = len(variable.assignment.findall(text))
    if name in variable.assignment.sub("", variable.expansion.sub("", text)):
        return False
    if assignments != sum(name in cmd.assigned for cmd in commands):
        return False  # an assignment of its own (``TMPDIR=/; ...``) or an argument (``env TMPDIR=/``)
    for reading in readings:
        if reading.words[0].value in _SETTERS or reading.words[0].value in variable.changers:
            return False
        if any(name in variable.expansion.sub("", word.value) for word in reading.words):
            return False
    return True if assignments == 0 else None


def read_known(variable: KnownVariable, cmd: SimpleCommand) -> tuple[SimpleCommand, ...] | None:
    """``cmd`` read with each value ``variable`` can have, or ``None`` when no argument of it
    expands the variable in a form read here."""
    if not any(_readable(variable, word) for word in cmd.words[1:]):
        return None
    return tuple(
        SimpleCommand((cmd.words[0], *_words(variable, cmd.words[1:], value)), cmd.assigned)
        for value in variable.values
    )


def _readable(variable: KnownVariable, word: Word) -> bool:
    return (
        word.dynamic
        and "'" not in word.raw
        and "\\" not in word.raw
        and variable.expansion.search(word.value) is not None
    )


def _words(variable: KnownVariable, words: tuple[Word, ...], value: str | None) -> list[Word]:
    out: list[Word] = []
    for word in words:
        if not _readable(variable, word):
            out.append(word)
            continue
        text = variable.expansion.sub(lambda found: _value(found, value), word.value)
        if not text:
            continue  # an empty expansion: no word (or an empty one, quoted: nothing either way)
        raw = text if text.split() == [text] else "'" + text + "'"
        out.append(Word(raw, text, "$" in text or "`" in text))
    return out


def _value(found: re.Match[str], value: str | None) -> str:
    operator, default = found.group(1), found.group(2)
    if value is not None and (value or operator != ":-"):
        return value
    return default if operator is not None else ""


__all__ = ["TEMPORARY", "VARIABLES", "KnownVariable", "known", "mentioned", "read_known"]
