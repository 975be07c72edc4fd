"""Quotes and substitutions: the part of the shell reader (:mod:`bus.rules.shellparser`) that
reads inside words: single and double quotes, ``$...``, ``${ }`` (honouring its quotes and
escapes), ``$( )``, backticks, ``$(( ))``/``(( ))`` and the body of an unquoted here-document,
collecting the commands their substitutions run.

Every loop takes runs of characters with no meaning to it in one regex step and counts its steps
against the reader's deadline, so reading is linear in the text's length.
"""

from __future__ import annotations

import re
import time
from typing import Final

from bus.rules.shellwords import ANSI_C_BODY, OutOfTime, SimpleCommand, Unparsable, decode_ansi_c

MAX_DEPTH: Final = 32
#: How many texts deep the reader reads the commands of a text bash runs (``eval``, ``trap``,
#: a substitution stored as text): each is read again, so this bounds the work to a multiple.
MAX_EVALS: Final = 4
_BASH_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_PS_NAME: Final = re.compile(r"[A-Za-z0-9_:]+|[?$^_]")
_BASH_DQ_RUN: Final = re.compile(r'[^"\\`$]+')
_PS_DQ_RUN: Final = re.compile(r'[^"`$]+')
#: Runs inside ``$(( ))``/``(( ))``, ``${ }`` and an unquoted here-document's body.
_ARITH_RUN: Final = re.compile(r"[^()$`\"'\\]+")
_SUBSCRIPT_RUN: Final = re.compile(r"[^\[\]$`\"'\\]+")
_PARAM_RUN: Final = re.compile(r"[^}\\'\"$`]+")
HEREDOC_RUN: Final = re.compile(r"[^\\$`]+")
#: A backtick substitution's body up to its closing backtick, and the escapes removed inside it.
_BACKTICK_BODY: Final = re.compile(r"(?:[^`\\]|\\.)*`", re.DOTALL)
_BACKTICK_ESCAPE: Final = re.compile(r"\\([`\\$])")
#: Loop steps between two looks at the clock when the reader has a deadline.
_STEPS_PER_CLOCK: Final = 2048


class Reader:
    """The state of a reading (position, depth, deadline, the commands found in substitutions)
    and the reading of quotes and substitutions; :class:`bus.rules.shellparser._Parser` adds the
    command grammar."""

    def __init__(
        self, src: str, powershell: bool, depth: int = 0, deadline: float | None = None, evals: int = 0
    ) -> None:
        self.src = src
        self.ps = powershell
        self.depth = depth
        self.deadline = deadline
        self.evals = evals  # how many ``eval`` deep this text is
        self.steps = _STEPS_PER_CLOCK
        self.pos = 0
        self.nested: list[SimpleCommand] = []
        #: The next ``parse(")")`` reads ``$( )`` or ``<( )``: a here-document in it ends at its end.
        self.substituting = False

    def _tick(self) -> None:
        """Count one loop step; past the deadline, give up."""
        self.steps -= 1
        if self.steps == 0:
            self.steps = _STEPS_PER_CLOCK
            if self.deadline is not None and time.perf_counter() > self.deadline:
                raise OutOfTime("out of time")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unparsable("nesting too deep")

    def parse(self, closer: str | None) -> list[SimpleCommand]:
        """Parse a command list up to ``closer`` (``")"``) or the end of input."""
        raise NotImplementedError

    def child(self, src: str, evals: int | None = None) -> Reader:
        """A reader of ``src`` (a backtick substitution, an ``eval``'s command) at this depth."""
        raise NotImplementedError

    @property
    def _escape_char(self) -> str:
        return "`" if self.ps else "\\"

    def _single_quoted(self) -> str:
        src, start = self.src, self.pos + 1
        while True:
            end = src.find("'", start)
            if end < 0:
                raise Unparsable("unterminated single quote")
            if self.ps and src.startswith("''", end):
                start = end + 2
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
        self.nested.extend(self.child(inner).parse(None))

    def _dollar(self) -> bool:
        """Consume an expansion starting at ``$`` (or PowerShell ``@(``); True if it is dynamic."""
        src, i = self.src, self.pos
        nxt = src[i + 1 : i + 2]
        if src.startswith("$((", i) and not self.ps:
            self.pos = i + 3
            self._arithmetic()
        elif nxt == "(":
            self.pos = i + 2
            self.substituting = True
            self.nested.extend(self.parse(")"))
        elif nxt == "{" and not self.ps:
            self.pos = i + 2
            self._parameter()
        elif nxt == "{":
            self.pos = _matching(src, i + 1, "{", "}") + 1
        elif nxt == "[" and not self.ps:  # the old arithmetic ``$[ ]``
            self.pos = i + 2
            self._arithmetic(brackets=True)
        else:
            name = (_PS_NAME if self.ps else _BASH_NAME).match(src, i + 1)
            self.pos = name.end() if name else i + 1
            return name is not None
        return True

    def _arithmetic(self, brackets: bool = False) -> None:
        """Read ``(( ))`` or ``$(( ))`` after its ``((`` to its ``))`` (``$[ ]`` after its ``$[``
        to its ``]``, with ``brackets``): the substitutions inside run."""
        self._enter()
        src, n = self.src, len(self.src)
        opener, closer = "[]" if brackets else "()"
        plain = _SUBSCRIPT_RUN if brackets else _ARITH_RUN
        depth = 0
        while self.pos < n:
            self._tick()
            run = plain.match(src, self.pos)
            if run is not None:
                self.pos = run.end()
                continue
            c = src[self.pos]
            if c == opener:
                depth += 1
                self.pos += 1
            elif c == closer:
                self.pos += 1
                if depth == 0:
                    if brackets or src.startswith(")", self.pos):
                        self.pos += 0 if brackets else 1
                        self.depth -= 1
                        return
                    raise Unparsable("'((' that may be nested subshells")
                depth -= 1
            elif c == "\\":
                self.pos += 2
            elif c == "'":
                raise Unparsable("a quote in arithmetic")
            elif c == '"':
                self._double_quoted()
            elif c == "`":
                self._backticks()
            else:
                self._dollar()
        raise Unparsable("missing '))'")

    def _parameter(self) -> None:
        """Read ``${...}`` after its ``${``, honouring quotes and escapes (the substitutions inside run)."""
        self._enter()
        src, n = self.src, len(self.src)
        while self.pos < n:
            self._tick()
            run = _PARAM_RUN.match(src, self.pos)
            if run is not None:
                self.pos = run.end()
                continue
            c = src[self.pos]
            if c == "}":
                self.pos += 1
                self.depth -= 1
                return
            if c == "\\":
                if self.pos + 1 >= n:
                    raise Unparsable("dangling escape")
                self.pos += 2
            elif c == "'":  # in an array subscript, bash runs the substitutions even in quotes
                self.stored(self._single_quoted())
            elif c == '"':
                self._double_quoted()
            elif c == "`":
                self._backticks()
            elif src.startswith("$'", self.pos):
                body = ANSI_C_BODY.match(src, self.pos + 2)
                if body is None:
                    raise Unparsable("unterminated $'...' string")
                self.pos = body.end()
                self.stored(decode_ansi_c(body.group()[:-1]))
            else:
                self._dollar()
        raise Unparsable("missing '}'")

    def stored(self, text: str) -> None:
        """Read the substitutions written as plain text in ``text``: bash runs them where it reads
        the text again as arithmetic (``a['$(x)']``, ``$((x))`` of ``x='a[$(x)]'``) or as a
        prompt (``${x@P}``)."""
        if "$(" not in text and "`" not in text:
            return
        if self.evals >= MAX_EVALS:
            raise Unparsable("texts run as commands nested too deep")
        body = self.child(text, self.evals + 1)
        body.expansions(HEREDOC_RUN)
        self.nested.extend(body.nested)

    def expansions(self, plain: re.Pattern[str]) -> None:
        """Read the substitutions of text where quotes are plain characters."""
        src, n = self.src, len(self.src)
        while self.pos < n:
            self._tick()
            run = plain.match(src, self.pos)
            if run is not None:
                self.pos = run.end()
                continue
            c = src[self.pos]
            if c == "\\":
                self.pos += 2
            elif c == "`":
                self._backticks()
            else:
                self._dollar()


_BRACKETS: Final = {"(": re.compile(r"[()]"), "{": re.compile(r"[{}]")}


def _matching(src: str, start: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` balancing the ``opener`` at ``start`` (PowerShell's ``${...}``)."""
    depth = 0
    for found in _BRACKETS[opener].finditer(src, start):
        if found.group() == opener:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return found.start()
    raise Unparsable(f"missing {closer!r}")


__all__ = ["HEREDOC_RUN", "MAX_DEPTH", "MAX_EVALS", "Reader"]
