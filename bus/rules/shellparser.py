"""The tokenizer behind :mod:`bus.rules.bashsplit`: a shell command line read into simple commands.

It reads what bash reads before it runs anything: single, double, ANSI-C (``$'...'``) and locale
(``$"..."``) quotes, backslash escapes, line continuations, comments, redirections (wherever they
stand: a redirection and its target are not words of the command), here-documents (the
substitutions in an unquoted one's body are commands too), brace expansion
(:mod:`bus.rules.shellwords`), function definitions, ``{ }``/``( )`` groups, ``(( ))``, the
``time``/``coproc``/``function`` keywords, and the commands inside ``$(...)``, backticks,
``<(...)``, ``$(( ))`` and ``${ }``. The texts bash runs as commands are read as commands too:
``eval``'s argument, ``trap``'s action, ``alias``'s values, ``mapfile -C``'s callback, and
substitutions stored as text where bash reads them again (``x='a[$(cmd)]'``); a script sourced
from a stream (``source <(...)``) is known only at run time. With ``powershell=True`` it reads
PowerShell's backtick escape, call operators and subexpressions instead.

``case`` statements and ``[[ ]]`` are read by :mod:`bus.rules.shellcompound`.

What it cannot read with confidence (a ``((`` that may be nested subshells, an unterminated
quote, a stray ``)``, a syntax error...) raises :class:`Unparsable`: the command cannot be
judged. Runs of characters with no meaning to it are taken with one regex step each, so reading
is linear in the command's length (a text bash runs is read again, at most
:data:`bus.rules.shellquotes.MAX_EVALS` deep); with a ``deadline`` (``time.perf_counter()``) it
raises :class:`OutOfTime` once that passes.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from bus.rules.shellcompound import BLANKS, EVAL_HEADS, READ_FURTHER, WORD_BREAK, Compound
from bus.rules.shellwords import (
    ANSI_C_BODY,
    ASSIGNMENT,
    DYNAMIC,
    LITERAL,
    QUOTED,
    OutOfTime,
    SimpleCommand,
    TooMany,
    Unparsable,
    Word,
    decode_ansi_c,
    expand_braces,
    finalize,
    lead_words,
    pieces,
)

#: A redirection's file descriptor split from its operator by a line continuation.
_FD: Final = re.compile(r"(?:[0-9]|\\\n)+")
#: The words that may stand last before a command's first word, with assignments.
_LEAD_WORDS: Final = frozenset(
    {
        "!",
        "{",
        "}",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "while",
        "until",
        "esac",
        "time",
        "-p",
        "--",
        "coproc",
    }
)
#: The words that start a compound command the parser reads on its own.
_COMPOUND: Final = frozenset({"case", "esac", "[["})
_PS_WORD_BREAK: Final = frozenset(" \t\r\n;|(){}")
#: A run of characters with no meaning to the parser, taken in one step.
_BASH_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"\\`$]+")
_PS_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"`$@{}]+")
#: Blanks between words to PowerShell (a carriage return is part of a word to bash).
_PS_BLANKS: Final = re.compile(r"[ \t\r]+")
#: A redirection operator, with its file descriptor (``2>``, ``{fd}>``); not ``<(``/``>(``.
_REDIRECT: Final = re.compile(
    r"(?:[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:&>>?|<<<|<<-?|<>|[<>]&|>>|>\||<(?!\()|>(?!\())"
)


class _Parser(Compound):
    def __init__(
        self, src: str, powershell: bool, depth: int = 0, deadline: float | None = None, evals: int = 0
    ) -> None:
        super().__init__(src, powershell, depth, deadline, evals)
        #: The last word's brace expansion, when it has one (``_word`` sets it).
        self.expanded: list[Word] | None = None

    def parse(self, closer: str | None) -> list[SimpleCommand]:
        """Parse a command list up to ``closer`` (``")"``) or the end of input."""
        self._enter()
        commands = self._parse(closer)  # on Unparsable the whole parse is abandoned
        self.depth -= 1
        return commands

    def child(self, src: str, evals: int | None = None) -> _Parser:
        return _Parser(src, self.ps, self.depth, self.deadline, self.evals if evals is None else evals)

    def _parse(self, closer: str | None) -> list[SimpleCommand]:
        outer_nested, self.nested = self.nested, []
        substitution, self.substituting = self.substituting, False
        commands: list[SimpleCommand] = []
        words: list[Word] = []
        shown: list[tuple[int, str]] = []  # redirections: the number of words before each, its text
        piped: list[SimpleCommand | None] = [None]  # the command before a ``|``, for the next one

        def finish() -> SimpleCommand | None:
            command = None
            if words:
                command = finalize(words, self.ps, shown)
                if command is not None:
                    if piped[0] is not None:
                        command = dataclasses.replace(command, piped_from=piped[0])
                    commands.append(command)
                    if not self.ps and command.words[0].value in EVAL_HEADS:
                        self.run_texts(command)
                words.clear()
            if self.nested:
                commands.extend(self.nested)
                self.nested.clear()
            shown.clear()
            piped[0] = None
            return command

        src, n = self.src, len(self.src)
        while self.pos < n:
            self._tick()
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            if c in " \t" or (c == "\r" and self.ps):
                self.pos = (_PS_BLANKS if self.ps else BLANKS).match(src, self.pos).end()  # type: ignore[union-attr]
            elif self.ps and c in "{}":
                self.pos += 1
                finish()
            elif src.startswith("\\\n", self.pos) and not self.ps:  # line continuation
                self.pos += 2
            elif c == "\n":
                self.pos += 1
                finish()
                if self.heredocs:
                    self._heredoc_bodies(substitution)
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
            elif c == ";" and nxt in (";", "&") and closer == "case":  # the end of a case clause
                self.pos += 3 if src.startswith(";;&", self.pos) else 2
                finish()
                self.nested, outer_nested = outer_nested, self.nested
                return commands
            elif c == ";" or (c == "&" and (nxt == "&" or not self.ps) and nxt != ">"):
                self.pos += 2 if src.startswith(("&&", ";;"), self.pos) else 1
                finish()
            elif not self.ps and c in "<>&0123456789{" and (redirect := _REDIRECT.match(src, self.pos)):
                shown.append((len(words), self._redirection(redirect)))
            elif c == "|":
                self.pos += 2 if nxt in ("|", "&") else 1
                before = finish()
                if nxt != "|" and before is not None and before.written is None and not self.ps:
                    piped[0] = dataclasses.replace(before, piped_from=None)
            elif c == "(" and not (self.ps and words):
                self._group(words)
            else:
                word = self._word()
                if word.value.isdigit() and src.startswith(("<", ">"), self.pos) and not self.ps:
                    redirect = _REDIRECT.match(src, self.pos)  # ``2\<newline>>x``: the fd of a redirection
                    if redirect is not None and _FD.fullmatch(word.raw):
                        shown.append((len(words), word.raw + self._redirection(redirect)))
                        continue
                if word.raw in _COMPOUND and not self.ps and _starts_command(words):
                    if word.raw == "[[":
                        words.append(word)
                        self._conditional(words)
                        continue
                    if word.raw == "case":
                        self._case()
                        words.clear()  # the keywords before it ran it: none is read again
                        continue
                    if closer != "case":
                        raise Unparsable("unexpected 'esac'")
                    finish()
                    self.esac = True
                    self.nested, outer_nested = outer_nested, self.nested
                    return commands
                if not word.dynamic and ("$(" in word.value or "`" in word.value) and not self.ps:
                    self._literal(word)
                if self.expanded is None:
                    words.append(word)
                elif ASSIGNMENT.match(word.raw):  # not expanded as an assignment, but as an argument
                    words.append(Word(word.raw, word.value, True))
                else:
                    words.extend(self.expanded)
        if closer is not None:
            raise Unparsable(f"missing {'esac' if closer == 'case' else closer!r}")
        finish()
        self.nested = outer_nested
        return commands

    def _group(self, words: list[Word]) -> None:
        """A ``(`` where bash reads one: a function definition, ``(( ))`` or a subshell."""
        src = self.src
        if src.startswith("()", self.pos) and words and not self.ps:  # ``name() body``: its body is read
            if len(words) - lead_words(words, True) > 1:  # after ``if``, ``then``, ``{``...: one name
                raise Unparsable("unexpected '()'")
            words.clear()
            self.pos += 2
            return
        if words and (self.ps or lead_words(words, True) < len(words)):
            if self.ps:
                raise Unparsable("unexpected '('")
            if not (len(words) == 1 and words[0].raw == "for" and src.startswith("((", self.pos)):
                raise Unparsable("unexpected '('")
        words.clear()  # the keywords before a group (``time``, ``!``, ``if``) run it
        if not self.ps and src.startswith("((", self.pos):
            self.pos += 2
            self._arithmetic()
        else:
            self.pos += 1
            self.nested.extend(self.parse(")"))

    def _redirection(self, redirect: re.Match[str]) -> str:
        """Read a redirection and its target (dropped from the words; a substitution in the target
        still runs); return it as written."""
        src, op = self.src, redirect.group().lstrip("0123456789")
        op = op[op.find("}") + 1 :] if op.startswith("{") else op
        self.pos = redirect.end()
        blanks = BLANKS.match(src, self.pos)
        if blanks is not None:
            self.pos = blanks.end()
        c, nxt = src[self.pos : self.pos + 1], src[self.pos + 1 : self.pos + 2]
        if not c or c in ";|&()\n" or (c in "<>" and nxt != "("):
            raise Unparsable(f"a redirection {op!r} without its target")
        start = self.pos
        target = self._word()
        if op in ("<<", "<<-"):
            quoted = any(q in target.raw for q in "'\"\\")
            self.heredocs.append((target.value, op == "<<-", quoted))
            return f"{redirect.group()} {target.raw}"
        return redirect.group() + src[redirect.end() : start] + target.raw

    def _word(self, breaks: frozenset[str] | None = None) -> Word:
        src, n, start = self.src, len(self.src), self.pos
        breaks = breaks or (_PS_WORD_BREAK if self.ps else WORD_BREAK)
        value: list[str] = []
        kinds: list[int] = []  # what each part of the value is, for brace expansion
        braces = False
        dynamic = False
        plain = _PS_PLAIN_RUN if self.ps else _BASH_PLAIN_RUN
        while self.pos < n:
            self._tick()
            run = plain.match(src, self.pos)
            if run is not None:
                text = run.group()
                value.append(text)
                kinds.append(LITERAL)
                braces = braces or "{" in text
                self.pos = run.end()
                continue
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            before = self.pos
            kind = QUOTED
            if c == "(" and self.ps:  # PowerShell (sub)expression
                self.pos += 1
                self.nested.extend(self.parse(")"))
                kind = DYNAMIC
            elif c in breaks:
                if c == "(" and src[self.pos - 1 : self.pos] == "=" and ASSIGNMENT.fullmatch(src, start, self.pos):
                    kind = DYNAMIC if self._array() else QUOTED  # bash array ``a=(x y)``
                elif c in "<>" and nxt == "(" and not self.ps:  # process substitution
                    self.pos += 2
                    self.substituting = True
                    self.nested.extend(self.parse(")"))
                    kind = DYNAMIC
                else:
                    break
            elif c == "'":
                value.append(self._single_quoted())
                kinds.append(kind)
                continue
            elif c == '"':
                text, expands = self._double_quoted()
                value.append(text)
                kinds.append(DYNAMIC if expands else QUOTED)
                dynamic |= expands
                continue
            elif c == self._escape_char:
                if not nxt:
                    raise Unparsable("dangling escape")
                self.pos += 2
                if nxt != "\n":
                    value.append(nxt)
                    kinds.append(QUOTED)
                continue
            elif c == "`":  # bash command substitution (PowerShell's backtick is the escape)
                self._backticks()
                kind = DYNAMIC
            elif c == "$" and nxt == "'" and not self.ps:  # ANSI-C quoting: $'...'
                body = ANSI_C_BODY.match(src, self.pos + 2)
                if body is None:
                    raise Unparsable("unterminated $'...' string")
                self.pos = body.end()
                value.append(decode_ansi_c(body.group()[:-1]))
                kinds.append(QUOTED)
                continue
            elif c == "$" and nxt == '"' and not self.ps:  # locale string: $"..." (untranslated)
                self.pos += 1
                continue
            elif c == "$" or (self.ps and c == "@" and nxt == "("):
                kind = DYNAMIC if self._dollar() else QUOTED
            else:  # PowerShell's ``>&``, ``>|``, ``<&``, ``&>`` stay glued; in bash, ``( | )`` of a ``[[`` regex
                take = 3 if src.startswith("<<<", self.pos) else 2 if c in "<>" and nxt in "&|" else 1
                self.pos += take
            value.append(src[before : self.pos])
            kinds.append(kind)
            dynamic |= kind == DYNAMIC
        raw = src[start : self.pos]
        word = Word(raw, "".join(value), dynamic)
        expands = braces and not self.ps and "}" in raw and ("," in raw or ".." in raw)
        self.expanded = self._braces(value, kinds, word) if expands else None
        return word

    def _braces(self, value: list[str], kinds: list[int], word: Word) -> list[Word] | None:
        """The words bash's brace expansion makes of this word; ``None`` when it makes itself."""
        try:
            expanded = expand_braces(pieces(value, kinds))
        except TooMany:
            return [Word(word.raw, word.value, True)]
        if len(expanded) == 1 and expanded[0][0] == word.value:
            return None
        return [Word(text, text, dynamic) for text, dynamic in expanded]


def _starts_command(words: list[Word]) -> bool:
    """Whether the next word starts a command: every word before it is a keyword or an
    assignment (the last one is looked at first, so that a long command costs one step)."""
    if not words:
        return True
    last = words[-1].raw
    if last not in _LEAD_WORDS and not ASSIGNMENT.match(last):
        return False
    return lead_words(words) == len(words)


__all__ = ["READ_FURTHER", "OutOfTime", "SimpleCommand", "Unparsable", "Word"]
