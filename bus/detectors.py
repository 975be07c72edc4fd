"""The built-in secret detectors of :mod:`bus.redact`, compiled into one regex.

Each detector is a name and alternative regexes; a group named ``v`` marks the part to mask
(``password=`` stays, the value goes), else the whole match is masked. Every alternative
starts with a literal character (word boundaries are look-behinds written *after* it), and
the alternatives are grouped by that character, so the engine jumps from one possible first
character to the next and tries only the alternatives that start there: a string is scanned
once whatever the number of detectors. :data:`TRIGGERS` is a cheaper first look: a string
without any of its literals cannot match, and most strings in a hook input have none.

The text comes from the agent, so the scan is linear in its length: no value pattern runs
over the literal that starts another match of its own (a value stops at ``=``, and the mask
then extends over the rest of the run), a masked value is searched again only for the
well-known tokens inside it, and the command-scoped detectors (a password flag of ``mysql``,
``curl``, ``wget``) look at each command of a line once, from its program's name to its end.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import itertools
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Final


@dataclasses.dataclass(frozen=True, slots=True)
class Detector:
    """A named set of alternative regexes, and an optional veto.

    Each alternative starts with a literal or a character class (word boundaries are written
    as look-behinds *after* the first character) so that the regex engine skips it with one
    comparison at every position where it cannot start.
    """

    name: str
    patterns: tuple[str, ...]
    #: ``check(text, match_start, masked_value)`` may veto a match.
    check: Callable[[str, int, str], bool] | None = None
    #: ``(program, flag)`` regexes: a ``flag`` (its group ``v`` masked) after ``program`` in one command.
    commands: tuple[tuple[str, str], ...] = ()
    #: Where a value stopped at an ``=``, the mask extends over the rest of this run.
    extends: str | None = None


def shannon_bits(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character."""
    counts = Counter(text).values()
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts)


_TOKENISH = re.compile(r"[A-Za-z0-9+/=_\-]+")
_HEXISH = re.compile(r"[0-9a-fA-F\-]+")


def high_entropy(value: str) -> bool:
    """A random-looking token: 20+ characters of a key alphabet, letters and digits mixed, not hex."""
    if len(value) < 20 or not _TOKENISH.fullmatch(value) or _HEXISH.fullmatch(value):
        return False
    digits = sum(c.isdigit() for c in value)
    letters = sum(c.isalpha() for c in value)
    return digits >= 2 and letters >= 4 and shannon_bits(value) >= 3.5


_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET_WORDS: Final = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "privatekey",
        "accesskey",
        "clientsecret",
        "pat",
    }
)
_SECRET_ENDINGS: Final = ("password", "passwd", "secret", "token", "apikey")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{2,}")
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Whether a field or variable name says it holds a secret (``DB_PASSWORD``, ``apiKey``, ``x-auth-token``)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words) or "pwd" in words[1:]:
        return True  # MYSQL_PWD, but not PWD (the working directory)
    return any(a + b in _SECRET_WORDS for a, b in itertools.pairwise(words))


def is_reference(value: str) -> bool:
    """``$VAR``, ``${VAR}``, ``%VAR%``, ``***``, a call or an index (code), an earlier mask: nothing to hide."""
    return (
        not value or value[0] in "$%*<" or value.startswith("[REDACTED") or "(" in value or "[" in value or "{" in value
    )


SECRET_NAME, ENV_LIKE = 1, 2


@functools.lru_cache(maxsize=4096)
def member_rule(key: str) -> int:
    """How an object member is judged by its name: secret whatever its value, secret if high-entropy, or not."""
    if secret_name(key):
        return SECRET_NAME
    return ENV_LIKE if _ENV_NAME.fullmatch(key) else 0


def name_before(text: str, at: int) -> str:
    """The variable name left of the separator at ``at`` (``NAME=``, ``"name": ``), or "" when there is none."""
    end = at
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    if end > 0 and text[end - 1] in "\"'":
        end -= 1
    start = end
    while start > 0 and text[start - 1] in _NAME_CHARS:
        start -= 1
    name = text[start:end]
    if not name or not (name[0].isalpha() or name[0] == "_") or (start > 0 and text[start - 1] in "/\\"):
        return ""
    return name


def _assignment(text: str, at: int, value: str) -> bool:
    name = name_before(text, at)
    if not name:
        return False
    if secret_name(name):
        return not is_reference(value)
    return high_entropy(value)


def _mixed(text: str, at: int, value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _ci(word: str) -> str:
    """``word`` matched case-insensitively, as character classes (cheaper than ``(?i:)`` here)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


def _word(first: str, rest: str, before: str = r"[\w\-]") -> str:
    """``first`` + ``rest`` not preceded by a ``before`` character (the boundary checked after ``first``)."""
    return f"{first}(?<!{before}{first}){rest}"


_SEP = r"[\"']?\s*[:=]\s*[\"']?"


def _value(chars: str) -> str:
    """A value of ``chars`` that stops at ``=`` (another assignment may start there) but keeps
    trailing ``=`` padding: ``[^...=]+(?:=+(?![^...]))?``."""
    return rf"[^{chars}=]+(?:=+(?![^{chars}]))?"


_PASSWORD_CHARS = r"\s\"'`;&|,"  # noqa: S105 (a character class)
_ENV_CHARS = r"\s\"'`;&|,)}\]"
_ASSIGN = r"[\"']?\s*(?:=|:(?=[\s\"']))\s*[\"']?"
_SCHEMES = "|".join(_ci(w) for w in ("bearer", "basic", "token", "digest", "negotiate", "bot"))
#: The built-in detectors, in priority order: where two match the same text, the earlier one names it.
BUILTIN_DETECTORS: Final = (
    Detector(
        "private-key",
        (
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
        ),
    ),
    Detector("anthropic", (_word("s", r"k-ant-[a-z]{2,8}\d{0,3}-[A-Za-z0-9_\-]{20,}"),)),
    Detector("openai", (_word("s", r"k-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),), _mixed),
    Detector("aws-access-key", (_word("A", r"(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])", r"\w"),)),
    Detector(
        "github", (_word("g", r"h[pousr]_[A-Za-z0-9]{36,}", r"\w"), _word("g", r"ithub_pat_[A-Za-z0-9_]{22,}", r"\w"))
    ),
    Detector("gitlab", (_word("g", r"l(?:pat|ptt|dt|rt|soat|ft|imt|cbt|oas|agent)-[A-Za-z0-9_\-]{20,}", r"\w"),)),
    Detector(
        "slack",
        (
            _word("x", r"ox[abposre]-[A-Za-z0-9\-]{10,}", r"\w"),
            _word("x", r"app-\d-[A-Za-z0-9\-]{10,}", r"\w"),
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]+",
        ),
    ),
    Detector(
        "google",
        (
            _word("A", r"Iza[0-9A-Za-z_\-]{35}", r"\w"),
            _word("G", r"OCSPX-[0-9A-Za-z_\-]{20,}", r"\w"),
            _word("y", r"a29\.[0-9A-Za-z_\-]{20,}", r"\w"),
        ),
    ),
    Detector("jwt", (_word("e", r"yJ[A-Za-z0-9_\-]{6,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-+/=]*"),)),
    Detector("url-credentials", (r"://[^\s/:@'\"]*:(?P<v>[^\s/@'\"]+)@",)),
    Detector(
        "authorization",
        (
            _word("[Aa]", _ci("uthorization") + _SEP + f"(?:(?:{_SCHEMES})\\s+)?" + r"(?P<v>[^\s\"',;]+)"),
            _word("[Pp]", _ci("roxy-authorization") + _SEP + f"(?:(?:{_SCHEMES})\\s+)?" + r"(?P<v>[^\s\"',;]+)"),
            _word("[Xx]", "-(?:" + _ci("api-key") + "|" + _ci("auth-token") + ")" + _SEP + r"(?P<v>[^\s\"',;]+)"),
            _word("[Bb]", _ci("earer") + r"\s+(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)"),
        ),
    ),
    Detector(
        "aws-secret",
        (
            _word(
                "[Aa]",
                _ci("ws")
                + "_?"
                + _ci("secret")
                + "_?(?:"
                + _ci("access")
                + "_?)?"
                + _ci("key")
                + _SEP
                + r"(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
            ),
        ),
    ),
    Detector(
        "password",
        (
            _word(
                "[Pp]",
                _ci("ass")
                + "(?:"
                + _ci("word")
                + "|"
                + _ci("wd")
                + ")"
                + _ASSIGN
                + f"(?P<v>{_value(_PASSWORD_CHARS)})",
            ),
            _word(
                "-",
                "-(?:"
                + _ci("password")
                + "|"
                + _ci("passwd")
                + "|"
                + _ci("pass")
                + r")(?:=|\s+)[\"']?"
                + f"(?P<v>{_value(_PASSWORD_CHARS[:-1])})",
            ),
            r"-(?<=\s-)pass(?:in|out)?\s+pass:(?P<v>\S+)",
            _word("s", r"shpass\s+-p\s*(?P<v>\S+)", r"\w"),
        ),
        extends=f"[^{_PASSWORD_CHARS}]*",
    ),
    Detector(
        "password",
        (),
        commands=(  # command-scoped: a password flag after the program's name
            (r"(?<![\w])m(?:ysql|ariadb)[\w\-]*\b", r"\s-p(?P<v>[^\s;&|]+)"),
            (r"(?<![\w])curl\b", r"\s(?:-u\s*|--user[= ])[\"']?[^\s:\"']+:(?P<v>[^\s\"']+)"),
            (r"(?<![\w])wget\b", r"\s(?:--user[= ]|--password[= ])[\"']?(?P<v>[^\s\"']+)"),
        ),
    ),
    # Anchored on the separator (cheap to find); the name left of it is read by the check.
    Detector(
        "env-secret",
        (f"=\\s*[\"']?(?P<v>{_value(_ENV_CHARS)})", f":(?=[\\s\"'])\\s*[\"']?(?P<v>{_value(_ENV_CHARS)})"),
        _assignment,
        extends=f"[^{_ENV_CHARS}]*",
    ),
)
#: Text that every built-in match contains; most strings have none and skip the full scan. A bare
#: ``=`` or ``:`` is not enough to look closer (``--shard=3``, ``rule: Bash(...)``): an assignment
#: is suspect when its name has a secret word (their fragments below, as written in any usual
#: case) or its value is long enough to be a key. Every alternative starts with a literal, so
#: the engine jumps between their first characters.
_WORD_PARTS: Final = ("ass", "ecret", "oken", "uth", "ookie", "redential", "pwd", "pat", "key", "Key")
TRIGGERS: Final = re.compile(
    "|".join(
        [
            r"=\s*[\"']?[A-Za-z0-9+/=_\-]{20}",
            r":\s*[\"']?[A-Za-z0-9+/=_\-]{20}",
            "://",
            *_WORD_PARTS,
            *(part.upper() for part in _WORD_PARTS if part.islower()),
            "-----BEGIN",
            "sk-",
            "AKIA",
            "ASIA",
            "ABIA",
            "ACCA",
            "ghp_",
            "gho_",
            "ghu_",
            "ghs_",
            "ghr_",
            "github_pat_",
            r"gl(?:pat|ptt|dt|rt|soat|ft|imt|cbt|oas|agent)-",
            "xox",
            "xapp-",
            "AIza",
            "GOCSPX-",
            r"ya29\.",
            "eyJ",
            "bearer",
            "Bearer",
            "BEARER",
            "mysql",
            "mariadb",
            "curl",
            "wget",
        ]
    )
)
BUILTIN_NAMES: Final = tuple(dict.fromkeys(d.name for d in BUILTIN_DETECTORS))


def _first_literal(alternative: str) -> list[tuple[str, str]]:
    """``(first character, rest)`` of an alternative; a leading ``[Xx]`` gives one pair per letter."""
    if re.match(r"\[[A-Za-z]{2}\]", alternative):
        return [(alternative[1], alternative[4:]), (alternative[2], alternative[4:])]
    if alternative[0] in "\\[(.*+?{^$|":
        raise ValueError(f"a built-in alternative must start with a literal character: {alternative!r}")
    return [(alternative[0], alternative[1:])]


def _combine(detectors: Sequence[Detector]) -> re.Pattern[str]:
    """One alternation, grouped by first character (``s(?:...)|A(?:...)|...``), so the engine
    skips to the characters some alternative starts with and then tries only those alternatives.
    Each alternative of detector ``i`` ends with an empty group ``d{i}_{n}`` (the last group to
    close, so ``lastgroup`` names the detector); its value groups are ``v{i}_{n}``."""
    by_first: dict[str, list[str]] = {}
    for i, detector in enumerate(detectors):
        names = (f"{i}_{n}" for n in range(1000))
        for alternative in detector.patterns:
            for first, rest in _first_literal(alternative):
                parts = rest.split("(?P<v>")
                body = parts[0] + "".join(f"(?P<v{next(names)}>{part}" for part in parts[1:])
                by_first.setdefault(first, []).append(f"{body}(?P<d{next(names)}>)")
    if not by_first:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"{re.escape(first)}(?:{'|'.join(rests)})" for first, rests in by_first.items()))


#: Where a command ends, for the command-scoped detectors.
_COMMAND_END: Final = re.compile(r"[\n;&|]")


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    pattern: re.Pattern[str]
    detectors: tuple[Detector, ...]
    value_groups: tuple[tuple[str, ...], ...]
    #: The detectors without a value group (well-known tokens), searched for inside a masked value.
    tokens: re.Pattern[str]
    token_detectors: tuple[int, ...]
    #: ``(detector index, program, flag)`` of the command-scoped detectors.
    commands: tuple[tuple[int, re.Pattern[str], re.Pattern[str]], ...]
    extends: tuple[re.Pattern[str] | None, ...]

    @classmethod
    def of(cls, detectors: Sequence[Detector]) -> Compiled:
        pattern = _combine(detectors)
        groups = tuple(tuple(g for g in pattern.groupindex if g.startswith(f"v{i}_")) for i in range(len(detectors)))
        token_detectors = tuple(
            i for i, d in enumerate(detectors) if d.patterns and not any("(?P<v>" in p for p in d.patterns)
        )
        commands = tuple(
            (i, re.compile(program), re.compile(flag)) for i, d in enumerate(detectors) for program, flag in d.commands
        )
        extends = tuple(re.compile(d.extends) if d.extends else None for d in detectors)
        return cls(
            pattern,
            tuple(detectors),
            groups,
            _combine([detectors[i] for i in token_detectors]),
            token_detectors,
            commands,
            extends,
        )


BUILTIN = Compiled.of(BUILTIN_DETECTORS)


class OverBudget(Exception):
    """Masking ran past the deadline set with :func:`masking_deadline`."""


_DEADLINE: Final[contextvars.ContextVar[float | None]] = contextvars.ContextVar("hookbus_mask_deadline", default=None)
#: Matches between two looks at the clock.
_MATCHES_PER_CLOCK: Final = 512


@contextlib.contextmanager
def masking_deadline(budget_s: float) -> Iterator[None]:
    """Inside the block, a scan that runs past ``budget_s`` raises :class:`OverBudget` (a text
    built to match at every other character costs a Python step per match, linear but slow)."""
    token = _DEADLINE.set(time.perf_counter() + budget_s)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def scan(text: str, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    """Append ``(start, end, detector index, name)`` of every built-in match in ``text`` to ``spans``."""
    pos, search = 0, compiled.pattern.search
    deadline, count = _DEADLINE.get(), 0
    while (match := search(text, pos)) is not None:
        count += 1
        if deadline is not None and count % _MATCHES_PER_CLOCK == 0 and time.perf_counter() > deadline:
            raise OverBudget(f"masking took over its budget ({count} matches in {len(text)} characters)")
        index = int(match.lastgroup.partition("_")[0][1:]) if match.lastgroup else 0
        detector = compiled.detectors[index]
        group = next((g for g in compiled.value_groups[index] if match.group(g) is not None), None)
        start, end = match.span(group or 0)
        if detector.check is not None and not detector.check(text, match.start(), text[start:end]):
            # A token may hide in a value (the next search starts inside it); a match without a
            # value failed as a whole, and so would every later start inside it.
            pos = start if group else match.end()
            continue
        extends = compiled.extends[index]
        if extends is not None and text.startswith("=", end):  # ``TOKEN=abc=def``: all of it
            end = extends.match(text, end).end()  # type: ignore[union-attr]
        spans.append((start, end, index, detector.name))
        if group:  # the more specific token inside the value names the mask (a GitHub token in GH_TOKEN=...)
            _tokens(text, start, end, compiled, spans)
        pos = max(end, match.start() + 1)
    if compiled.commands:
        _command_scoped(text, compiled, spans)


def _tokens(text: str, start: int, end: int, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    pos = start
    while (match := compiled.tokens.search(text, pos, end)) is not None:
        inner = int(match.lastgroup.partition("_")[0][1:]) if match.lastgroup else 0
        index = compiled.token_detectors[inner]
        detector = compiled.detectors[index]
        if detector.check is not None and not detector.check(text, match.start(), match.group()):
            pos = match.end()
            continue
        spans.append((match.start(), match.end(), index, detector.name))
        pos = match.end()


def _command_scoped(text: str, compiled: Compiled, spans: list[tuple[int, int, int, str]]) -> None:
    """Password flags after their program, within one command: each command is looked at once
    per program, from the program's first appearance in it to the command's end."""
    for index, program, flag in compiled.commands:
        pos, name = 0, compiled.detectors[index].name
        while (found := program.search(text, pos)) is not None:
            stop = _COMMAND_END.search(text, found.end())
            end = stop.start() if stop is not None else len(text)
            at = found.end()
            while (hit := flag.search(text, at, end)) is not None:
                whole = flag.match(text, hit.start())  # the value may run on past the command's end
                assert whole is not None
                spans.append((whole.start("v"), whole.end("v"), index, name))
                at = max(hit.end(), at + 1)
            pos = end + 1


__all__ = [
    "BUILTIN",
    "BUILTIN_DETECTORS",
    "BUILTIN_NAMES",
    "ENV_LIKE",
    "SECRET_NAME",
    "TRIGGERS",
    "Compiled",
    "Detector",
    "OverBudget",
    "high_entropy",
    "is_reference",
    "masking_deadline",
    "member_rule",
    "name_before",
    "scan",
    "secret_name",
    "shannon_bits",
]
