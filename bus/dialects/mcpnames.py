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

That split is a guess all the same: ``my_db_drop`` is server ``my_db`` or server ``my``. So a
name that more than one named server could begin keeps every reading in
:data:`TOOL_NAME_READINGS` (:func:`mcp_names`: after each server named, and the dialect's own
split), and the rules judge them all (:func:`tool_name_readings`): a deny or ask rule matches
when it matches any reading, an allow rule only when it matches every one. Where the agent says
where the server's name ends (Gemini's ``mcp_context``), there is one reading.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Literal

_SERVERS: Final[contextvars.ContextVar[frozenset[str]]] = contextvars.ContextVar(
    "hookbus_mcp_servers", default=frozenset()
)
#: ``mcp__<server>`` in a matcher or rule: a name that ends at ``__``, the end, or a separator
#: (not at a pattern's ``.*``: ``mcp__git.*`` names no server).
_NAMED: Final = re.compile(r"mcp__([A-Za-z0-9\-]+(?:_[A-Za-z0-9\-]+)*)(?=__|$|[\s|(),])")
#: The field of a canonical input that holds every name its MCP tool may have, its ``tool_name`` first.
TOOL_NAME_READINGS: Final = "tool_name_readings"
#: At most this many readings are judged (a name has as many as the servers named that it starts with).
MAX_READINGS: Final = 16
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


def mcp_names(joined: str, separator: str, default: Literal["first", "last"]) -> tuple[str, ...]:
    """Every ``mcp__<server>__<tool>`` that ``joined`` (``<server><separator><tool>``) may stand for,
    the one :func:`claude_mcp_name` picks first: the split after each server the policy names that
    ``joined`` starts with, and at the ``default`` separator; ``()`` when it has no separator with
    text on both sides."""
    named = sorted(
        (s for s in _SERVERS.get() if len(s) < len(joined) - 1 and joined.startswith(s + separator)),
        key=len,
        reverse=True,
    )
    names = [f"mcp__{server}__{joined[len(server) + len(separator) :]}" for server in named]
    if default == "first":
        server, sep, tool = joined.partition(separator)
    else:
        server, sep, tool = joined.rpartition(separator)
    if sep and server and tool:
        names.append(f"mcp__{server}__{tool}")
    return tuple(dict.fromkeys(names))


def claude_mcp_name(joined: str, separator: str, default: Literal["first", "last"]) -> str | None:
    """``mcp__<server>__<tool>`` of ``joined`` (``<server><separator><tool>``), or None when it has
    no separator with text on both sides. The longest server the policy names that ``joined``
    starts with wins; else it is split at the ``default`` separator."""
    names = mcp_names(joined, separator, default)
    return names[0] if names else None


def with_readings(hook_input: dict[str, Any], names: tuple[str, ...]) -> None:
    """Name the tool of ``hook_input`` ``names[0]``, keeping every reading when there is more than one."""
    hook_input["tool_name"] = names[0]
    if len(names) > 1:
        hook_input[TOOL_NAME_READINGS] = list(names)
    else:
        hook_input.pop(TOOL_NAME_READINGS, None)


def tool_name_readings(hook_input: Mapping[str, Any]) -> tuple[str, ...]:
    """The names a canonical input's MCP tool may have besides its ``tool_name`` (at most
    :data:`MAX_READINGS` in all; ``()`` for one that has no other, or is not an MCP tool)."""
    tool_name, given = hook_input.get("tool_name"), hook_input.get(TOOL_NAME_READINGS)
    if not isinstance(given, list) or not isinstance(tool_name, str) or not tool_name.startswith("mcp__"):
        return ()
    names = (n for n in given[:MAX_READINGS] if isinstance(n, str) and n.startswith("mcp__") and n != tool_name)
    return tuple(dict.fromkeys(names))


__all__ = [
    "MAX_READINGS",
    "TOOL_NAME_READINGS",
    "claude_mcp_name",
    "mcp_names",
    "naming_servers",
    "policy_servers",
    "tool_name_readings",
    "with_readings",
]
