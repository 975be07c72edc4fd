"""The tokenizer behind :mod:`bus.rules.bashsplit`: a shell command line read into simple commands.

It respects single and double quotes, backslash escapes, line continuations, comments and
here-documents, and with ``powershell=True`` PowerShell's backtick escape, call operators and
subexpressions. Runs of characters with no meaning to it are taken with one regex step each,
so reading is linear in the command's length; with a ``deadline`` (``time.perf_counter()``)
it raises :class:`OutOfTime` once that passes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Final

_MAX_DEPTH: Final = 32
_ASSIGNMENT: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\+?=")
_KEYWORDS: Final = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
)
_PS_CALL_OPERATORS: Final = frozenset({"&", "."})
_BASH_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_PS_NAME: Final = re.compile(r"[A-Za-z0-9_:]+|[?$^_]")
_WORD_BREAK: Final = frozenset(" \t\r\n;|()")
_PS_WORD_BREAK: Final = frozenset(" \t\r\n;|(){}")
#: A run of characters with no meaning to the parser, taken in one step.
_BASH_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"\\`$]+")
_PS_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"`$@{}]+")
_BLANKS: Final = re.compile(r"[ \t\r]+")
_BASH_DQ_RUN: Final = re.compile(r'[^"\\`$]+')
_PS_DQ_RUN: Final = re.compile(r'[^"`$]+')
#: A backtick substitution's body up to its closing backtick, and the escapes removed inside it.
_BACKTICK_BODY: Final = re.compile(r"(?:[^`\\]|\\.)*`", re.DOTALL)
_BACKTICK_ESCAPE: Final = re.compile(r"\\([`\\$])")
#: Loop steps between two looks at the clock when the parser has a deadline.
_STEPS_PER_CLOCK: Final = 2048


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

    @property
    def text(self) -> str:
        """The command as written, whitespace between words normalised to one space."""
        return " ".join(word.raw for word in self.words)

    @property
    def plain(self) -> str:
        """The command with quotes and escapes removed (expansions kept as written)."""
        return " ".join(word.value for word in self.words)

    @property
    def dynamic(self) -> bool:
        """Whether ``$VAR``, ``$(...)``, backticks or similar make the final text unknowable."""
        return any(word.dynamic for word in self.words)


class _Parser:
    def __init__(self, src: str, powershell: bool, depth: int = 0, deadline: float | None = None) -> None:
        self.src = src
        self.ps = powershell
        self.depth = depth
        self.deadline = deadline
        self.steps = _STEPS_PER_CLOCK
        self.pos = 0
        self.nested: list[SimpleCommand] = []
        self.heredocs: list[tuple[str, bool]] = []
        self.want_delimiter: bool | None = None

    def _tick(self) -> None:
        """Count one loop step; past the deadline, give up."""
        self.steps -= 1
        if self.steps == 0:
            self.steps = _STEPS_PER_CLOCK
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise OutOfTime("out of time")

    def parse(self, closer: str | None) -> list[SimpleCommand]:
        """Parse a command list up to ``closer`` (``")"``) or the end of input."""
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise Unparsable("nesting too deep")
        commands = self._parse(closer)  # on Unparsable the whole parse is abandoned
        self.depth -= 1
        return commands

    def _parse(self, closer: str | None) -> list[SimpleCommand]:
        outer_nested, self.nested = self.nested, []
        commands: list[SimpleCommand] = []
        words: list[Word] = []

        def finish() -> None:
            command = _finalize(words, self.ps)
            if command is not None:
                commands.append(command)
            commands.extend(self.nested)
            self.nested.clear()
            words.clear()

        src, n = self.src, len(self.src)
        while self.pos < n:
            self._tick()
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            if c in " \t\r":
                self.pos = _BLANKS.match(src, self.pos).end()  # type: ignore[union-attr]
            elif self.ps and c in "{}":
                self.pos += 1
                finish()
            elif src.startswith("\\\n", self.pos) and not self.ps:  # line continuation
                self.pos += 2
            elif c == "\n":
                self.pos += 1
                finish()
                self._skip_heredoc_bodies()
            elif c == "#":
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
            elif c == ")":
                if closer != ")":
                    raise Unparsable("unbalanced ')'")
                self.pos += 1
                finish()
                self.nested, outer_nested = outer_nested, self.nested
                return commands
            elif c == ";" or (c == "&" and (nxt == "&" or not self.ps) and nxt != ">"):
                self.pos += 2 if src.startswith(("&&", ";;"), self.pos) else 1
                finish()
            elif c == "|":
                self.pos += 2 if nxt in ("|", "&") else 1
                finish()
            elif c == "(" and not (self.ps and words):
                if words and nxt == ")":  # ``name() { ...; }`` function definition
                    words.append(Word("()", "()"))
                    self.pos += 2
                    continue
                if words:
                    raise Unparsable("unexpected '('")
                self.pos += 1
                self.nested.extend(self.parse(")"))
            elif not self.ps and src.startswith("<<", self.pos) and not src.startswith("<<<", self.pos):
                strip_tabs = src.startswith("<<-", self.pos)
                op = "<<-" if strip_tabs else "<<"
                self.pos += len(op)
                words.append(Word(op, op))
                self.want_delimiter = strip_tabs
            else:
                word = self._word()
                if self.want_delimiter is not None:
                    self.heredocs.append((word.value, self.want_delimiter))
                    self.want_delimiter = None
                words.append(word)
        if closer is not None:
            raise Unparsable(f"missing {closer!r}")
        finish()
        self.nested = outer_nested
        return commands

    def _skip_heredoc_bodies(self) -> None:
        for delimiter, strip_tabs in self.heredocs:
            while self.pos < len(self.src):
                end = self.src.find("\n", self.pos)
                line = self.src[self.pos : len(self.src) if end < 0 else end]
                self.pos = len(self.src) if end < 0 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs.clear()

    def _word(self) -> Word:
        src, n, start = self.src, len(self.src), self.pos
        breaks = _PS_WORD_BREAK if self.ps else _WORD_BREAK
        value: list[str] = []
        dynamic = False
        plain = _PS_PLAIN_RUN if self.ps else _BASH_PLAIN_RUN
        while self.pos < n:
            self._tick()
            run = plain.match(src, self.pos)
            if run is not None:
                value.append(run.group())
                self.pos = run.end()
                continue
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            before = self.pos
            if c == "(" and self.ps:  # PowerShell (sub)expression
                self.pos += 1
                self.nested.extend(self.parse(")"))
                value.append(src[before : self.pos])
                dynamic = True
                continue
            if c == "(" and src[self.pos - 1 : self.pos] == "=":  # bash array ``a=(x y)``
                end = _matching(src, self.pos, "(", ")") + 1
                value.append(src[self.pos : end])
                self.pos = end
                continue
            if c in breaks or (c == "&" and not self.ps and self.pos > start and src[self.pos - 1] not in "<>"):
                break
            if not self.ps and src.startswith("<<", self.pos) and not src.startswith("<<<", self.pos):
                break
            if c in "<>" and nxt == "(" and not self.ps:  # process substitution
                self.pos += 2
                self.nested.extend(self.parse(")"))
                value.append(src[before : self.pos])
                dynamic = True
            elif c == "'":
                value.append(self._single_quoted())
            elif c == '"':
                text, expands = self._double_quoted()
                value.append(text)
                dynamic |= expands
            elif c == self._escape_char:
                if not nxt:
                    raise Unparsable("dangling escape")
                if nxt != "\n":
                    value.append(nxt)
                self.pos += 2
            elif c == "`":  # bash command substitution (PowerShell's backtick is the escape)
                self._backticks()
                value.append(src[before : self.pos])
                dynamic = True
            elif c == "$" and nxt == "'" and not self.ps:  # ANSI-C quoting: $'...'
                self.pos += 1
                value.append(self._single_quoted(escapes=True))
            elif c == "$" or (self.ps and c == "@" and nxt == "("):
                dynamic |= self._dollar()
                value.append(src[before : self.pos])
            else:
                # ``>&``, ``>|``, ``<&`` and ``&>`` stay glued to their redirection
                take = 3 if src.startswith("<<<", self.pos) else 2 if c in "<>" and nxt in "&|" else 1
                value.append(src[self.pos : self.pos + take])
                self.pos += take
        raw = src[start : self.pos]
        return Word(raw, "".join(value), dynamic)

    @property
    def _escape_char(self) -> str:
        return "`" if self.ps else "\\"

    def _single_quoted(self, escapes: bool = False) -> str:
        src, start = self.src, self.pos + 1
        while True:
            end = src.find("'", start)
            if end < 0:
                raise Unparsable("unterminated single quote")
            if (self.ps and src.startswith("''", end)) or (escapes and _escaped(src, end)):
                start = end + 2 if self.ps else end + 1
                continue
            text = src[self.pos + 1 : end]
            self.pos = end + 1
            return text.replace("''", "'") if self.ps else text

    def _double_quoted(self) -> tuple[str, bool]:
        src, n = self.src, len(self.src)
        self.pos += 1
        value: list[str] = []
        dynamic = False
        plain = _PS_DQ_RUN if self.ps else _BASH_DQ_RUN
        while self.pos < n:
            self._tick()
            run = plain.match(src, self.pos)
            if run is not None:
                value.append(run.group())
                self.pos = run.end()
                continue
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            if c == '"':
                if self.ps and nxt == '"':
                    value.append('"')
                    self.pos += 2
                    continue
                self.pos += 1
                return "".join(value), dynamic
            if c == self._escape_char and nxt:
                if self.ps or nxt in '"\\$`':
                    value.append(nxt)
                elif nxt != "\n":
                    value.append(c + nxt)
                self.pos += 2
            elif c == "`" and not self.ps:
                start = self.pos
                self._backticks()
                value.append(src[start : self.pos])
                dynamic = True
            elif c == "$":
                start = self.pos
                dynamic |= self._dollar()
                value.append(src[start : self.pos])
            else:
                value.append(c)
                self.pos += 1
        raise Unparsable("unterminated double quote")

    def _backticks(self) -> None:
        body = _BACKTICK_BODY.match(self.src, self.pos + 1)
        if body is None:
            raise Unparsable("unterminated backtick")
        self.pos = body.end()
        inner = _BACKTICK_ESCAPE.sub(r"\1", body.group()[:-1])
        self.nested.extend(_Parser(inner, self.ps, self.depth, self.deadline).parse(None))

    def _dollar(self) -> bool:
        """Consume an expansion starting at ``$`` (or PowerShell ``@(``); True if it is dynamic."""
        src, i = self.src, self.pos
        nxt = src[i + 1 : i + 2]
        if src.startswith("$((", i) and not self.ps:
            self.pos = _matching(src, i + 1, "(", ")") + 1
        elif nxt == "(":
            self.pos = i + 2
            self.nested.extend(self.parse(")"))
        elif nxt == "{":
            self.pos = _matching(src, i + 1, "{", "}") + 1
        else:
            name = (_PS_NAME if self.ps else _BASH_NAME).match(src, i + 1)
            self.pos = name.end() if name else i + 1
            return name is not None
        return True


def _escaped(src: str, i: int) -> bool:
    """Whether ``src[i]`` is preceded by an odd number of backslashes (the run before it only)."""
    j = i
    while j > 0 and src[j - 1] == "\\":
        j -= 1
    return (i - j) % 2 == 1


_BRACKETS: Final = {"(": re.compile(r"[()]"), "{": re.compile(r"[{}]")}


def _matching(src: str, start: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` balancing the ``opener`` at ``start``."""
    depth = 0
    for found in _BRACKETS[opener].finditer(src, start):
        if found.group() == opener:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return found.start()
    raise Unparsable(f"missing {closer!r}")


def _finalize(words: list[Word], powershell: bool) -> SimpleCommand | None:
    """Drop leading keywords and ``VAR=value`` assignments; ``None`` if nothing is left."""
    i, assigned = 0, []
    while i < len(words):
        raw = words[i].raw
        assignment = _ASSIGNMENT.match(raw)
        if assignment:
            assigned.append(assignment.group(1))
        elif raw not in _KEYWORDS and not (powershell and raw in _PS_CALL_OPERATORS):
            break
        i += 1
    return SimpleCommand(tuple(words[i:]), tuple(assigned)) if i < len(words) else None


__all__ = ["OutOfTime", "SimpleCommand", "Unparsable", "Word"]
