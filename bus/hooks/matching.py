"""Group ``matcher`` evaluation, exactly as Claude Code does it.

A matcher group applies to an event when its ``matcher`` accepts the event's matcher value
(``tool_name`` on tool events, ``source`` on SessionStart, ...; see
:attr:`bus.hooks.events.EventSpec.matcher_field`). The matcher string is read in one of three ways:

* ``"*"``, ``""`` or no matcher: everything matches;
* only letters, digits, ``_``, ``-``, spaces, ``,`` and ``|``: one exact name, or a list of exact
  names separated by ``|`` or ``,`` (whitespace around each name is trimmed);
* anything else: a JavaScript regular expression tested unanchored (``RegExp.prototype.test``),
  run here on RE2 (``google-re2``), in time linear in the value, after translating the
  JavaScript syntax RE2 reads otherwise (:func:`js_regex_to_re2`). RE2 has no look-around and
  no back-references: a matcher using one is refused when the policy loads, with the reason.

Matching is case-sensitive. ``FileChanged`` and ``StopFailure`` take a narrower exact set
(letters, digits, ``_`` and ``|`` only; only ``|`` separates). Events without a matcher field
ignore the matcher. On ``PreModelSwitch``/``PostModelSwitch`` the value is the canonical model
name derived from ``to_model``; when none can be derived every group matches.

Compiled matchers are cached: :func:`compile_matcher` is on the hot path of every event.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import re2

from bus.hooks.events import NARROW_MATCHER_EVENTS, event_spec

#: Events whose matcher compares the canonical target model name.
MODEL_SWITCH_EVENTS: Final = frozenset({"PreModelSwitch", "PostModelSwitch"})

_EXACT_CHARS: Final = re.compile(r"[A-Za-z0-9_\- ,|]+")
_NARROW_CHARS: Final = re.compile(r"[A-Za-z0-9_|]+")
_EXACT_SEPARATORS: Final = re.compile(r"[|,]")
_MODEL_SUFFIX: Final = re.compile(r"\[[^\[\]]*\]\s*$")
_HEX2: Final = re.compile(r"[0-9A-Fa-f]{2}")
_HEX4: Final = re.compile(r"[0-9A-Fa-f]{4}")
_OCTAL: Final = re.compile(r"[0-3][0-7]{0,2}|[4-7][0-7]?")
_BACKREF: Final = re.compile(r"\\(?:[0-9]+|k<[^>]*>?)")
#: Letters JavaScript (without the ``u`` flag) reads as escapes; any other is the letter itself.
_JS_LETTER_ESCAPES: Final = frozenset("bBdDwWfnrtv")
#: JavaScript's ``\s`` (WhiteSpace and LineTerminator), as the inside of an RE2 class.
_JS_SPACE: Final = r"\t\n\v\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}"
_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the policy's author, not logged
#: Lone surrogates (from ``\ud800`` in JSON) cannot be UTF-8 for RE2: each is matched as U+FFFD.
_SURROGATES: Final = dict.fromkeys(range(0xD800, 0xE000), 0xFFFD)

MatcherKind = Literal["all", "exact", "regex"]


class Regex(Protocol):
    """What a compiled matcher regex offers (an RE2 pattern)."""

    def search(self, text: str) -> object | None: ...


@dataclass(frozen=True, slots=True)
class Matcher:
    """A compiled group matcher; call :meth:`matches` with the event's matcher value."""

    source: str | None
    kind: MatcherKind
    names: frozenset[str] = frozenset()
    regex: Regex | None = None
    #: Whether a missing value matches (model-switch events with no canonical model name).
    match_missing: bool = False

    def matches(self, value: str | None) -> bool:
        """Whether the matcher accepts ``value`` (``None``: the event carried no value)."""
        if self.kind == "all":
            return True
        if value is None:
            return self.match_missing
        if self.kind == "exact":
            return value in self.names
        assert self.regex is not None
        try:
            return self.regex.search(value) is not None
        except UnicodeEncodeError:
            return self.regex.search(value.translate(_SURROGATES)) is not None


_MATCH_ALL: Final = Matcher(source=None, kind="all")


@functools.lru_cache(maxsize=4096)
def compile_matcher(matcher: str | None, event: str) -> Matcher:
    """Compile the ``matcher`` of a group registered on ``event``.

    Raises :class:`ValueError` when the matcher falls on the regex path and is not a valid
    regular expression, or uses what RE2 lacks (look-around, back-references, a repeat count
    past 1000). Events without a matcher field ignore the matcher (and never raise).
    """
    if event_spec(event).matcher_field is None:
        return _MATCH_ALL
    if matcher is None or matcher.strip() in ("", "*"):
        return _MATCH_ALL
    match_missing = event in MODEL_SWITCH_EVENTS
    narrow = event in NARROW_MATCHER_EVENTS
    if (_NARROW_CHARS if narrow else _EXACT_CHARS).fullmatch(matcher):
        parts = matcher.split("|") if narrow else _EXACT_SEPARATORS.split(matcher)
        names = frozenset(name.strip() for name in parts if name.strip())
        return Matcher(source=matcher, kind="exact", names=names, match_missing=match_missing)
    try:
        regex = re2.compile(js_regex_to_re2(matcher), _RE2_OPTIONS)
    except ValueError as exc:  # the translation's: something RE2 cannot run
        raise ValueError(f"unsupported matcher regex {matcher!r} on {event}: {exc}") from None
    except (re2.error, UnicodeEncodeError) as exc:  # the latter: a lone surrogate in the pattern
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"invalid matcher regex {matcher!r} on {event}: {reason}") from None
    return Matcher(source=matcher, kind="regex", regex=regex, match_missing=match_missing)


def js_regex_to_re2(pattern: str) -> str:
    """Translate a JavaScript regex (no flags) to RE2 syntax with the same meaning.

    Handles named groups ``(?<name>...)``, the JavaScript ``$`` (end of input only) and ``.``
    (any character but a line terminator), ``\\s`` (JavaScript's whitespace, Unicode spaces
    included; ``\\S`` inside a class is RE2's), ``\\uXXXX``, ``\\cX``, identity escapes
    (``\\e`` is ``e``), and the classes ``[]`` (matches nothing) and ``[^]`` (any character).
    Raises :class:`ValueError` for what RE2 cannot run: look-around and back-references.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            escape, i = _translate_escape(pattern, i, in_class=False)
            out.append(escape)
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:  # unterminated: let RE2 report it
                out.append(pattern[i:])
                break
            body = pattern[i + 1 : end]
            if body in ("", "^"):
                out.append(r"[^\x00-\x{10FFFF}]" if body == "" else r"[\x00-\x{10FFFF}]")
            else:
                out.append("[" + _class_body(body) + "]")
            i = end + 1
        elif c == "(" and pattern.startswith("(?", i):
            for opener, what in _LOOKAROUND:
                if pattern.startswith(opener, i):
                    raise ValueError(f"{what} {opener!r} is not supported (RE2 has no look-around)")
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
            else:
                out.append("(?")
                i += 2
        elif c == "$":
            out.append(r"\z")
            i += 1
        elif c == ".":
            out.append(r"[^\n\r\x{2028}\x{2029}]")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_LOOKAROUND: Final = (("(?<=", "lookbehind"), ("(?<!", "lookbehind"), ("(?=", "lookahead"), ("(?!", "lookahead"))


def _translate_escape(pattern: str, i: int, *, in_class: bool) -> tuple[str, int]:
    """Translate the escape sequence at ``pattern[i]`` (a backslash); return it and the next index."""
    nxt = pattern[i + 1 : i + 2]
    if in_class and (octal := _OCTAL.match(pattern, i + 1)):  # legacy octal: ``[\1]`` is U+0001
        return _code_point(int(octal.group(), 8)), octal.end()
    if (nxt != "" and nxt in "123456789") or pattern.startswith("k<", i + 1):
        ref = _BACKREF.match(pattern, i)
        raise ValueError(f"back-reference {ref.group() if ref else nxt!r} is not supported (RE2 has none)")
    if nxt == "c":
        letter = pattern[i + 2 : i + 3]
        if letter.isascii() and letter.isalpha():
            return _code_point(ord(letter) % 32), i + 3
        return r"\\c", i + 2  # not a control escape: a backslash and a ``c``
    if nxt == "x" and _HEX2.fullmatch(pattern, i + 2, i + 4):
        return pattern[i : i + 4], i + 4
    if nxt == "u" and _HEX4.fullmatch(pattern, i + 2, i + 6):
        return _code_point(int(pattern[i + 2 : i + 6], 16)), i + 6
    if nxt in ("s", "S"):
        if nxt == "s":
            return (_JS_SPACE if in_class else f"[{_JS_SPACE}]"), i + 2
        return (r"\S" if in_class else f"[^{_JS_SPACE}]"), i + 2
    if nxt == "b" and in_class:
        return r"\x08", i + 2  # backspace, inside a class
    if nxt.isascii() and nxt.isalpha() and nxt not in _JS_LETTER_ESCAPES:
        return nxt, i + 2  # JavaScript identity escape: ``\e`` is a plain ``e``
    if nxt and not nxt.isascii():
        return nxt, i + 2  # ``\é`` is ``é`` (RE2 escapes ASCII punctuation only)
    return pattern[i : i + 2], i + 2


def _code_point(code: int) -> str:
    return f"\\x{{{code:X}}}"


def _class_body(body: str) -> str:
    """A JavaScript class body made safe for RE2 (a ``[`` is never the start of ``[:alpha:]``)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\":
            escape, i = _translate_escape(body, i, in_class=True)
            out.append(escape)
            continue
        out.append("\\" + body[i] if body[i] in "[&~|" else body[i])
        i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start`` (JavaScript rules); -1 if none."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i
        i += 1
    return -1


def canonical_model_name(model: object) -> str | None:
    """The canonical name of a model id: ``claude-opus-5[1m]`` -> ``claude-opus-5``.

    ``None`` when no name can be derived (missing, not a string, or empty).
    """
    if not isinstance(model, str):
        return None
    name = _MODEL_SUFFIX.sub("", model).strip()
    return name or None


def matcher_value(event: str, hook_input: Mapping[str, Any]) -> str | None:
    """The value the group matcher of ``event`` is tested against, or ``None`` if absent.

    ``FileChanged`` is matched on the changed file's basename and the model-switch events on
    :func:`canonical_model_name` of ``to_model``; every other event on its matcher field as is.
    """
    field = event_spec(event).matcher_field
    if field is None:
        return None
    value = hook_input.get(field)
    if event in MODEL_SWITCH_EVENTS:
        return canonical_model_name(value)
    if not isinstance(value, str):
        return None
    if event == "FileChanged":
        return posixpath.basename(value.replace("\\", "/").rstrip("/")) or None
    return value


__all__ = [
    "MODEL_SWITCH_EVENTS",
    "Matcher",
    "Regex",
    "canonical_model_name",
    "compile_matcher",
    "js_regex_to_re2",
    "matcher_value",
]
