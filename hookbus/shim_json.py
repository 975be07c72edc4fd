"""How the shim reads the gateway's answer: ``json.loads``'s verdict, without loading ``json``.

The installed hook command starts a fresh interpreter per tool call, so what it loads to read one
small JSON object counts: ``import json`` (its ``re`` and ``enum``) costs 7 ms of a hook started
without ``site``, loading ``_json`` (the C scanner behind it, a shared library) 0.3 ms. The
gateway's answers are short objects of strings, booleans and integers, so a pure-Python reader of
that subset reads them in tens of microseconds. It only ever accepts: on anything outside the
subset (a float, a ``\\u`` escape, a control character, deep nesting, any syntax error) it steps
aside and ``_json``, then ``json`` itself, give the verdict. What it accepts, it reads as
``json.loads`` does (``tests/hookbus/test_shim_json.py`` compares the two).

This module uses only the standard library: the installed command loads it from the package
folder, without the package.
"""

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    from typing import Any

_DIGITS = "0123456789"
_SPACE = " \t\n\r"  # JSON's whitespace: str.isspace() says yes to more
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_WORDS = (("true", True), ("false", False), ("null", None))
_MAX_DEPTH = 32


class _Unsure(Exception):
    """Outside the subset: ``json`` decides."""


def json_object(answer: bytes) -> "dict[str, Any] | None":
    """``answer`` (stripped) when ``json.loads`` reads it as a JSON object, else None."""
    try:
        text = answer.decode()
        parsed, end = _value(text, 0, 0)
        if end != len(text):
            raise _Unsure
    except (_Unsure, IndexError, KeyError, ValueError):  # ValueError: not UTF-8, no closing quote, a huge int
        parsed = _full(answer)
    return parsed if isinstance(parsed, dict) else None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _value(text: str, i: int, depth: int) -> "tuple[Any, int]":
    """The value at ``text[i]`` and the index after it; raises _Unsure outside the subset."""
    first = text[i]
    if first == '"':
        return _string(text, i + 1)
    if first == "{" or first == "[":
        if depth == _MAX_DEPTH:
            raise _Unsure
        return (_object if first == "{" else _array)(text, _skip(text, i + 1), depth + 1)
    for word, value in _WORDS:
        if text.startswith(word, i):
            return value, i + len(word)
    start = i + 1 if first == "-" else i
    end = start
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    if end == start or (text[start] == "0" and end > start + 1) or text[end : end + 1] in (".", "e", "E"):
        raise _Unsure  # not an integer, or one json reads as a float (or refuses)
    return int(text[i:end]), end


def _object(text: str, i: int, depth: int) -> "tuple[dict[str, Any], int]":
    """The object whose ``{`` (and the whitespace after it) is just before ``text[i]``."""
    items: dict[str, Any] = {}
    if text[i] == "}":
        return items, i + 1
    while True:
        if text[i] != '"':
            raise _Unsure
        key, i = _string(text, i + 1)
        i = _skip(text, i)
        if text[i] != ":":
            raise _Unsure
        items[key], i = _value(text, _skip(text, i + 1), depth)  # json keeps a repeated key's last value too
        closed, i = _after_item(text, i, "}")
        if closed:
            return items, i


def _array(text: str, i: int, depth: int) -> "tuple[list[Any], int]":
    """The array whose ``[`` (and the whitespace after it) is just before ``text[i]``."""
    items: list[Any] = []
    if text[i] == "]":
        return items, i + 1
    while True:
        value, i = _value(text, i, depth)
        items.append(value)
        closed, i = _after_item(text, i, "]")
        if closed:
            return items, i


def _after_item(text: str, i: int, close: str) -> tuple[bool, int]:
    """After an item: ``(True, index past close)`` at the end, else ``(False, the next item's index)``."""
    i = _skip(text, i)
    if text[i] == close:
        return True, i + 1
    if text[i] != ",":
        raise _Unsure
    return False, _skip(text, i + 1)


def _string(text: str, i: int) -> tuple[str, int]:
    """The string whose opening quote is just before ``text[i]``; escapes but ``\\u``."""
    parts: list[str] = []
    while True:
        end = text.index('"', i)
        escape = text.find("\\", i, end)
        chunk = text[i : end if escape < 0 else escape]
        if not chunk.isprintable():
            raise _Unsure  # json refuses control characters, and isprintable() is strict enough
        parts.append(chunk)
        if escape < 0:
            return "".join(parts), end + 1
        parts.append(_ESCAPES[text[escape + 1]])  # KeyError: \u or a bad escape, json decides
        i = escape + 2


def _full(answer: bytes) -> "Any":
    """``json.loads(answer)``: from ``_json``'s scanner when it reads all of it, else ``json`` (None if it refuses)."""
    try:
        from _json import make_scanner

        text = answer.decode()
        parsed, end = make_scanner(_Options())(text, 0)  # type: ignore[arg-type]  # duck-typed decoder
        if end == len(text) and end > 0:
            return parsed
    except Exception:  # noqa: S110  # not CPython, not UTF-8, not one JSON value (the scanner's errors need json)
        pass
    import json

    try:
        return json.loads(answer)
    except (ValueError, RecursionError):
        return None


class _Options:
    """What ``_json``'s scanner reads from a ``json.JSONDecoder``: the defaults of ``json.loads``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # "NaN", "Infinity", "-Infinity", as json.loads reads them


__all__ = ["json_object"]
