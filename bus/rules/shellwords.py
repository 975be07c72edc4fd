"""Words and the commands they make, for the shell reader (:mod:`bus.rules.shellparser`).

The word expansions bash performs before it runs a command, as far as they can be told from
the text alone: ANSI-C quoting (``$'\\x72\\x6d'`` is ``rm``) and brace expansion (``{rm,-rf,/}``
is three words, ``rm -{r,f}`` two); and the simple command a list of words makes (leading
keywords such as ``if``, ``{``, ``time -p``, ``coproc NAME`` and ``VAR=value`` assignments dropped).

The expansion is bounded: a word whose braces would give more than :data:`MAX_BRACE_WORDS` words, or that
holds more than :data:`MAX_BRACE_MARKS` braces and commas, is not expanded and the parser marks
it dynamic (known only at run time), as it does ``$VAR``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Final


class Unparsable(ValueError):
    """The command cannot be split with confidence."""


class OutOfTime(Unparsable):
    """The parser's deadline passed before it was done."""


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word: its source text, its value with quotes removed, and whether it expands."""

    raw: str
    value: str
    dynamic: bool = False


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command, with leading assignments and keywords already removed."""

    words: tuple[Word, ...]
    assigned: tuple[str, ...] = ()  # names of the leading ``VAR=value`` assignments removed
    #: The command as written when that differs from its words (its redirections, ``2>&1``).
    written: str | None = None
    #: The simple command a pipe feeds this one from (``echo x | xargs rm``: ``echo x``), when
    #: it stands right before the ``|`` (not a group, a loop...) with no redirection.
    piped_from: SimpleCommand | None = None

    @property
    def text(self) -> str:
        """The command as written (redirections included), whitespace normalised to one space."""
        # A list, not a generator: join builds one anyway, and these run for every reading.
        return " ".join([word.raw for word in self.words]) if self.written is None else self.written

    @property
    def plain(self) -> str:
        """The command's words with quotes and escapes removed (expansions kept as written)."""
        return " ".join([word.value for word in self.words])

    @property
    def dynamic(self) -> bool:
        """Whether ``$VAR``, ``$(...)``, backticks or similar make the final text unknowable."""
        for word in self.words:
            if word.dynamic:
                return True
        return False


#: A ``NAME=``, ``NAME+=`` or ``NAME[i]=`` assignment's start.
ASSIGNMENT: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\+?=")
_KEYWORDS: Final = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
)
#: Keywords that may take the next word with them (``time -p``, ``coproc NAME``, ``function f``).
_LEADERS: Final = frozenset({"time", "coproc", "function"})
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PS_CALL_OPERATORS: Final = frozenset({"&", "."})
#: The body of ``$'...'`` after the opening quote, up to and including its closing quote.
ANSI_C_BODY: Final = re.compile(r"(?:[^'\\]++|\\.)*+'", re.DOTALL)
_ANSI_C_ESCAPE: Final = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|c(.)|(.))",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final = {
    "a": 7,
    "b": 8,
    "e": 27,
    "E": 27,
    "f": 12,
    "n": 10,
    "r": 13,
    "t": 9,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}

#: Words one brace expansion may give before the word counts as known only at run time.
MAX_BRACE_WORDS: Final = 32
#: Braces and commas one word may hold for its expansion to be worked out.
MAX_BRACE_MARKS: Final = 64
_SEQUENCE: Final = re.compile(r"([+-]?[0-9]{1,9}|[A-Za-z])\.\.([+-]?[0-9]{1,9}|[A-Za-z])(?:\.\.([+-]?[0-9]{1,9}))?")
_MARKS: Final = re.compile(r"([{},])")


def decode_ansi_c(body: str) -> str:
    """The value of ``$'body'``: its escapes decoded as bash does (a NUL ends the string)."""
    out = bytearray()
    last = 0
    for found in _ANSI_C_ESCAPE.finditer(body):
        out += body[last : found.start()].encode("utf-8", "surrogateescape")
        last = found.end()
        simple, octal, hexa, short, long, control, other = found.groups()
        if simple is not None:
            out.append(_SIMPLE_ESCAPES[simple])
        elif octal is not None:
            out.append(int(octal, 8) & 0xFF)
        elif hexa is not None:
            out.append(int(hexa, 16))
        elif short is not None or long is not None:
            code = int(short or long, 16)
            out += chr(code).encode("utf-8", "surrogatepass") if code <= 0x10FFFF else found.group().encode()
        elif control is not None:
            out.append((ord(control.upper()) ^ 0x40) & 0x7F if ord(control) < 128 else ord("?"))
        else:
            out += ("\\" + other).encode("utf-8", "surrogateescape")
    out += body[last:].encode("utf-8", "surrogateescape")
    nul = out.find(0)
    return bytes(out if nul < 0 else out[:nul]).decode("utf-8", "surrogateescape")


class TooMany(ValueError):
    """The word's brace expansion is past the bounds: it is known only at run time."""


#: A piece of a word: its text and its kind (``LITERAL`` text that braces act on, ``QUOTED``
#: text they do not, ``DYNAMIC`` an expansion, ``MARK`` an unquoted ``{``, ``,`` or ``}``).
Piece = tuple[str, int]
LITERAL, QUOTED, DYNAMIC, MARK = 0, 1, 2, 3


def pieces(parts: list[str], kinds: list[int]) -> list[Piece]:
    """A word's parts (each of a kind) with the marks split out of its literal ones."""
    out: list[Piece] = []
    marks = 0
    for text, kind in zip(parts, kinds, strict=True):
        if kind != LITERAL:
            out.append((text, kind))
            continue
        for i, chunk in enumerate(_MARKS.split(text)):
            if i % 2:
                out.append((chunk, MARK))
                marks += 1
            elif chunk:
                out.append((chunk, LITERAL))
    if marks > MAX_BRACE_MARKS:
        raise TooMany("too many braces")
    return out


def expand_braces(word: list[Piece]) -> list[tuple[str, bool]]:
    """The words bash's brace expansion makes of ``word``: each ``(value, dynamic)``; the word
    itself when it has nothing to expand. :class:`TooMany` past :data:`MAX_BRACE_WORDS`."""
    out: list[list[Piece]] = []
    _expand(word, out)
    if len(out) > 1:  # an empty word goes, unless quoted (``{a,}''`` gives ``a`` and an empty word)
        out = [w for w in out if any(text or kind in (QUOTED, DYNAMIC) for text, kind in w)]
    return [("".join(text for text, _ in w), any(kind == DYNAMIC for _, kind in w)) for w in out]


def _expand(word: list[Piece], out: list[list[Piece]]) -> None:
    group = _first_group(word)
    if group is None:
        out.append(word)
        if len(out) > MAX_BRACE_WORDS:
            raise TooMany("too many words")
        return
    start, end, alternatives = group
    for alternative in alternatives:
        _expand(word[:start] + alternative + word[end + 1 :], out)


def _first_group(word: list[Piece]) -> tuple[int, int, list[list[Piece]]] | None:
    """The first ``{...}`` bash expands: its bounds and its alternatives."""
    for start, (text, kind) in enumerate(word):
        if kind != MARK or text != "{":
            continue
        depth, commas = 0, [start]
        for i in range(start, len(word)):
            mark, mark_kind = word[i]
            if mark_kind != MARK:
                continue
            if mark == "{":
                depth += 1
            elif mark == "}":
                depth -= 1
                if depth == 0:
                    if len(commas) > 1:
                        bounds = [*commas, i]
                        return start, i, [word[a + 1 : b] for a, b in itertools.pairwise(bounds)]
                    inner = word[start + 1 : i]
                    sequence = _sequence(inner[0][0]) if len(inner) == 1 and inner[0][1] == LITERAL else None
                    if sequence is not None:
                        return start, i, [[(item, LITERAL)] for item in sequence]
                    break
            elif depth == 1:
                commas.append(i)
    return None


def _sequence(text: str) -> list[str] | None:
    found = _SEQUENCE.fullmatch(text)
    if found is None:
        return None
    first, last, step_text = found.groups()
    step = abs(int(step_text or "1")) or 1
    if first.isalpha() != last.isalpha():
        return None
    a, b = (ord(first), ord(last)) if first.isalpha() else (int(first), int(last))
    if abs(b - a) // step + 1 > MAX_BRACE_WORDS:
        raise TooMany("sequence too long")
    values = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
    if first.isalpha():
        return [chr(v) for v in values]
    width = max(len(first.lstrip("+-")), len(last.lstrip("+-")))
    padded = (len(first.lstrip("+-")) > 1 and first.lstrip("+-").startswith("0")) or (
        len(last.lstrip("+-")) > 1 and last.lstrip("+-").startswith("0")
    )
    return [f"{v:0{width + (v < 0)}d}" if padded else str(v) for v in values]


# --- The command a list of words makes ------------------------------------------------------


def lead_words(
    words: list[Word], group_follows: bool = False, assigned: list[str] | None = None, keywords: bool = True
) -> int:
    """How many leading words are keywords, assignments or the like: the command starts after
    them. ``group_follows``: a ``(`` comes next (``coproc NAME (...)``, ``function f ()``).
    Without ``keywords`` (a redirection comes first: ``>x time cmd`` runs a program ``time``),
    only assignments."""
    i, n = 0, len(words)
    while i < n:
        raw = words[i].raw
        if not keywords:
            assignment = ASSIGNMENT.match(raw)
            if assignment is None:
                break
            if assigned is not None:
                assigned.append(assignment.group(1))
            i += 1
            continue
        if raw in _KEYWORDS:
            i += 1
            continue
        assignment = ASSIGNMENT.match(raw)
        follows = words[i + 1].raw if i + 1 < n and raw in _LEADERS else None
        if assignment:
            if assigned is not None:
                assigned.append(assignment.group(1))
        elif raw == "time":  # a keyword wherever a command starts (``time -f x cmd`` runs ``-f``)
            i += follows in ("-p", "--")  # ``time -p -- cmd``: bash takes both
            i += follows == "-p" and i + 1 < n and words[i + 1].raw == "--"
        elif raw == "coproc":
            if follows is not None and _NAME.fullmatch(follows) and (i + 2 < n and words[i + 2].raw == "{"):
                i += 1
            elif follows is not None and i + 2 == n and group_follows:
                i += 1
        elif raw == "function" and follows is not None:
            i += 1
        else:
            break
        i += 1
    return min(i, n)


def finalize(words: list[Word], powershell: bool, shown: list[tuple[int, str]] | None = None) -> SimpleCommand | None:
    """Drop leading keywords and ``VAR=value`` assignments; ``None`` if nothing is left."""
    assigned: list[str] = []
    if powershell:
        i = 0
        while i < len(words):
            assignment = ASSIGNMENT.match(words[i].raw)
            if assignment:
                assigned.append(assignment.group(1))
            elif words[i].raw not in _KEYWORDS and words[i].raw not in _PS_CALL_OPERATORS:
                break
            i += 1
    elif words and "=" not in (first := words[0].raw) and first not in _KEYWORDS and first not in _LEADERS:
        i = 0  # the common case: the command starts at once
    else:
        i = lead_words(words, assigned=assigned, keywords=not (shown and shown[0][0] == 0))
    if i >= len(words):
        return None
    kept = tuple(words[i:])
    head = kept[0]
    if not head.dynamic and _globbed(head.value):  # the program is whatever file the pattern meets
        kept = (Word(head.raw, head.value, True), *kept[1:])
    written = None
    if shown:  # the redirections where they stood (each after as many words as it counts)
        texts, k = [], 0
        for at, word in enumerate(kept, start=i):
            while k < len(shown) and shown[k][0] <= at:
                texts.append(shown[k][1])
                k += 1
            texts.append(word.raw)
        texts.extend(text for _, text in shown[k:])
        written = " ".join(texts)
    return SimpleCommand(kept, tuple(assigned), written)


def _globbed(value: str) -> bool:
    """Whether a program name holds a pattern bash expands to file names (``/???/r?``)."""
    if "*" in value or "?" in value:
        return True
    opening = value.find("[")
    return opening >= 0 and value.find("]", opening + 2) > 0


__all__ = [
    "ANSI_C_BODY",
    "ASSIGNMENT",
    "MAX_BRACE_MARKS",
    "MAX_BRACE_WORDS",
    "OutOfTime",
    "SimpleCommand",
    "TooMany",
    "Unparsable",
    "Word",
    "decode_ansi_c",
    "expand_braces",
    "finalize",
    "lead_words",
    "pieces",
]
