"""The wildcard patterns of permission rules, matched in time linear in the text they test.

The text comes from the agent (a command of megabytes, a long path), so no pattern may
backtrack on it: a regex of three ``.*`` is quadratic on a text that almost matches. A
:class:`Glob` (``*`` matches any text) finds its literal parts left to right instead;
:func:`glob_regex` is for patterns of at most two ``*``, where a regex is still linear and
faster. :func:`gitignore_regex` translates the gitignore globs of file rules.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Glob:
    """``*`` matches any text (including ``/`` and spaces); everything else is literal.

    Matched in time linear in the text whatever the number of ``*`` (the literal parts are
    found left to right, each at its first place), where a regex of several ``.*`` backtracks.
    """

    parts: tuple[str, ...]
    ignore_case: bool = False

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of ``text`` matches."""
        parts = self.parts
        if self.ignore_case:
            text = text.lower()
        if len(parts) == 1:
            return text == parts[0]
        first, last = parts[0], parts[-1]
        end = len(text) - len(last)
        if end < len(first) or not text.startswith(first) or not text.endswith(last):
            return False
        pos = len(first)
        for part in parts[1:-1]:
            found = text.find(part, pos, end)
            if found < 0:
                return False
            pos = found + len(part)
        return True


@functools.lru_cache(maxsize=4096)
def glob(pattern: str, ignore_case: bool = False) -> Glob:
    """``pattern`` as a :class:`Glob` (cached)."""
    return Glob(tuple((part.lower() if ignore_case else part) for part in pattern.split("*")), ignore_case)


def glob_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """``pattern`` as a regex (``*`` is ``.*``): quicker than a :class:`Glob` while it has at most two ``*``."""
    body = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def gitignore_regex(pattern: str) -> str:
    """``**`` spans directories, ``*`` and ``?`` stay within one, ``[...]`` is a class."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        at_segment_start = i == 0 or pattern[i - 1] == "/"
        if at_segment_start and pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif at_segment_start and pattern.startswith("**", i) and i + 2 == n:
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            out.append("[" + ("^" if negate else "") + re.sub(r"([\\\[&~|])", r"\\\1", body[negate:]) + "]")
            i = end + 1
        elif pattern[i] == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


__all__ = ["Glob", "gitignore_regex", "glob", "glob_regex"]
