"""The built-in secret detectors of :mod:`bus.redaction.redact` (compiled by :mod:`bus.redaction.scan`).

Each detector is a name and alternative regexes; a group named ``v`` marks the part to mask
(``password=`` stays, the value goes), else the whole match is masked. Every alternative
starts with a literal character (word boundaries are look-behinds written *after* it), and
the alternatives are grouped by that character, so the engine jumps from one possible first
character to the next and tries only the alternatives that start there: a string is scanned
once whatever the number of detectors. :data:`TRIGGERS` is a cheaper first look: a string
without any of its literals cannot match, and most strings in a hook input have none.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable
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
#: case) or its value is long enough to be a key.
_WORD_PARTS: Final = ("ass", "ecret", "oken", "uth", "ookie", "redential", "pwd", "pat", "key", "Key")
_GITLAB_KINDS: Final = ("pat", "ptt", "dt", "rt", "soat", "ft", "imt", "cbt", "oas", "agent")
_TRIGGER_ASSIGNMENTS: Final = (r"=\s*[\"']?[A-Za-z0-9+/=_\-]{20}", r":\s*[\"']?[A-Za-z0-9+/=_\-]{20}")
_TRIGGER_WORDS: Final = (
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
    *(f"gl{kind}-" for kind in _GITLAB_KINDS),
    "xox",
    "xapp-",
    "AIza",
    "GOCSPX-",
    "ya29.",
    "eyJ",
    "bearer",
    "Bearer",
    "BEARER",
    "mysql",
    "mariadb",
    "curl",
    "wget",
)
#: Where a word is entered, best first: the separators (the assignments stop there anyway), the
#: letters from the rarest in English text (each upper case one before its lower case), digits and
#: ``_``, then the punctuation of commands and paths; any other character last.
_ANCHORS: Final = "=:ZzQqJjXxKkVvBbPpYyGgFfWwMmUuCcLlDdRrHhSsNnIiOoAaTtEe_0123456789-./"


def _trie(entries: list[tuple[str, str, bool]]) -> list[str]:
    """Alternatives for ``(rest, word, entered_inside)``: ``rest`` ahead (those starting alike
    share their first character), then the whole ``word`` behind if it was entered inside."""
    if any(not rest and not inside for rest, _, inside in entries):
        return [""]  # a whole word read: found, whatever else could follow
    found = [f"(?<={re.escape(word)})" for rest, word, _ in entries if not rest]
    by_first: dict[str, list[tuple[str, str, bool]]] = {}
    for rest, word, inside in entries:
        if rest:
            by_first.setdefault(rest[0], []).append((rest[1:], word, inside))
    for first, group in sorted(by_first.items()):
        tail = _trie(group)
        found.append(re.escape(first) + (tail[0] if len(tail) == 1 else f"(?:{'|'.join(tail)})"))
    return found


def _triggers(assignments: tuple[str, ...], words: tuple[str, ...]) -> re.Pattern[str]:
    """A regex finding any of ``assignments`` or ``words``, shaped for how ``re`` searches.

    ``re`` tries every top-level alternative at every position holding a character that one
    starts with (skipping the others with one comparison each), so the cost is those positions
    times the alternatives. Each word is therefore entered at its rarest character (``_ANCHORS``)
    and confirmed by a look-behind (``ss(?<=ass)``), and words entered at the same character
    share one alternative (a trie): in commands and prose, under half the positions of the words
    written one after another, and under half the alternatives at each. A word containing another
    is dropped (the other finds it). Every top-level alternative starts with a literal character:
    one that does not (``[=:]``) makes ``re`` try every position.
    """
    kept = sorted({w for w in words if not any(other != w and other in w for other in words)})
    entries = []
    for word in kept:
        ranks = [_ANCHORS.index(c) if c in _ANCHORS else len(_ANCHORS) for c in word]
        at = ranks.index(min(ranks))
        entries.append((word[at:], word, at > 0))
    return re.compile("|".join([*assignments, *_trie(entries)]))


#: The cheap first look: ``TRIGGERS.search(text)`` finds one of these words or assignments.
TRIGGERS: Final = _triggers(_TRIGGER_ASSIGNMENTS, _TRIGGER_WORDS)
BUILTIN_NAMES: Final = tuple(dict.fromkeys(d.name for d in BUILTIN_DETECTORS))


__all__ = [
    "BUILTIN_DETECTORS",
    "BUILTIN_NAMES",
    "ENV_LIKE",
    "SECRET_NAME",
    "TRIGGERS",
    "Detector",
    "high_entropy",
    "is_reference",
    "member_rule",
    "name_before",
    "secret_name",
    "shannon_bits",
]
