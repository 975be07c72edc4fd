"""File path rules: gitignore globs anchored at the root, the home directory or the working directory.

``Read(**/.env)``, ``Edit(//etc/**)``, ``Read(~/.ssh/**)``: :func:`path_matches` tests one
pattern against one path. A pattern is anchored at ``//`` (the root), ``~/`` (home) or the
working directory (``/x``, ``./x``, ``x/y``); one without a slash matches at any depth below
it, and so does a one-directory pattern such as ``secrets/**`` in a deny or ask rule.

A rule pack checks every file tool call against every path rule it has, so
:class:`PathRules` compiles one list's patterns into one alternation per anchor: a path is
normalised once and matched once per anchor, and the first rule of the list that matches is
named by its group.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bus.rules.globs import gitignore_regex

Anchor = Literal["root", "home", "cwd"]
_WINDOWS_DRIVE: Final = re.compile(r"([A-Za-z]):[\\/]")


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


def _absolute(path: str, base_cwd: str | None) -> str:
    path = normalize_path(path)
    if not path.startswith("/") and base_cwd is not None:
        return posixpath.normpath(posixpath.join(base_cwd, path))
    return path


def _base(anchor: Anchor, base_cwd: str | None) -> str | None:
    if anchor == "root":
        return "/"
    if anchor == "home":
        return _home(os.environ.get("HOME"))
    return base_cwd


@functools.lru_cache(maxsize=8)
def _home(home: str | None) -> str:
    """The home directory, normalised: by ``$HOME`` (what ``~`` expands to), else the user's entry."""
    return normalize_path(os.path.expanduser("~"))


def path_matches(content: str, path: str, cwd: str | None, deny_rule: bool) -> bool:
    """Whether the path rule ``content`` matches ``path`` (relative paths are below ``cwd``)."""
    pattern = path_pattern(content, deny_rule)
    base_cwd = normalize_path(cwd) if cwd else None
    path = _absolute(path, base_cwd)
    base = _base(pattern.anchor, base_cwd)
    if base is None:  # no cwd: try the path as given and every tail of it
        parts = path.strip("/").split("/")
        return any(pattern.regex.fullmatch("/".join(parts[k:])) for k in range(len(parts)))
    rel = _relative(path, base)
    return rel is not None and pattern.regex.fullmatch(rel) is not None


@dataclass(frozen=True, slots=True)
class PathRules:
    """Several path rules as one alternation per anchor; a match names the rule by its position."""

    #: Per anchor: the alternation, whose group ``r<i>`` is the rule at position ``i``.
    by_anchor: tuple[tuple[Anchor, re.Pattern[str]], ...]

    @classmethod
    def compile(cls, rules: Sequence[tuple[int, str]], deny_rule: bool) -> PathRules:
        """``rules`` are ``(position, content)`` pairs in the list's order."""
        grouped: dict[Anchor, list[str]] = {}
        for position, content in rules:
            pattern = path_pattern(content, deny_rule)
            grouped.setdefault(pattern.anchor, []).append(f"(?P<r{position}>{pattern.regex.pattern})")
        return cls(tuple((anchor, re.compile("|".join(parts), re.DOTALL)) for anchor, parts in grouped.items()))

    def first(self, path: str, cwd: str) -> int | None:
        """The position of the first rule that matches ``path`` (below ``cwd``, which is not empty)."""
        base_cwd = normalize_path(cwd)
        path = _absolute(path, base_cwd)
        best: int | None = None
        for anchor, combined in self.by_anchor:
            base = _base(anchor, base_cwd)
            rel = None if base is None else _relative(path, base)
            found = None if rel is None else combined.fullmatch(rel)
            if found is not None and found.lastgroup is not None:
                position = int(found.lastgroup[1:])
                best = position if best is None else min(best, position)
        return best


__all__ = ["Anchor", "PathPattern", "PathRules", "normalize_path", "path_matches", "path_pattern"]
