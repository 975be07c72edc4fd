"""MCP tool names that do not say where the server's name ends, read the way the policy names servers.

Claude Code names an MCP tool ``mcp__<server>__<tool>``. Other agents join the two with a
character that may also be inside either name: Gemini CLI ``mcp_<server>_<tool>`` (without
``mcp_context``, ``mcp_my_server_delete`` is server ``my`` or ``my_server``), Copilot CLI
``<server>-<tool>`` (``context7-resolve-library-id``). A guess that splits it the wrong way
names another server, and that server's deny rules miss the call.

So the split prefers a server the policy itself names: every ``mcp__<server>`` in its
matchers and permission rules (:func:`policy_servers`, alternatives ``mcp__(a|b)__`` too). The
gateway sets them (:func:`naming_servers`) while the event's dialect translates it; among the
servers named, the longest that the name starts with wins. When the policy names none of them,
the dialect's own reading holds (Gemini's first ``_``, as Gemini itself parses its names;
Copilot's last ``-``).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Iterator
from typing import Final, Literal

_SERVERS: Final[contextvars.ContextVar[frozenset[str]]] = contextvars.ContextVar(
    "hookbus_mcp_servers", default=frozenset()
)
#: ``mcp__<server>`` in a matcher or rule: a name that ends at ``__``, the end, or a separator
#: (not at a pattern's ``.*``: ``mcp__git.*`` names no server).
_NAMED: Final = re.compile(r"mcp__([A-Za-z0-9\-]+(?:_[A-Za-z0-9\-]+)*)(?=__|$|[\s|(),])")
#: ``mcp__(a|b|c)__`` (or ``(?:a|b|c)``) in a matcher.
_ALTERNATIVES: Final = re.compile(r"mcp__\((?:\?:)?([A-Za-z0-9_|\-]+)\)")


def policy_servers(texts: Iterable[str]) -> frozenset[str]:
    """Every MCP server named in ``texts`` (matchers and permission rules)."""
    found: set[str] = set()
    for text in texts:
        if "mcp__" not in text:
            continue
        found.update(_NAMED.findall(text))
        for group in _ALTERNATIVES.findall(text):
            found.update(name for name in group.split("|") if name)
    return frozenset(found)


@contextlib.contextmanager
def naming_servers(servers: frozenset[str]) -> Iterator[None]:
    """Split MCP tool names by ``servers`` (those the policy names) inside the block."""
    token = _SERVERS.set(servers)
    try:
        yield
    finally:
        _SERVERS.reset(token)


def claude_mcp_name(joined: str, separator: str, default: Literal["first", "last"]) -> str | None:
    """``mcp__<server>__<tool>`` of ``joined`` (``<server><separator><tool>``), or None when it has
    no separator with text on both sides. The longest server the policy names that ``joined``
    starts with wins; else it is split at the ``default`` separator."""
    named = [s for s in _SERVERS.get() if len(s) < len(joined) - 1 and joined.startswith(s + separator)]
    if named:
        server = max(named, key=len)
        return f"mcp__{server}__{joined[len(server) + len(separator) :]}"
    if default == "first":
        server, sep, tool = joined.partition(separator)
    else:
        server, sep, tool = joined.rpartition(separator)
    return f"mcp__{server}__{tool}" if sep and server and tool else None


__all__ = ["claude_mcp_name", "naming_servers", "policy_servers"]
