"""The compound parts of the shell reader (:mod:`bus.rules.shellparser`): ``case`` statements,
``[[ ]]`` conditions, array assignments, here-document bodies, and the texts bash runs as commands
(``eval``'s argument, ``trap``'s action, ``alias``'s values, ``mapfile -C``'s callback, a
substitution stored as text where bash reads it again), each read as the commands it runs.

Each reads on from the parser's position, linear in what it reads; a text run as a command is
read again, at most :data:`bus.rules.shellquotes.MAX_EVALS` deep.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from bus.rules.shellquotes import HEREDOC_RUN, MAX_EVALS, Reader
from bus.rules.shellwords import ASSIGNMENT, SimpleCommand, Unparsable, Word

#: What ends a word, and the blanks between words (a carriage return is part of a word to bash).
WORD_BREAK: Final = frozenset(" \t\n;|()&<>")
BLANKS: Final = re.compile(r"[ \t]+")
SPACES: Final = re.compile(r"[ \t\n]+")
#: An array's elements when they are plain words (``a=(x y)``).
_PLAIN_ARRAY: Final = re.compile(r"\([^()'\"\\`$#;&|<>{}]*\)")
#: Files that are streams: a script read from one is known only at run time.
_STREAMS: Final = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "-")
#: The commands whose arguments bash may run as commands, and the words such a command starts with.
_RUNS_TEXT: Final = frozenset({"eval", "trap", "alias", "source", ".", "mapfile", "readarray"})
EVAL_HEADS: Final = frozenset({"builtin", "command", "time", *_RUNS_TEXT})
#: The first words of the commands whose words the parser reads further (the text they run, a
#: ``case`` statement): a shortcut that splits words only must leave such a command to the parser.
READ_FURTHER: Final = frozenset({"case", *EVAL_HEADS})
#: Inside ``[[ ]]``: its operators, and what ends a regex after ``=~``.
_CONDITION_OPERATOR: Final = re.compile(r"&&|\|\||[()]|[<>](?!\()|!(?=[ \t\n])")
_REGEX_BREAK: Final = frozenset(" \t\n<>")


class Compound(Reader):
    """The reading of compound commands and of the texts bash runs; the parser reads words."""

    def __init__(
        self, src: str, powershell: bool, depth: int = 0, deadline: float | None = None, evals: int = 0
    ) -> None:
        super().__init__(src, powershell, depth, deadline, evals)
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, quoted
        self.esac = False  # a case clause ended with ``esac``

    def _word(self, breaks: frozenset[str] | None = None) -> Word:
        raise NotImplementedError

    def _case(self) -> None:
        """``case WORD in [(]PATTERN[|PATTERN]) LIST ;; ... esac``: every clause's commands, and those
        of the substitutions in the word and the patterns."""
        src, n = self.src, len(self.src)
        self._skip(BLANKS)
        if not self._word().raw:
            raise Unparsable("case without a word")
        self._skip(SPACES)
        if self._word().raw != "in":
            raise Unparsable("case without 'in'")
        while True:
            self._tick()
            self._skip(SPACES)
            if src.startswith("#", self.pos):
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            if src.startswith("esac", self.pos) and src[self.pos + 4 : self.pos + 5] in ("", *WORD_BREAK):
                self.pos += 4
                return
            self.pos += src.startswith("(", self.pos)
            while True:  # the patterns, up to their ``)``
                self._skip(BLANKS)
                if not self._word().raw:
                    raise Unparsable("a case pattern missing")
                self._skip(BLANKS)
                follows = src[self.pos : self.pos + 1]
                self.pos += 1
                if follows == ")":
                    break
                if follows != "|":
                    raise Unparsable("unexpected text in a case pattern")
            self.esac = False
            self.nested.extend(self.parse("case"))
            if self.esac:  # taken: a case in an enclosing clause reads on
                self.esac = False
                return

    def _conditional(self, words: list[Word]) -> None:
        """The words of ``[[ ... ]]`` after its ``[[``: ``( ) < > && || !`` are operators there, and
        a regex after ``=~`` may hold ``( | )``."""
        src, n = self.src, len(self.src)
        while True:
            self._tick()
            self._skip(SPACES)
            if src.startswith("]]", self.pos) and src[self.pos + 2 : self.pos + 3] in ("", *WORD_BREAK):
                self.pos += 2
                words.append(Word("]]", "]]"))
                return
            operator = _CONDITION_OPERATOR.match(src, self.pos)
            if operator is not None:
                self.pos = operator.end()
                words.append(Word(operator.group(), operator.group()))
                continue
            regex = bool(words) and words[-1].raw == "=~"
            word = self._word(_REGEX_BREAK if regex else None)
            if not word.raw:
                raise Unparsable("missing ']]'" if self.pos >= n else f"unexpected {src[self.pos]!r} in [[ ]]")
            if not word.dynamic and ("$(" in word.value or "`" in word.value):
                self._literal(word)
            words.append(word)

    def _literal(self, word: Word) -> None:
        """A substitution written as text in an assigned value or an array subscript (``x='a[$(cmd)]'``)."""
        if "[" in word.value or ASSIGNMENT.match(word.raw):
            self.stored(word.value)

    def _skip(self, spaces: re.Pattern[str]) -> None:
        found = spaces.match(self.src, self.pos)
        if found is not None:
            self.pos = found.end()

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

    def run_texts(self, command: SimpleCommand) -> None:
        """Read the commands in the text of ``eval`` (its arguments joined), ``trap`` (its action),
        ``alias`` (its values) and ``mapfile -C`` (its callback); one whose text expands, or a
        script ``source`` reads from a stream, runs what is known only at run time."""
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

    def _array(self) -> bool:
        """The elements of ``name=(...)``, read as words (their substitutions run); whether one expands."""
        src, n = self.src, len(self.src)
        simple = _PLAIN_ARRAY.match(src, self.pos)
        if simple is not None:  # no quote, expansion or comment: plain words
            self.pos = simple.end()
            return False
        self.pos += 1
        self._enter()
        dynamic = False
        while True:
            self._tick()
            blanks = SPACES.match(src, self.pos)
            if blanks is not None:
                self.pos = blanks.end()
            if self.pos >= n:
                raise Unparsable("missing ')'")
            c = src[self.pos]
            if c == ")":
                self.pos += 1
                self.depth -= 1
                return dynamic
            if c == "#":
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            if c in ";|&(" or (c in "<>" and src[self.pos + 1 : self.pos + 2] != "("):
                raise Unparsable(f"unexpected {c!r} in an array")
            dynamic |= self._word().dynamic


__all__ = ["BLANKS", "EVAL_HEADS", "READ_FURTHER", "SPACES", "WORD_BREAK", "Compound"]
