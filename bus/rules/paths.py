"""File path rules: gitignore globs anchored at the root, the home directory or the working directory.

``Read(**/.env)``, ``Edit(//etc/**)``, ``Read(~/.ssh/**)``: :func:`path_matches` tests one
pattern against one path. A pattern is anchored at ``//`` (the root), ``~/`` (home) or the
working directory (``/x``, ``./x``, ``x/y``); one without a slash matches at any depth below
it, and so does a one-directory pattern such as ``secrets/**`` in a deny or ask rule. Any
directory at all, inside the project or not, is ``//**/``: ``Read(//**/id_rsa)``.

``~`` is the home of the user the *agent* runs as, never the dispatcher's: :func:`agent_home`
reads it from the input: :data:`HOME_FIELD`, which the gateway sets from the header
``X-Hookbus-Home`` (``hookbus hook`` sends its ``$HOME``), else the folder its
``transcript_path`` lies in (``/home/dev`` for ``/home/dev/.claude/projects/...``). A deny or
ask rule's ``~/`` also matches below every conventional home (``/home/*``, ``/root``,
``/Users/*``, ``/var/home/*``, ``C:/Users/*``), so it holds when the home is unknown or taken
wrongly (so does an ``if``, which decides whether a handler runs); an allow rule's ``~/`` only
below the agent's home, and nowhere when that is unknown.
A path the agent sends as ``~/x`` is below its home, or below ``/home/~`` (which every deny and
ask rule's ``~/`` covers) when that is unknown.

A rule pack checks every file tool call against every path rule it has, so
:class:`PathRules` compiles one list's patterns into one alternation per anchor: a path is
normalised once and matched once per anchor, and the first rule of the list that matches is
named by its group.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bus.rules.globs import gitignore_regex

Anchor = Literal["root", "home", "cwd"]
_WINDOWS_DRIVE: Final = re.compile(r"([A-Za-z]):[\\/]")
#: A conventional home directory at the start of a normalised path.
_ANY_HOME: Final = re.compile(r"/(?:home/[^/]+|root|Users/[^/]+|var/home/[^/]+|[a-z]/Users/[^/]+)(?=/|$)")
#: The agents' own folders in a home (``~/.claude``, ``~/.codex``, ...), where transcripts are kept.
_AGENT_FOLDER: Final = re.compile(
    r"/\.(?:claude|codex|gemini|copilot|qwen|factory|cursor|kiro|augment|cline|codeium|windsurf|peri|config|local)/"
)
#: The field of a canonical input that names the agent's home (the gateway sets it from ``X-Hookbus-Home``).
HOME_FIELD: Final = "agent_home"
#: A transcript path longer than this is not read for a home.
PATH_CHARS: Final = 4096
#: Where a ``~/`` path lies when the agent's home is unknown (below every deny rule's ``~/``).
UNKNOWN_HOME: Final = "/home/~"


@dataclass(frozen=True, slots=True)
class PathPattern:
    anchor: Anchor
    regex: re.Pattern[str]  # matched against the path relative to the anchor


@functools.lru_cache(maxsize=4096)
def path_pattern(content: str, deny_rule: bool) -> PathPattern:
    """The anchor and regex of a path rule's content (``deny_rule``: a deny or ask rule)."""
    pattern = content.strip()
    anchor: Anchor = "cwd"
    if pattern.startswith("//"):
        anchor, rel, anchored = "root", pattern[2:], True
    elif pattern == "~" or pattern.startswith("~/"):
        anchor, rel, anchored = "home", pattern[2:], True
    elif pattern.startswith(("/", "./")):  # ``/x`` is settings-relative in Claude Code: cwd here
        rel, anchored = pattern[pattern.index("/") + 1 :], True
    else:
        rel = pattern
        anchored = "/" in rel.rstrip("/")
        if deny_rule and re.fullmatch(r"[^/]+/\*\*", rel):
            anchored = False  # deny/ask: ``secrets/**`` matches a ``secrets`` dir at any depth
    if rel.endswith("/"):
        rel += "**"
    if not rel.strip("/"):
        return PathPattern(anchor, re.compile(r".*", re.DOTALL))
    if not anchored:
        rel = "**/" + rel
    return PathPattern(anchor, re.compile(gitignore_regex(rel) + r"(?:/.*)?", re.DOTALL))


def normalize_path(path: str) -> str:
    """POSIX form: ``C:\\Users\\a`` -> ``/c/Users/a``; ``..`` and doubled slashes resolved."""
    drive = _WINDOWS_DRIVE.match(path)
    if drive:
        path = f"/{drive.group(1).lower()}/{path[3:]}".replace("\\", "/")
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _relative(path: str, base: str) -> str | None:
    if base == "/":
        return path[1:] if path.startswith("/") else None
    if path == base:
        return ""
    return path[len(base) + 1 :] if path.startswith(base + "/") else None


def home_path(value: object) -> str | None:
    """``value`` normalised when it can be a home directory (an absolute path of at most
    :data:`PATH_CHARS` characters, no control character, not ``/``), else None."""
    if not isinstance(value, str) or len(value) > PATH_CHARS or not value.isprintable():
        return None
    home = normalize_path(value)
    return home if home.startswith("/") and len(home) > 1 else None


def agent_home(hook_input: object) -> str | None:
    """The home of the user the agent runs as, from its input: :data:`HOME_FIELD`, else the folder
    holding the agent's own folder in ``transcript_path`` (``/home/dev/.claude/projects/x.jsonl``
    -> ``/home/dev``), else None."""
    if not isinstance(hook_input, dict) and not isinstance(hook_input, Mapping):  # a dict is checked faster
        return None
    given = hook_input.get(HOME_FIELD)
    if given is not None and (given := home_path(given)) is not None:
        return given
    transcript = hook_input.get("transcript_path")
    return _transcript_home(transcript) if isinstance(transcript, str) and len(transcript) <= PATH_CHARS else None


@functools.lru_cache(maxsize=1024)  # one transcript a session, read by every rule handler of its events
def _transcript_home(transcript: str) -> str | None:
    transcript = normalize_path(transcript)
    found = _AGENT_FOLDER.search(transcript)
    home = transcript[: found.start()] if found else ""
    return home if home.startswith("/") and len(home) > 1 else None


def expand_home(path: str, home: str | None) -> str:
    """``~`` and ``~/x`` below ``home`` (below :data:`UNKNOWN_HOME` when it is None); other paths as given."""
    if path == "~" or path.startswith(("~/", "~\\")):
        return (home or UNKNOWN_HOME) + "/" + path[2:] if len(path) > 2 else home or UNKNOWN_HOME
    return path


def agent_path(path: str, cwd: str, home: str | None) -> str:
    """A path an agent's tool was given, absolute: ``~`` is ``home`` (kept as ``~/...`` when that is
    unknown: rules judge it below :data:`UNKNOWN_HOME`), a relative path is below ``cwd``."""
    if path == "~" or path.startswith("~/"):
        return path if home is None else posixpath.normpath(expand_home(path, home))
    return posixpath.normpath(posixpath.join(cwd, path))


def _absolute(path: str, base_cwd: str | None, home: str | None = None) -> str:
    path = normalize_path(expand_home(path, home))
    if not path.startswith("/") and base_cwd is not None:
        return posixpath.normpath(posixpath.join(base_cwd, path))
    return path


def _bases(anchor: Anchor, path: str, base_cwd: str | None, home: str | None, any_home: bool) -> list[str | None]:
    """The folders ``path`` is matched below for ``anchor`` (None: no cwd, every tail of the path)."""
    if anchor == "root":
        return ["/"] if path.startswith("/") else [None]  # relative, no cwd: it may be anywhere
    if anchor == "cwd":
        return [base_cwd]
    found = _ANY_HOME.match(path) if any_home else None
    bases: list[str | None] = [normalize_path(home)] if home else []
    return [*bases, found.group(0)] if found and found.group(0) not in bases else bases


def path_matches(
    content: str, path: str, cwd: str | None, deny_rule: bool, home: str | None = None, any_home: bool | None = None
) -> bool:
    """Whether the path rule ``content`` matches ``path`` (relative paths are below ``cwd``;
    ``~`` is ``home``, the agent's, and with ``any_home`` (``deny_rule`` unless given) also every
    conventional home: see the module docstring)."""
    pattern = path_pattern(content, deny_rule)
    base_cwd = normalize_path(cwd) if cwd else None
    path = _absolute(path, base_cwd, home)
    for base in _bases(pattern.anchor, path, base_cwd, home, deny_rule if any_home is None else any_home):
        if base is None:  # no cwd: try the path as given and every tail of it
            parts = path.strip("/").split("/")
            return any(pattern.regex.fullmatch("/".join(parts[k:])) for k in range(len(parts)))
        rel = _relative(path, base)
        if rel is not None and pattern.regex.fullmatch(rel) is not None:
            return True
    return False


#: What every ``**/...`` rule's regex starts and ends with (:func:`path_pattern`).
_ANY_DEPTH: Final = "(?:.*/)?"
_BELOW: Final = "(?:/.*)?"


@dataclass(frozen=True, slots=True)
class PathRules:
    """Several path rules as one alternation per anchor; a match names the rule by its position."""

    #: Per anchor: the alternation, whose group ``r<i>`` is the rule at position ``i``, and a
    #: regex that matches the same paths faster, or ``None`` (see :func:`_prefilter`).
    by_anchor: tuple[tuple[Anchor, re.Pattern[str], re.Pattern[str] | None], ...]
    #: Deny and ask rules: ``~/`` also below every conventional home.
    any_home: bool = False

    @classmethod
    def compile(cls, rules: Sequence[tuple[int, str]], deny_rule: bool) -> PathRules:
        """``rules`` are ``(position, content)`` pairs in the list's order."""
        grouped: dict[Anchor, list[tuple[int, str]]] = {}
        for position, content in rules:
            pattern = path_pattern(content, deny_rule)
            grouped.setdefault(pattern.anchor, []).append((position, pattern.regex.pattern))
        by_anchor = tuple(
            (
                anchor,
                re.compile("|".join(f"(?P<r{position}>{p})" for position, p in parts), re.DOTALL),
                _prefilter([p for _, p in parts]),
            )
            for anchor, parts in grouped.items()
        )
        return cls(by_anchor, deny_rule)

    def first(self, path: str, cwd: str, home: str | None = None) -> int | None:
        """The position of the first rule that matches ``path`` (below ``cwd``, which is not empty;
        ``~`` is ``home``, the agent's)."""
        base_cwd = normalize_path(cwd)
        return self.first_at(_absolute(path, base_cwd, home), base_cwd, home)

    def first_at(self, path: str, base_cwd: str, home: str | None = None) -> int | None:
        """:meth:`first` of a path :func:`located` already (absolute, normalised; ``base_cwd``: the
        cwd normalised), so that the lists of every handler of a call read it once."""
        best: int | None = None
        for anchor, combined, prefilter in self.by_anchor:
            for base in _bases(anchor, path, base_cwd, home, self.any_home):
                rel = None if base is None else _relative(path, base)
                if rel is None or (prefilter is not None and prefilter.fullmatch(rel) is None):
                    continue
                found = combined.fullmatch(rel)
                if found is not None and found.lastgroup is not None:
                    position = int(found.lastgroup[1:])
                    best = position if best is None else min(best, position)
        return best


def located(paths: Sequence[str], cwd: str, home: str | None) -> tuple[str, tuple[str, ...]]:
    """``cwd`` normalised, and each of ``paths`` as :meth:`PathRules.first` reads it below it
    (absolute, normalised, ``~`` as ``home``)."""
    base_cwd = normalize_path(cwd)
    return base_cwd, tuple(_absolute(path, base_cwd, home) for path in paths)


def _prefilter(parts: list[str]) -> re.Pattern[str] | None:
    """A regex matching exactly the paths one of ``parts`` (the rules' regexes) matches, but
    faster: those of the form ``(?:.*/)?M(?:/.*)?`` (``**/.env``, ``**/*.pem``) as one
    ``(?:.*/)?(?:M1|M2|...)(?:/.*)?``, which scans the path for a ``/`` once instead of once per
    rule (the alternation must still name the first rule that matches: it runs only on the
    paths this one matches, few). Only a middle without ``|`` or ``(`` is taken, so that it is
    the same regex inside the group as between the prefix and the suffix; ``None`` when fewer
    than two rules have that form."""
    middles = {p: m for p in parts if (m := _middle(p)) is not None}
    if len(middles) < 2:
        return None
    factored = _ANY_DEPTH + "(?:" + "|".join(middles.values()) + ")" + _BELOW
    rest = [p for p in parts if p not in middles]
    return re.compile("|".join([factored, *(f"(?:{p})" for p in rest)]), re.DOTALL)


def _middle(pattern: str) -> str | None:
    """``M`` of a rule's regex ``(?:.*/)?M(?:/.*)?`` when ``M`` is the same regex on its own (no
    alternation, group, leading quantifier or trailing backslash), else ``None``."""
    if not (pattern.startswith(_ANY_DEPTH) and pattern.endswith(_BELOW)):
        return None
    middle = pattern[len(_ANY_DEPTH) : -len(_BELOW)]
    if not middle or any(c in middle for c in "|()") or middle[0] in "*+?{" or middle.endswith("\\"):
        return None
    return middle


__all__ = [
    "HOME_FIELD",
    "UNKNOWN_HOME",
    "Anchor",
    "PathPattern",
    "PathRules",
    "agent_home",
    "agent_path",
    "expand_home",
    "home_path",
    "located",
    "normalize_path",
    "path_matches",
    "path_pattern",
]
