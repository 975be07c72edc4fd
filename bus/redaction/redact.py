"""Masking secrets before anything is written: the decision log, dead letters, logs.

Built-in detectors (:mod:`bus.redaction.detectors`) find well-known credentials by shape; the
policy adds its own under ``hookbus.redact`` (JSON pointers whose whole value is masked, and
named regexes). A masked span becomes ``[REDACTED:<detector>]``, and the caller learns where
(a JSON pointer) and by which detector, never the value. Handlers always see the real input:
only copies meant for storage go through a :class:`Redactor`.

Object members whose *name* says secret (``api_key``, ``GITHUB_TOKEN``, ``Authorization``)
are masked whatever their value looks like, and upper-case environment-style names are
masked when their value is high-entropy. :func:`install_log_redaction` masks log lines.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

import orjson
import re2

from bus.redaction.detectors import (
    BUILTIN_DETECTORS,
    BUILTIN_NAMES,
    SECRET_NAME,
    TRIGGERS,
    high_entropy,
    is_reference,
    member_rule,
)
from bus.redaction.scan import BUILTIN, Compiled, scan

#: What a masked span is replaced with (``{}``: the detector's name).
MASK: Final = "[REDACTED:{}]"
#: The detector name of a policy pointer mask.
POINTER: Final = "pointer"
#: The detector name of a member masked for its name (``password``, ``X_API_TOKEN``, ...).
SECRET_FIELD: Final = "env-secret"  # noqa: S105 (a detector name)

Path = tuple[str, ...]


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def to_pointer(path: Iterable[str]) -> str:
    """A JSON pointer (RFC 6901) from path segments."""
    return "".join("/" + _escape(segment) for segment in path)


def parse_pointer(pointer: str) -> Path:
    """Path segments of a JSON pointer; ``*`` stands for any one member or index. ValueError if malformed."""
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/' (got {pointer!r})")
    if re.search(r"~[^01]|~$", pointer):
        raise ValueError(f"'~' in a JSON pointer must be '~0' or '~1' (got {pointer!r})")
    return tuple(s.replace("~1", "/").replace("~0", "~") for s in pointer[1:].split("/"))


class Pattern(Protocol):
    """A compiled policy regex: an RE2 pattern (its matches have ``group``, ``start``, ``end``)."""

    @property
    def groupindex(self) -> Mapping[str, int]: ...
    def search(self, text: str, /) -> Any: ...
    def finditer(self, text: str, /) -> Iterator[Any]: ...


_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported to the policy's author, not logged
#: What Python's ``re`` has and RE2 lacks (none can be matched in linear time), and why.
_UNSUPPORTED: Final = {
    "(?<=": "lookbehind",
    "(?<!": "lookbehind",
    "(?=": "lookahead",
    "(?!": "lookahead",
    "(?P=": "back-reference",
    "(?(": "conditional group",
    "(?>": "atomic group",
}
_EMPTY_MIN: Final = re.compile(r"\{,([0-9]+)\}")
#: Lone surrogates cannot be UTF-8 for RE2: each is matched as U+FFFD (offsets stay the same).
_SURROGATES: Final = dict.fromkeys(range(0xD800, 0xE000), 0xFFFD)


def compile_pattern(regex: str) -> Pattern:
    """A policy regex, checked: RE2 runs it and it does not match the empty string. ValueError otherwise.

    Written for Python's :mod:`re`, run on RE2 in time linear in the text (:func:`re2_syntax`);
    ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII, and ``$`` matches at the very end only.
    """
    try:
        compiled: Pattern = re2.compile(re2_syntax(regex), _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:  # the latter: a lone surrogate in the pattern
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"not a valid regex {regex!r}: {reason}") from None
    if compiled.search("") is not None:
        raise ValueError(f"regex {regex!r} matches the empty string")
    return compiled


def re2_syntax(regex: str) -> str:
    """A Python :mod:`re` regex in RE2 syntax (``\\Z``, ``{,n}``, a ``[`` inside a class); ValueError,
    naming the regex, for what RE2 cannot run: look-around, back-references, conditional and atomic groups."""
    out: list[str] = []
    i, n, depth = 0, len(regex), 0  # depth: 1 inside a class
    while i < n:
        c, nxt = regex[i], regex[i + 1 : i + 2]
        opener = next((o for o in _UNSUPPORTED if regex.startswith(o, i)), None) if c == "(" and not depth else None
        if opener or (c == "\\" and not depth and nxt != "" and nxt in "123456789"):
            what, ref = (_UNSUPPORTED[opener], opener) if opener else ("back-reference", c + nxt)
            why = "RE2 has no look-around" if "look" in what else "RE2 has none"
            raise ValueError(f"regex {regex!r} is not supported: {what} {ref!r} ({why})")
        if c == "\\":  # Python's \Z is RE2's \z; [\b] is a backspace
            out.append(r"\z" if nxt == "Z" and not depth else r"\x08" if nxt == "b" and depth else c + nxt)
            i += 2
            continue
        if depth == 0 and c == "{" and (empty_min := _EMPTY_MIN.match(regex, i)):
            out.append(f"{{0,{empty_min.group(1)}}}")  # Python's {,n} is {0,n}; RE2 reads it literally
            i = empty_min.end()
            continue
        if c == "[" and not depth:  # a '^' and a leading ']' (a literal) are part of the opening
            j = i + 1 + regex.startswith("^", i + 1)
            lead = regex.startswith("]", j)
            out.append(regex[i:j] + ("\\]" if lead else ""))
            depth, i = 1, j + lead
            continue
        if c == "[":
            c = "\\["  # a literal '[' (RE2 would read ``[:alpha:]`` as a class)
        elif c == "]" and depth:
            depth = 0
        out.append(c)
        i += 1
    return "".join(out)


def _search(pattern: Pattern, text: str) -> bool:
    try:
        return pattern.search(text) is not None
    except UnicodeEncodeError:
        return pattern.search(text.translate(_SURROGATES)) is not None


def _finditer(pattern: Pattern, text: str) -> list[Any]:
    try:
        return list(pattern.finditer(text))
    except UnicodeEncodeError:
        return list(pattern.finditer(text.translate(_SURROGATES)))


Masked = list[tuple[Path, str]]

#: Strings a redactor remembers as clean (session ids, paths, handler ids, a repeated command):
#: up to this many, each up to :data:`_CLEAN_CHARS` long; then it starts over.
_CLEAN_MAX = 4096
_CLEAN_CHARS = 512


class Redactor:
    """Masks secrets in strings and JSON values; built once per policy and shared.

    ``pointers`` (JSON pointers into the hook input) are masked whole; ``patterns`` are extra
    ``(name, regex)`` detectors (a group named ``secret`` limits the mask to it); ``builtins``
    false turns the built-in detectors off, ``disable`` some of them.
    """

    def __init__(
        self,
        pointers: Iterable[str] = (),
        patterns: Iterable[tuple[str, str]] = (),
        *,
        builtins: bool = True,
        disable: Iterable[str] = (),
    ) -> None:
        off = set(disable)
        kept = [d for d in BUILTIN_DETECTORS if d.name not in off] if builtins else []
        self._builtin = BUILTIN if len(kept) == len(BUILTIN_DETECTORS) else (Compiled.of(kept) if kept else None)
        self._member_masks = any(d.name == SECRET_FIELD for d in kept)
        self._custom = tuple((name, compile_pattern(regex)) for name, regex in patterns)
        self._fast = not self._custom and self._builtin is not None  # one TRIGGERS search decides a string
        self._pointers = tuple(parse_pointer(p) for p in pointers)
        #: Strings no detector matched: most of a record's strings repeat from event to event.
        self._clean: dict[str, None] = {}

    @property
    def active(self) -> bool:
        """Whether this redactor can mask anything at all."""
        return bool(self._builtin or self._custom or self._pointers)

    # -- strings --------------------------------------------------------------------------

    def text(self, text: str) -> tuple[str, list[str]]:
        """``text`` with every detected secret masked, and the detectors that fired (in order, repeated)."""
        spans: list[tuple[int, int, int, str]] = []
        if self._builtin is not None and len(text) >= 8 and TRIGGERS.search(text) is not None:
            scan(text, self._builtin, spans)
        for name, pattern in self._custom:
            secret = pattern.groupindex.get("secret")
            for match in _finditer(pattern, text):
                group = secret if secret is not None and match.group(secret) is not None else 0
                if match.end(group) > match.start(group):
                    spans.append((match.start(group), match.end(group), len(BUILTIN_DETECTORS), name))
        if not spans:
            return text, []
        spans.sort()
        clusters: list[list[Any]] = []  # [start, end, rank, name]: overlapping spans become one mask
        for start, end, rank, name in spans:
            if clusters and start < clusters[-1][1]:
                last = clusters[-1]
                last[1] = max(last[1], end)
                if rank < last[2]:  # the more specific detector names it (a JWT inside a cookie)
                    last[2], last[3] = rank, name
            else:
                clusters.append([start, end, rank, name])
        out, at = [], 0
        for start, end, _, name in clusters:
            out += [text[at:start], MASK.format(name)]
            at = end
        out.append(text[at:])
        return "".join(out), [cluster[3] for cluster in clusters]

    # -- JSON values ----------------------------------------------------------------------

    def value(self, value: Any, at: Path = (), masked: Masked | None = None, *, pointers: bool = False) -> Any:
        """A masked copy of a JSON value (the value itself when nothing is masked); ``masked``
        collects ``(path, detector)``. ``pointers`` applies the policy's pointers (hook input only)."""
        out = masked if masked is not None else []
        states = self._pointers if pointers else ()
        if states and () in states:
            out.append((at, POINTER))
            return MASK.format(POINTER)
        if not value:  # "", [], {} (a record's shadow results, most often): nothing to mask
            return value
        if isinstance(value, str):
            return self._string(value, at, out)
        return self._walk(value, at, states, out)

    def _suspect(self, text: str) -> bool:
        """Whether a detector may match ``text`` (one cheap search each; most strings are clean)."""
        if self._builtin is not None and len(text) >= 8 and TRIGGERS.search(text) is not None:
            return True
        return any(_search(pattern, text) for _, pattern in self._custom)

    def _string(self, text: str, path: Path, masked: Masked) -> str:
        if text in self._clean:
            return text
        if not self._suspect(text):
            self._remember_clean(text)
            return text
        return self._mask(text, path, masked)

    def _mask(self, text: str, path: Path, masked: Masked) -> str:
        """``text`` masked (a suspect: a detector may match), remembered when nothing was."""
        new, names = self.text(text)
        if names:
            masked.extend((path, name) for name in names)
        else:
            self._remember_clean(text)
        return new

    def _remember_clean(self, text: str) -> None:
        if len(text) <= _CLEAN_CHARS:
            if len(self._clean) >= _CLEAN_MAX:
                self._clean.clear()
            self._clean[text] = None

    def _walk(self, value: Any, path: Path, states: tuple[Path, ...], masked: Masked) -> Any:
        """``value`` (a dict or a list) masked; a new container only where something changed.

        The hot loop of every record: paths are built only for what is masked, and a string
        costs a length check and one :data:`~bus.redaction.detectors.TRIGGERS` search unless it is suspect.
        """
        if type(value) is dict:
            items: Iterable[tuple[Any, Any]] = value.items()
        elif type(value) is list:
            items = enumerate(value)
        else:
            return value
        copy: Any = None
        fast = self._fast
        clean = self._clean
        heads = {s[0] for s in states} if states else ()  # the pointers' next segments: most members match none
        for key, item in items:
            sub: tuple[Path, ...] = ()
            if heads and ((name := key if type(key) is str else str(key)) in heads or "*" in heads):
                sub = tuple(s[1:] for s in states if s[0] == name or s[0] == "*")
                if () in sub:
                    masked.append(((*path, name), POINTER))
                    new: Any = MASK.format(POINTER)
                    if copy is None:
                        copy = dict(value) if type(value) is dict else list(value)
                    copy[key] = new
                    continue
            kind = type(item)
            if kind is str:
                new = item
                if item in clean:
                    pass
                elif (len(item) >= 8 and TRIGGERS.search(item) is not None) if fast else self._suspect(item):
                    new = self._mask(item, (*path, str(key)), masked)
                else:
                    self._remember_clean(item)
                if (
                    new is item
                    and self._member_masks
                    and type(key) is str
                    and (rule := member_rule(key))
                    and not is_reference(item)
                    and (rule == SECRET_NAME or high_entropy(item))
                ):
                    masked.append(((*path, key), SECRET_FIELD))
                    new = MASK.format(SECRET_FIELD)
            elif kind is dict or kind is list:
                new = self._walk(item, (*path, str(key)), sub, masked)
            else:
                continue
            if new is not item:
                if copy is None:
                    copy = dict(value) if type(value) is dict else list(value)
                copy[key] = new
        return value if copy is None else copy

    def payload(
        self, raw: bytes, parsed: Any = None, at: Path = ("input",), masked: Masked | None = None
    ) -> tuple[bytes, Any]:
        """The hook input as stored: the same bytes when nothing is masked, else re-serialised.
        Also returns the masked parsed value (None when ``raw`` is not JSON)."""
        out = masked if masked is not None else []
        if parsed is None:
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                text, names = self.text(raw.decode("utf-8", "replace"))
                out.extend((at, name) for name in names)
                return (text.encode() if names else raw), None
        before = len(out)
        new = self._walk(parsed, at, self._pointers, out)
        return (raw if len(out) == before else orjson.dumps(new)), new

    def fields(self, fields: Mapping[str, bytes | str | int]) -> dict[str, bytes | str | int]:
        """A stream entry with every value masked (``p``, the hook input, as JSON when it is)."""
        out: dict[str, bytes | str | int] = {}
        for name, value in fields.items():
            if name == "p" and isinstance(value, bytes):
                out[name] = self.payload(value)[0]
            elif isinstance(value, bytes):
                out[name] = self.text(value.decode("utf-8", "replace"))[0].encode()
            elif isinstance(value, str):
                out[name] = self.text(value)[0]
            else:
                out[name] = value
        return out


def masked_list(masked: Masked) -> list[dict[str, str]]:
    """``[{"pointer", "detector"}]`` for a record, each pair once, in order."""
    seen: dict[tuple[str, str], None] = {}
    for path, name in masked:
        seen.setdefault((to_pointer(path), name), None)
    return [{"pointer": pointer, "detector": name} for pointer, name in seen]


DEFAULT: Final = Redactor()


class _Pattern(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def regex(self) -> str: ...


class RedactConfig(Protocol):
    """What :func:`redactor_for` reads: ``hookbus.redact`` of a policy (:class:`bus.policy.schema.RedactSettings`)."""

    @property
    def pointers(self) -> Sequence[str]: ...
    @property
    def patterns(self) -> Sequence[_Pattern]: ...
    @property
    def builtins(self) -> bool: ...
    @property
    def disable(self) -> Sequence[str]: ...


def redactor_for(config: RedactConfig) -> Redactor:
    """The redactor of a policy's ``hookbus.redact`` section (the shared default when it is all defaults)."""
    if not config.pointers and not config.patterns and config.builtins and not config.disable:
        return DEFAULT
    return Redactor(
        config.pointers, [(p.name, p.regex) for p in config.patterns], builtins=config.builtins, disable=config.disable
    )


def _redact_log_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: logging reports it later, as it would have
        return
    masked, names = DEFAULT.text(message)
    if names:
        record.msg, record.args = masked, ()
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        record.exc_text = DEFAULT.text(logging.Formatter().formatException(record.exc_info))[0]
    if record.stack_info:
        record.stack_info = DEFAULT.text(record.stack_info)[0]


_installed: list[bool] = []


def install_log_redaction() -> None:
    """Mask secrets in every log record this process creates, tracebacks included (idempotent)."""
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_log_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed.append(True)


__all__ = [
    "BUILTIN_NAMES",
    "DEFAULT",
    "MASK",
    "POINTER",
    "SECRET_FIELD",
    "Pattern",
    "RedactConfig",
    "Redactor",
    "compile_pattern",
    "install_log_redaction",
    "masked_list",
    "parse_pointer",
    "re2_syntax",
    "redactor_for",
    "to_pointer",
]
