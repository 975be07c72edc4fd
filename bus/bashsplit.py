"""Split a shell command line into the simple commands a permission rule is checked against.

Claude Code checks a ``Bash(...)`` / ``PowerShell(...)`` rule against every subcommand of a
compound command: the parts between ``&&``, ``||``, ``;``, ``|``, ``|&``, ``&`` and newlines,
plus the commands inside ``$(...)``, backticks, ``<(...)``/``>(...)`` and ``( ... )`` subshells.
This module is a small, dependency-free tokenizer for exactly that: it respects single and
double quotes, backslash escapes, line continuations, comments and here-documents, drops
leading ``VAR=value`` assignments and shell keywords (``if``, ``then``, ``do``, ``{`` ...), and
records whether a command contains run-time expansions (``$VAR``, ``$(...)``, backticks) that
make its final text unknowable before it runs.

It is not a shell: anything it cannot read with confidence (an unterminated quote or
substitution, a stray ``)``, a dangling backslash) makes :func:`parse_commands` return ``None``
so that callers can fail open. With ``powershell=True`` the backtick is the escape character,
``&`` alone is the call operator and ``@(...)`` is a subexpression.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

_MAX_DEPTH: Final = 32
_ASSIGNMENT: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\+?=")
_KEYWORDS: Final = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done",
                              "while", "until", "esac"})
_PS_CALL_OPERATORS: Final = frozenset({"&", "."})
_BASH_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_PS_NAME: Final = re.compile(r"[A-Za-z0-9_:]+|[?$^_]")
_WORD_BREAK: Final = frozenset(" \t\r\n;|()")
_PS_WORD_BREAK: Final = frozenset(" \t\r\n;|(){}")

#: Wrappers Claude Code strips before matching: name -> (options taking a value, positionals).
_WRAPPERS: Final[dict[str, tuple[frozenset[str], int]]] = {
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    **dict.fromkeys(("nohup", "command", "builtin", "noglob", "xargs"), (frozenset[str](), 0)),
}


class Unparsable(ValueError):
    """The command cannot be split with confidence."""


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
    def __init__(self, src: str, powershell: bool, depth: int = 0) -> None:
        self.src = src
        self.ps = powershell
        self.depth = depth
        self.pos = 0
        self.nested: list[SimpleCommand] = []
        self.heredocs: list[tuple[str, bool]] = []
        self.want_delimiter: bool | None = None

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
            c = src[self.pos]
            nxt = src[self.pos + 1 : self.pos + 2]
            if c in " \t\r" or (self.ps and c in "{}"):
                self.pos += 1
                if c in "{}":
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
        while self.pos < n:
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
            if c in breaks or (c == "&" and not self.ps and self.pos > start
                               and src[self.pos - 1] not in "<>"):
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
        while self.pos < n:
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
        src, i = self.src, self.pos + 1
        inner: list[str] = []
        while i < len(src) and src[i] != "`":
            if src[i] == "\\" and i + 1 < len(src):
                inner.append(src[i + 1] if src[i + 1] in "`\\$" else src[i : i + 2])
                i += 2
            else:
                inner.append(src[i])
                i += 1
        if i >= len(src):
            raise Unparsable("unterminated backtick")
        self.pos = i + 1
        self.nested.extend(_Parser("".join(inner), self.ps, self.depth).parse(None))

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
    """Whether ``src[i]`` is preceded by an odd number of backslashes."""
    run = len(src[:i]) - len(src[:i].rstrip("\\"))
    return run % 2 == 1


def _matching(src: str, start: int, opener: str, closer: str) -> int:
    """Index of the ``closer`` balancing the ``opener`` at ``start``."""
    depth = 0
    for i in range(start, len(src)):
        if src[i] == opener:
            depth += 1
        elif src[i] == closer:
            depth -= 1
            if depth == 0:
                return i
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


#: Commands made only of these characters have no quotes, expansions, operators or globs.
_PLAIN: Final = re.compile(r"[A-Za-z0-9_./:,@%+=\- \t-]*")


#: Commands longer than this are parsed every time, never cached: a heredoc writing a file can
#: be megabytes, and the caches keyed by commands must stay small whatever the agents send.
CACHED_COMMAND_CHARS: Final = 4096


def parse_commands(command: str, *, powershell: bool = False) -> tuple[SimpleCommand, ...] | None:
    """Every simple command in ``command`` (nested ones after their parent); ``None`` if unparsable."""
    if len(command) > CACHED_COMMAND_CHARS:
        return _parse(command, powershell)
    return _parse_cached(command, powershell)


def _parse(command: str, powershell: bool) -> tuple[SimpleCommand, ...] | None:
    if not powershell and _PLAIN.fullmatch(command):  # the common case, ten times cheaper
        command_ = _finalize([Word(w, w) for w in command.split()], False)
        return () if command_ is None else (command_,)
    try:
        return tuple(_Parser(command, powershell).parse(None))
    except (Unparsable, RecursionError):
        return None


_parse_cached = functools.lru_cache(maxsize=2048)(_parse)


def split_bash(command: str) -> list[str] | None:
    """The subcommands of a Bash command line as normalised text; ``None`` when it can't be parsed.

    >>> split_bash("FOO=1 git add . && git commit -m 'x'; echo $(date)")
    ['git add .', "git commit -m 'x'", 'echo $(date)', 'date']
    """
    commands = parse_commands(command)
    return None if commands is None else [cmd.text for cmd in commands]


def strip_wrappers(words: tuple[Word, ...]) -> tuple[Word, ...]:
    """Remove the wrappers Claude Code looks through (``timeout 30``, ``nohup``, bare ``xargs`` ...)."""
    while words and words[0].raw in _WRAPPERS:
        name = words[0].raw
        takes_value, positionals = _WRAPPERS[name]
        i = 1
        while i < len(words) and words[i].value.startswith("-") and words[i].value != "-":
            flag = words[i].value
            if name == "xargs" or (name == "command" and flag in ("-v", "-V")):
                return words
            i += 1
            if flag == "--":
                break
            if flag in takes_value:
                i += 1
        i += positionals
        if i >= len(words):
            return words
        words = words[i:]
    return words


__all__ = ["CACHED_COMMAND_CHARS", "SimpleCommand", "Unparsable", "Word", "parse_commands", "split_bash",
           "strip_wrappers"]
