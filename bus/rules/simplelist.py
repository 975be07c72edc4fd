"""The short way to split the most common commands: simple commands of plain and quoted words.

Most commands an agent runs are a few words, some of them quoted, joined by ``|``, ``||``,
``&&`` or ``;`` (``grep -rn 'TODO' src | head -20``, ``git commit -m 'fix: x' && git push``).
:func:`split_simple` splits such a command with two regex passes instead of the parser's step
per character, and gives exactly what :class:`bus.rules.shellparser._Parser` gives (the
tests compare them on the guards corpus, the oracle's cases and generated commands).

It takes only commands where nothing but words and those operators can occur: no expansion or
escape (``$``, backticks, backslash; no ``$`` or backtick inside quotes either: the parser
reads a substitution stored as text), no redirection, group, brace, comment or newline, no
double quote holding anything the parser reads inside one, no word the parser reads further
(``case``, ``[[``, ``eval``...). For any other it returns ``None``, and the parser reads the
command. Both passes are linear in the command's length (each alternative starts with its own
characters, and the repetitions are possessive).
"""

from __future__ import annotations

import re
from typing import Final

from bus.rules.shellcompound import READ_FURTHER
from bus.rules.shellwords import SimpleCommand, Word, finalize

#: A command this module splits: words of plain characters, single-quoted and double-quoted
#: text without expansions or escapes, blanks, and the list operators.
_SIMPLE: Final = re.compile(r"""(?:[^\s;|()&<>'"\\`$#{}]++|'[^'\n`$]*+'|"[^"\\`$\n]*+"|[ \t]++|&&|\|\|?+|;)*+""")
#: One token: blanks, an operator, or a word.
_TOKEN: Final = re.compile(r"""([ \t]++)|(&&|\|\|?+|;)|((?:[^\s;|()&<>'"\\`$#{}]++|'[^'\n]*+'|"[^"\n]*+")++)""")
#: A word's parts: single-quoted, double-quoted (their quotes removed), or plain.
_PARTS: Final = re.compile(r"""'([^']*+)'|"([^"]*+)"|([^'"]++)""")
#: Words the parser reads on their own wherever a command starts.
_COMPOUND: Final = frozenset({"case", "esac", "[["})


def split_simple(command: str) -> tuple[SimpleCommand, ...] | None:
    """The simple commands of ``command`` when it is made only of words and list operators (as
    the parser splits it), else ``None``: the parser is needed."""
    if _SIMPLE.fullmatch(command) is None:
        return None
    commands: list[SimpleCommand] = []
    words: list[Word] = []
    piped: SimpleCommand | None = None  # the command before a ``|``, for the next one

    def finish() -> SimpleCommand | None:
        found = None
        if words:
            found = finalize(words, False)
            if found is not None:
                if piped is not None:  # what dataclasses.replace gives, in a third of its time
                    found = SimpleCommand(found.words, found.assigned, found.written, piped)
                commands.append(found)
            words.clear()
        return found

    tokens = _TOKEN.findall(command)
    if sum(map(len, map("".join, tokens))) != len(command):
        return None  # a character no token took: cannot happen after the full match, but never guess
    for _blanks, operator, raw in tokens:
        if raw:
            if raw in _COMPOUND:
                return None
            words.append(Word(raw, _value(raw)))
        elif operator:
            before = finish()
            piped = before if operator == "|" and before is not None else None
            if piped is not None and piped.piped_from is not None:
                piped = SimpleCommand(piped.words, piped.assigned, piped.written)
    finish()
    if any(found.words[0].value in READ_FURTHER for found in commands):
        return None  # the parser reads what these run
    return tuple(commands)


def _value(raw: str) -> str:
    """A word's value: its quotes removed (each quote of a word holding one kind is a delimiter)."""
    if '"' not in raw:
        return raw.replace("'", "") if "'" in raw else raw
    if "'" not in raw:
        return raw.replace('"', "")
    return "".join("".join(part) for part in _PARTS.findall(raw))


__all__ = ["split_simple"]
