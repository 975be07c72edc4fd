"""The text a here-document or here-string feeds a command on standard input, for the readings
of a shell or an interpreter that runs what it reads (``sh <<EOF``, ``python3 - <<'PY'``,
``bash <<< "rm -rf /"``; :mod:`bus.rules.readings`).

A pipe from ``echo`` of plain words feeds the next command their text too (``echo / | xargs rm
-rf``, ``echo ls | sh``): bash's ``echo`` prints its words joined by spaces and a newline. Any
other producer (a group, a program, ``echo`` with an expansion, a backslash that a shell's
``echo`` may read as an escape, an option, a redirection, or a command that may redefine
``echo``) feeds what is known only at run time.

The parser keeps a command's redirections as written but not a here-document's body, so the
bodies are found again in the command's text: one pass over it finds each ``<<`` opener and the
lines after it up to its delimiter, and the *k*-th body with a delimiter goes to the *k*-th
subcommand that opens one with that delimiter. When the counts differ (an opener inside quotes
or a comment), no body is given for that delimiter: a shell fed it runs a script that cannot be
read. The work is linear in the command's length.
"""

from __future__ import annotations

import re
from typing import Final

from bus.rules.bashsplit import SimpleCommand, Word, parse_commands

_OPENER: Final = re.compile(r"(?<!<)<<(-?)(?!<)[ \t]*")
_DELIMITER: Final = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;&|<>()'\"]+)")
_REDIRECTS: Final = re.compile(r"<<<|<<-?")
#: One shell word as written (quotes, escapes), after a redirection and its blanks.
_WORD: Final = re.compile(r"""[ \t]*+((?:'[^']*+'|"(?:[^"\\]|\\.)*+"|\$'(?:[^'\\]|\\.)*+'|\\.|[^\s'"\\;&|<>()])++)""")


def fed_texts(source: str, commands: tuple[SimpleCommand, ...]) -> list[str | None]:
    """For each of ``commands`` (split from ``source``), the text its standard input gets from a
    here-string or here-document, or ``None`` (none, or not known before it runs)."""
    fed: list[str | None] = [_echoed(cmd, source) for cmd in commands]
    if "<<" not in source:
        return fed
    wanted: dict[str, list[tuple[int, bool]]] = {}  # delimiter -> (command, its last redirection?)
    for index, cmd in enumerate(commands):
        written = cmd.written
        if written is None or "<<" not in written:
            continue
        redirects = list(_REDIRECTS.finditer(written))
        for k, found in enumerate(redirects):
            word = _first_word(written, found.end())
            last = k == len(redirects) - 1
            if found.group() == "<<<":
                if last and word is not None and not word.dynamic:
                    fed[index] = word.value
            elif word is not None:
                wanted.setdefault(word.value, []).append((index, last))
    if wanted:
        bodies = _bodies(source)
        for delimiter, takers in wanted.items():
            found_bodies = bodies.get(delimiter, [])
            if len(found_bodies) != len(takers):
                continue  # cannot tell which body is whose
            for (index, last), body in zip(takers, found_bodies, strict=True):
                if last:
                    fed[index] = body
    return fed


#: An ``echo`` option (bash reads a first word of these letters as options, not text).
_ECHO_OPTIONS: Final = re.compile(r"-[neE]+")
#: A command line that may make ``echo`` other than the builtin: a function, ``enable``, an alias.
_ECHO_REDEFINED: Final = re.compile(r"\becho\s*\(|\bfunction\s+echo\b|\benable\b|\balias\b")


def _echoed(cmd: SimpleCommand, source: str) -> str | None:
    """What a pipe from ``echo`` of plain words feeds ``cmd``, or ``None``."""
    producer = cmd.piped_from
    if producer is None or (cmd.written is not None and "<" in cmd.written):
        return None  # no pipe from a simple command, or its standard input is redirected
    words = producer.words
    if words[0].value != "echo" or producer.written is not None or any(w.dynamic for w in words):
        return None
    values = [word.value for word in words[1:]]
    if (values and _ECHO_OPTIONS.fullmatch(values[0])) or any("\\" in value for value in values):
        return None
    if _ECHO_REDEFINED.search(source):
        return None
    return " ".join(values) + "\n"


def _bodies(source: str) -> dict[str, list[str]]:
    """Every here-document body in ``source``, by delimiter, in order."""
    bodies: dict[str, list[str]] = {}
    cursor = 0  # where the next body starts (after the bodies already taken)
    line_end = -1  # the end of the line whose openers' bodies are being taken
    for opener in _OPENER.finditer(source):
        if line_end < opener.start() < cursor:
            continue  # inside a body taken already
        delimiter = _DELIMITER.match(source, opener.end())
        if delimiter is None:
            continue
        value = next(group for group in delimiter.groups() if group is not None)
        if opener.start() > line_end:
            line_end = source.find("\n", opener.end())
            if line_end < 0:
                line_end = len(source)
            cursor = line_end + 1
        start = pos = cursor
        strip_tabs = bool(opener.group(1))
        end = len(source)
        while pos < len(source):
            stop = source.find("\n", pos)
            stop = len(source) if stop < 0 else stop
            line = source[pos:stop]
            if (line.lstrip("\t") if strip_tabs else line) == value:
                end = pos
                pos = stop + 1
                break
            pos = stop + 1
        else:
            end = len(source)
        bodies.setdefault(value, []).append(source[start:end])
        cursor = pos
    return bodies


def _first_word(text: str, at: int) -> Word | None:
    """The shell word at ``at`` in ``text`` (a redirection's target as written)."""
    raw = _WORD.match(text, at)
    if raw is None:
        return None
    commands = parse_commands(": " + raw.group(1))
    if not commands or len(commands[0].words) < 2:
        return None
    return commands[0].words[1]


__all__ = ["fed_texts"]
