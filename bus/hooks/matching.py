"""Group ``matcher`` evaluation, exactly as Claude Code does it.

A matcher group applies to an event when its ``matcher`` accepts the event's matcher value
(``tool_name`` on tool events, ``source`` on SessionStart, ...; see
:attr:`bus.hooks.events.EventSpec.matcher_field`). The matcher string is read in one of three ways:

* ``"*"``, ``""`` or no matcher: everything matches;
* only letters, digits, ``_``, ``-``, spaces, ``,`` and ``|``: one exact name, or a list of exact
  names separated by ``|`` or ``,`` (whitespace around each name is trimmed);
* anything else: a JavaScript regular expression tested unanchored (``RegExp.prototype.test``),
  run here with :func:`re.search` after translating the JavaScript-only syntax Python lacks.

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
from typing import Any, Final, Literal

from bus.hooks.events import NARROW_MATCHER_EVENTS, event_spec

#: Events whose matcher compares the canonical target model name.
MODEL_SWITCH_EVENTS: Final = frozenset({"PreModelSwitch", "PostModelSwitch"})

_EXACT_CHARS: Final = re.compile(r"[A-Za-z0-9_\- ,|]+")
_NARROW_CHARS: Final = re.compile(r"[A-Za-z0-9_|]+")
_EXACT_SEPARATORS: Final = re.compile(r"[|,]")
_MODEL_SUFFIX: Final = re.compile(r"\[[^\[\]]*\]\s*$")
_NAMED_BACKREF: Final = re.compile(r"\\k<([A-Za-z_][A-Za-z0-9_]*)>")
#: Letters JavaScript (without the ``u`` flag) reads as escapes; any other is the letter itself.
_JS_LETTER_ESCAPES: Final = frozenset("bBdDwWsSfnrtvxu")

MatcherKind = Literal["all", "exact", "regex"]


@dataclass(frozen=True, slots=True)
class Matcher:
    """A compiled group matcher; call :meth:`matches` with the event's matcher value."""

    source: str | None
    kind: MatcherKind
    names: frozenset[str] = frozenset()
    regex: re.Pattern[str] | None = None
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
        return self.regex.search(value) is not None


_MATCH_ALL: Final = Matcher(source=None, kind="all")


@functools.lru_cache(maxsize=4096)
def compile_matcher(matcher: str | None, event: str) -> Matcher:
    """Compile the ``matcher`` of a group registered on ``event``.

    Raises :class:`ValueError` when the matcher falls on the regex path and is not a valid
    regular expression. Events without a matcher field ignore the matcher (and never raise).
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
        regex = re.compile(js_regex_to_python(matcher), re.ASCII)
    except re.error as exc:
        raise ValueError(f"invalid matcher regex {matcher!r} on {event}: {exc}") from exc
    return Matcher(source=matcher, kind="regex", regex=regex, match_missing=match_missing)


def js_regex_to_python(pattern: str) -> str:
    """Translate the JavaScript-only parts of a regex to Python ``re`` syntax.

    Handles named groups ``(?<name>...)`` and back-references ``\\k<name>``, the JavaScript
    ``$`` (end of input only, never before a final newline), and the classes ``[]`` (matches
    nothing) and ``[^]`` (matches any character). Everything else is passed through as is.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            escape, i = _translate_escape(pattern, i)
            out.append(escape)
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:  # unterminated: let ``re`` report it
                out.append(pattern[i:])
                break
            body = pattern[i + 1 : end]
            if body in ("", "^"):
                out.append("(?!)" if body == "" else r"[\s\S]")
            else:
                out.append("[" + _class_body(body) + "]")
            i = end + 1
        elif pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
        elif c == "$":
            out.append(r"\Z")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _translate_escape(pattern: str, i: int) -> tuple[str, int]:
    """Translate the escape sequence at ``pattern[i]`` (a backslash); return it and the next index."""
    named = _NAMED_BACKREF.match(pattern, i)
    if named:
        return f"(?P={named.group(1)})", named.end()
    nxt = pattern[i + 1 : i + 2]
    if nxt == "c" and pattern[i + 2 : i + 3].isascii() and pattern[i + 2 : i + 3].isalpha():
        return re.escape(chr(ord(pattern[i + 2]) % 32)), i + 3
    if nxt.isascii() and nxt.isalpha() and nxt not in _JS_LETTER_ESCAPES:
        return nxt, i + 2  # JavaScript identity escape: ``\e`` is a plain ``e``
    return pattern[i : i + 2], i + 2


def _class_body(body: str) -> str:
    """A JavaScript class body made safe for Python (no nested-set or set-operation syntax)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\":
            escape, i = _translate_escape(body, i)
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
    "canonical_model_name",
    "compile_matcher",
    "js_regex_to_python",
    "matcher_value",
]
