"""Variables whose value is known well enough to read a command that expands them.

A word with an expansion is known only at run time: ``rm -rf $DIR/x`` may delete ``/usr/x``, so
it meets every deny rule its words so far can go on to match. ``$TMPDIR`` is not any variable:
the system sets it to a temporary directory, or leaves it unset. So a command that expands it,
and that cannot change it, is read twice instead, once with each value it can have: ``/tmp``
(standing for a temporary directory) and nothing. ``rm -rf $TMPDIR/build`` reads as
``rm -rf /tmp/build`` and as ``rm -rf /build`` (both asked by a pack that asks before a
recursive delete), ``rm -rf $TMPDIR/usr`` as ``rm -rf /usr`` too (denied), and
``${TMPDIR:-/tmp}`` as ``/tmp``.

A command can change ``TMPDIR`` in ways its text hides (``export TMP""DIR=/``, ``read``,
``printf -v``, ``eval``, a sourced file), so it is read so only when ``TMPDIR`` shows nowhere in
it (at any depth of its scripts) but as one of those expansions, and it runs none of the
builtins that set a variable by a name they are given. ``TMPDIR=/x cmd $TMPDIR`` expands the
value from before the assignment: such a command is read so, and nothing else in that command
line is. The program's own word is never replaced (``$TMPDIR/bin/rm`` stays unknown). A shell
that keeps variables from one command to the next (a persistent session) could have set
``TMPDIR`` in an earlier one: that is not seen here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from bus.rules.shellwords import SimpleCommand, Word

NAME: Final = "TMPDIR"
#: What ``$TMPDIR`` is read as when it is set.
TEMPORARY: Final = "/tmp"  # noqa: S108 (a name for any temporary directory, not a file made here)
#: ``$TMPDIR``, ``${TMPDIR}``, and ``${TMPDIR:-DEFAULT}``/``${TMPDIR-DEFAULT}`` with a plain default.
_EXPANSION: Final = re.compile(r"\$TMPDIR(?![A-Za-z0-9_])|\$\{TMPDIR(?:(:?-)([^}$`\\'\"]*))?\}")
#: Builtins that set a variable by a name given to them (which the text may hide).
_SETTERS: Final = frozenset(
    "declare typeset export local readonly read printf mapfile readarray getopts unset eval source . let".split()
)
#: A leading assignment of ``TMPDIR`` (its value is set for that command only).
_ASSIGNED: Final = re.compile(r"(?<![A-Za-z0-9_$])TMPDIR=")


def known(command: str, commands: tuple[SimpleCommand, ...], readings: Iterable[SimpleCommand]) -> bool | None:
    """Whether ``$TMPDIR`` in ``command`` can be read with its known values: ``True`` in every
    reading, ``None`` only in the subcommands that assign it themselves (``TMPDIR=/x cmd``),
    ``False`` nowhere. ``commands`` are its subcommands, ``readings`` every reading of them."""
    text = command.replace("\\\n", "")
    assignments = len(_ASSIGNED.findall(text))
    if NAME in _ASSIGNED.sub("", _EXPANSION.sub("", text)):
        return False
    if assignments != sum(NAME in cmd.assigned for cmd in commands):
        return False  # an assignment of its own (``TMPDIR=/; ...``) or an argument (``env TMPDIR=/``)
    for reading in readings:
        if reading.words[0].value in _SETTERS:
            return False
        if any(NAME in _EXPANSION.sub("", word.value) for word in reading.words):
            return False
    return True if assignments == 0 else None


def read_known(cmd: SimpleCommand) -> tuple[SimpleCommand, ...] | None:
    """``cmd`` read with each value ``$TMPDIR`` can have (set, then unset), or ``None`` when no
    argument of it expands ``$TMPDIR`` in a form read here."""
    if not any(_readable(word) for word in cmd.words[1:]):
        return None
    return tuple(SimpleCommand((cmd.words[0], *_words(cmd.words[1:], set_)), cmd.assigned) for set_ in (True, False))


def _readable(word: Word) -> bool:
    return word.dynamic and "'" not in word.raw and "\\" not in word.raw and _EXPANSION.search(word.value) is not None


def _words(words: tuple[Word, ...], set_: bool) -> list[Word]:
    out: list[Word] = []
    for word in words:
        if not _readable(word):
            out.append(word)
            continue
        value = _EXPANSION.sub(lambda found: _value(found, set_), word.value)
        if not value:
            continue  # an empty expansion: no word (or an empty one, quoted: nothing either way)
        raw = value if value.split() == [value] else "'" + value + "'"
        out.append(Word(raw, value, "$" in value or "`" in value))
    return out


def _value(found: re.Match[str], set_: bool) -> str:
    operator, default = found.group(1), found.group(2)
    if set_:
        return TEMPORARY
    return default if operator is not None else ""


__all__ = ["NAME", "TEMPORARY", "known", "read_known"]
