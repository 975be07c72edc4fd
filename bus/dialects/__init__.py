"""Agent dialects: every coding agent's hook format, translated at the edge.

Inside hookbus everything is Claude Code's (events, input fields, tool names); a dialect
(:class:`~bus.dialects.base.Dialect`) maps one agent's hook input to that form on the way in
and the decision back to exactly what the agent accepts on the way out, and declares what
the agent can enforce. A client picks its dialect with ``?dialect=NAME`` on the hook URL or
the header ``X-Hookbus-Dialect: NAME``; ``claude`` (or nothing) is Claude Code itself, and
any other name than those in :data:`DIALECTS` is refused, so a typo never silently turns
into Claude Code's format.

Imports: bus.errors, bus.rules.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bus.dialects.auggie import Auggie
from bus.dialects.base import Dialect
from bus.dialects.cline import Cline
from bus.dialects.codex import CodexCli
from bus.dialects.copilot import CopilotCli
from bus.dialects.cursor import Cursor
from bus.dialects.droid import FactoryDroid
from bus.dialects.gemini import GeminiCli
from bus.dialects.kiro import Kiro
from bus.dialects.opencode import OpenCode
from bus.dialects.peri import Peri
from bus.dialects.qwen import QwenCode
from bus.dialects.windsurf import Windsurf


class Sdk(Dialect):
    """hookbus's own SDK: Claude Code's format, recorded as the agent ``sdk``."""

    name = "sdk"
    title = "hookbus SDK"
    verified = "hookbus's own SDK, in the test suite"


#: Every dialect by name, Claude Code's first.
DIALECTS: Final[dict[str, Dialect]] = {
    d.name: d
    for d in (
        Dialect(),
        GeminiCli(),
        CodexCli(),
        CopilotCli(),
        QwenCode(),
        Cline(),
        FactoryDroid(),
        OpenCode(),
        Cursor(),
        Windsurf(),
        Kiro(),
        Auggie(),
        Peri(),
        Sdk(),
    )
}
CLAUDE: Final = DIALECTS["claude"]


def dialect_for(name: str) -> Dialect:
    """The dialect a client asked for by ``name`` (case-insensitive; ``""`` is Claude Code).

    Raises ValueError, naming the known dialects, for any other name.
    """
    key = name.strip().lower() or "claude"
    dialect = DIALECTS.get(key)
    if dialect is None:
        raise ValueError(f"unknown dialect {name!r} (known dialects: {', '.join(DIALECTS)})")
    return dialect


def dialect_name(name: str) -> str:
    """The canonical name of a requested dialect (``""`` for Claude Code's own)."""
    found = dialect_for(name).name
    return "" if found == "claude" else found


def from_dialect(name: str, hook_input: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    """Translate ``hook_input`` (and its raw ``body``) from dialect ``name`` to Claude Code's format."""
    translated = dialect_for(name).to_canonical(hook_input)
    if translated is hook_input or translated == hook_input:
        return hook_input, body
    return translated, orjson.dumps(translated)


def to_dialect(
    name: str, event: str, output: dict[str, Any], agent_input: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Translate a Claude Code output object for ``event`` to what dialect ``name``'s clients read."""
    return dialect_for(name).to_agent(event, output, agent_input or {})


__all__ = ["CLAUDE", "DIALECTS", "Dialect", "Sdk", "dialect_for", "dialect_name", "from_dialect", "to_dialect"]
