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

What it cannot read with confidence (``case``, a ``((`` that may be nested subshells, ``$[ ]``,
an unterminated quote, a stray ``)``...) raises :class:`Unparsable`: the command cannot be
judged. Runs of characters with no meaning to it are taken with one regex step each, so reading
is linear in the command's length (a text bash runs is read again, at most
:data:`bus.rules.shellquotes.MAX_EVALS` deep); with a ``deadline`` (``time.perf_counter()``) it
raises :class:`OutOfTime` once that passes.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from bus.rules.shellquotes import HEREDOC_RUN, MAX_EVALS, Reader
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

#: Files that are streams: a script read from one is known only at run time.
_STREAMS: Final = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "-")
#: The commands whose arguments bash may run as commands, and the words such a command starts with.
_RUNS_TEXT: Final = frozenset({"eval", "trap", "alias", "source", ".", "mapfile", "readarray"})
_EVAL_HEADS: Final = frozenset({"builtin", "command", "time", *_RUNS_TEXT})
#: The first words of the commands whose words the parser reads further (the text they run, a
#: ``case`` statement): a shortcut that splits words only must leave such a command to the parser.
READ_FURTHER: Final = frozenset({"case", *_EVAL_HEADS})
_WORD_BREAK: Final = frozenset(" \t\r\n;|()&<>")
_PS_WORD_BREAK: Final = frozenset(" \t\r\n;|(){}")
#: A run of characters with no meaning to the parser, taken in one step.
_BASH_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"\\`$]+")
_PS_PLAIN_RUN: Final = re.compile(r"[^\s;|()&<>'\"`$@{}]+")
_BLANKS: Final = re.compile(r"[ \t\r]+")
_SPACES: Final = re.compile(r"[ \t\r\n]+")
#: A redirection operator, with its file descriptor (``2>``, ``{fd}>``); not ``<(``/``>(``.
_REDIRECT: Final = re.compile(
    r"(?:[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:&>>?|<<<|<<-?|<>|[<>]&|>>|>\||<(?!\()|>(?!\())"
)


class _Parser(Reader):
    def __init__(
        self, src: str, powershell: bool, depth: int = 0, deadline: float | None = None, evals: int = 0
    ) -> None:
        super().__init__(src, powershell, depth, deadline, evals)
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, quoted
        self.esac = False  # a case clause ended with ``esac``
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

        def finish() -> None:
            command = finalize(words, self.ps, shown)
            if command is not None:
                commands.append(command)
                if not self.ps and command.words[0].value in _EVAL_HEADS:
                    self._eval(command)
            commands.extend(self.nested)
            self.nested.clear()
            words.clear()
            shown.clear()

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
                finish()
            elif c == "(" and not (self.ps and words):
                self._group(words)
            else:
                word = self._word()
                if word.raw in ("case", "esac") and not self.ps and lead_words(words) == len(words):
                    if word.raw == "case":
                        self._case()
                        continue
                    if closer != "case":
                        raise Unparsable("unexpected 'esac'")
                    finish()
                    self.esac = True
                    self.nested, outer_nested = outer_nested, self.nested
                    return commands
                if not word.dynamic and ("$(" in word.value or "`" in word.value) and not self.ps:
                    if "[" in word.value or ASSIGNMENT.match(word.raw):  # an assigned value, a subscript
                        self.stored(word.value)
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

    def _case(self) -> None:
        """``case WORD in [(]PATTERN[|PATTERN]) LIST ;; ... esac``: every clause's commands, and those
        of the substitutions in the word and the patterns."""
        src, n = self.src, len(self.src)
        self._skip(_BLANKS)
        if not self._word().raw:
            raise Unparsable("case without a word")
        self._skip(_SPACES)
        if self._word().raw != "in":
            raise Unparsable("case without 'in'")
        while True:
            self._tick()
            self._skip(_SPACES)
            if src.startswith("#", self.pos):
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            if src.startswith("esac", self.pos) and src[self.pos + 4 : self.pos + 5] in ("", *_WORD_BREAK):
                self.pos += 4
                return
            self.pos += src.startswith("(", self.pos)
            while True:  # the patterns, up to their ``)``
                self._skip(_BLANKS)
                if not self._word().raw:
                    raise Unparsable("a case pattern missing")
                self._skip(_BLANKS)
                follows = src[self.pos : self.pos + 1]
                self.pos += 1
                if follows == ")":
                    break
                if follows != "|":
                    raise Unparsable("unexpected text in a case pattern")
            self.esac = False
            self.nested.extend(self.parse("case"))
            if self.esac:
                return

    def _skip(self, spaces: re.Pattern[str]) -> None:
        found = spaces.match(self.src, self.pos)
        if found is not None:
            self.pos = found.end()

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
        blanks = _BLANKS.match(src, self.pos)
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

    def _heredoc_bodies(self, substitution: bool) -> None:
        """Read the bodies of the here-documents opened on the line just ended. In a substitution,
        as in bash, a line that starts with the delimiter ends the body (``EOF)``), and the rest
        of that line is read as commands."""
        src, n = self.src, len(self.src)
        for delimiter, strip_tabs, quoted in self.heredocs:
            start = end = self.pos
            while self.pos < n:
                self._tick()
                stop = src.find("\n", self.pos)
                line = src[self.pos : n if stop < 0 else stop]
                text = line.lstrip("\t") if strip_tabs else line
                if text == delimiter:
                    self.pos = n if stop < 0 else stop + 1
                    break
                if substitution and delimiter and text.startswith(delimiter):
                    self.pos += len(line) - len(text) + len(delimiter)
                    break
                self.pos = n if stop < 0 else stop + 1
                end = self.pos
            if not quoted and (src.find("$", start, end) >= 0 or src.find("`", start, end) >= 0):  # they run
                body = self.child(src[start:end])
                body.expansions(HEREDOC_RUN)
                self.nested.extend(body.nested)
        self.heredocs.clear()

    def _eval(self, command: SimpleCommand) -> None:
        """Read the commands in the text of ``eval`` (its arguments joined), ``trap`` (its action)
        and ``alias`` (its values); one whose text expands runs whatever the expansion holds."""
        words = command.words
        k = 0
        while k < len(words) - 1 and words[k].value in ("builtin", "command", "time", "-p", "--"):
            k += 1
        head, args = words[k], list(words[k + 1 :])
        if head.dynamic or head.value not in _RUNS_TEXT:
            return
        if args and args[0].value == "--":
            args = args[1:]
        if not args:
            return
        scripts: list[tuple[str, bool]] = []
        if head.value == "eval":
            scripts.append((" ".join(word.value for word in args), any(word.dynamic for word in args)))
        elif head.value == "trap" and not args[0].value.startswith("-"):
            scripts.append((args[0].value, args[0].dynamic))
        elif head.value == "alias":
            scripts.extend((word.value.partition("=")[2], word.dynamic) for word in args if "=" in word.value)
        elif head.value in ("source", ".") and (args[0].dynamic or args[0].value.startswith(_STREAMS)):
            scripts.append((args[0].value, True))  # runs what a stream holds: known only at run time
        elif head.value in ("mapfile", "readarray"):  # ``-C callback`` runs with a line's index and text
            callbacks = (b for a, b in itertools.pairwise(args) if a.value == "-C")
            scripts.extend((f"{b.value} ${{index}} ${{line}}", b.dynamic) for b in callbacks)
        for text, dynamic in scripts:
            if dynamic:
                self.nested.append(SimpleCommand((Word(text, text, True),)))
            elif self.evals >= MAX_EVALS:
                raise Unparsable("eval nested too deep")
            else:
                self.nested.extend(self.child(text, self.evals + 1).parse(None))

    def _word(self) -> Word:
        src, n, start = self.src, len(self.src), self.pos
        breaks = _PS_WORD_BREAK if self.ps else _WORD_BREAK
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
            else:  # PowerShell: ``>&``, ``>|``, ``<&`` and ``&>`` stay glued to their redirection
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

    def _array(self) -> bool:
        """The elements of ``name=(...)``, read as words (their substitutions run); whether one expands."""
        src, n = self.src, len(self.src)
        self.pos += 1
        dynamic = False
        while True:
            self._tick()
            blanks = _SPACES.match(src, self.pos)
            if blanks is not None:
                self.pos = blanks.end()
            if self.pos >= n:
                raise Unparsable("missing ')'")
            c = src[self.pos]
            if c == ")":
                self.pos += 1
                return dynamic
            if c == "#":
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            if c in ";|&(<>":
                raise Unparsable(f"unexpected {c!r} in an array")
            dynamic |= self._word().dynamic


__all__ = ["READ_FURTHER", "OutOfTime", "SimpleCommand", "Unparsable", "Word"]
